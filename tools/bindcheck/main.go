// Command bindcheck compares mlxffi's Go declarations of mlx-c functions
// with the C prototypes of an mlx-c include directory and lists every
// bound function whose argument count, argument types or result disagree.
// A wrong declaration is not caught by the compiler or the dynamic loader;
// it corrupts the call at run time, so this check stands in for cgo's.
//
// Usage:
//
//	go run ./bindcheck [-json] /usr/local/include
//
// The exit status is 1 when there is a mismatch.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/mlxgo/mlxgo/mlxffi"
)

func main() {
	asJSON := flag.Bool("json", false, "print the result as JSON")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: bindcheck [-json] MLX_C_INCLUDE_DIR")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	protos, td, err := parseDir(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bindcheck:", err)
		os.Exit(2)
	}
	sigs := mlxffi.Signatures()
	bad := check(sigs, protos, td)
	if *asJSON {
		out := struct {
			Checked    int        `json:"checked"`
			Prototypes int        `json:"prototypes"`
			Mismatches []mismatch `json:"mismatches"`
		}{len(sigs), len(protos), bad}
		_ = json.NewEncoder(os.Stdout).Encode(out)
	} else {
		for _, m := range bad {
			fmt.Println(m)
		}
		fmt.Printf("bindcheck: %d bound functions checked against %d prototypes: %d mismatches\n", len(sigs), len(protos), len(bad))
	}
	if len(bad) > 0 {
		os.Exit(1)
	}
}
