// Command mlxgo runs, serves and inspects language models with mlxgo.
//
// Usage:
//
//	mlxgo <verb> [flags]
//
// Each verb lives in its own file and registers itself in init with
// register; `mlxgo help` lists them. With no verb, mlxgo serves.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
)

// command is one verb of the mlxgo binary.
type command struct {
	name    string
	summary string
	// run executes the verb with its arguments (after the verb) and the
	// process's standard streams; it returns an error for a non-zero exit.
	run func(args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

// register adds a verb; verbs call it from init.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("mlxgo: verb registered twice: " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks an error caused by bad arguments (exit status 2).
var errUsage = errors.New("usage")

// defaultVerb runs when no verb is given (serve.go sets it to "serve").
var defaultVerb = "help"

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// runMain dispatches args to a verb and returns the exit status.
func runMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	verb := defaultVerb
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		verb, args = "help", nil
	} else if len(args) > 0 && args[0] == "--version" {
		verb, args = "version", nil
	}
	c, ok := commands[verb]
	if !ok {
		fmt.Fprintf(stderr, "mlxgo: unknown verb %q\n\n", verb)
		printUsage(stderr)
		return 2
	}
	if err := c.run(args, stdin, stdout, stderr); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "mlxgo %s: %v\n", verb, err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// newFlags makes a flag set for a verb that reports errors instead of exiting.
func newFlags(verb string, stderr io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet("mlxgo "+verb, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args, wrapping flag errors as usage errors.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return nil
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "Usage: mlxgo <verb> [flags]")
	fmt.Fprintln(w, "\nVerbs:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'mlxgo <verb> --help' for a verb's flags.")
}

func init() {
	register(&command{
		name:    "help",
		summary: "list the verbs",
		run: func(args []string, _ io.Reader, stdout, _ io.Writer) error {
			printUsage(stdout)
			return nil
		},
	})
}
