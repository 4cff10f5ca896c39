package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "tokenize",
		summary: "print the token ids of text read from stdin",
		run:     runTokenize,
	})
}

// runTokenize encodes stdin. The text is encoded exactly as read, trailing
// newline included (use printf or echo -n to leave it out). With --jsonl each
// line is a JSON string and each output line its JSON id array.
func runTokenize(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("tokenize", stderr)
	modelDir := fs.String("model", "", "model folder with tokenizer.json (required)")
	noSpecial := fs.Bool("no-special", false, "do not add special tokens such as BOS (add_special_tokens=False)")
	asJSON := fs.Bool("json", false, "print the ids as a JSON array")
	jsonl := fs.Bool("jsonl", false, "read one JSON string per line and print one JSON id array per line")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo tokenize --model DIR [--no-special] [--json] [--jsonl] < text")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (the text is read from stdin)", errUsage, fs.Arg(0))
	}
	if *modelDir == "" {
		return fmt.Errorf("%w: --model is required", errUsage)
	}
	if *asJSON && *jsonl {
		return fmt.Errorf("%w: --json and --jsonl cannot be combined", errUsage)
	}
	tk, err := tokenizer.Load(*modelDir)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	if *jsonl {
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		line := 0
		for sc.Scan() {
			line++
			raw := strings.TrimSpace(sc.Text())
			if raw == "" {
				continue
			}
			var text string
			if err := json.Unmarshal([]byte(raw), &text); err != nil {
				return fmt.Errorf("stdin line %d: want a JSON string: %v", line, err)
			}
			writeIDs(w, tk.Encode(text, !*noSpecial), true)
			w.WriteByte('\n')
		}
		if err := sc.Err(); err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		return w.Flush()
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	writeIDs(w, tk.Encode(string(data), !*noSpecial), *asJSON)
	w.WriteByte('\n')
	return w.Flush()
}

// writeIDs writes ids as a JSON array or separated by spaces.
func writeIDs(w *bufio.Writer, ids []int, asJSON bool) {
	sep := " "
	if asJSON {
		w.WriteByte('[')
		sep = ","
	}
	for i, id := range ids {
		if i > 0 {
			w.WriteString(sep)
		}
		w.WriteString(strconv.Itoa(id))
	}
	if asJSON {
		w.WriteByte(']')
	}
}
