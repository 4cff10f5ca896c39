// Command gguf writes GGUF files (llama.cpp's model format) from Hugging
// Face Llama checkpoints, so that mlxgo and llama.cpp can be measured on
// the very same weights:
//
//	gguf random-llama -out DIR [-seed N] [-shape 1b|tiny]
//	    writes a random F16 Llama folder (config.json, model.safetensors,
//	    tokenizer.json) of the benchmarks' 1B shape
//	gguf convert -in DIR -out FILE.gguf [-type f16|f32]
//	    converts a float Llama folder to GGUF
//	gguf info FILE.gguf
//	    prints a GGUF file's metadata, tensor types and bits per weight
//
// The converter follows the GGUF v3 layout; query and key projections are
// re-ordered from Hugging Face's rotary layout to the interleaved one of
// llama.cpp's Llama graph, and the tokenizer.json vocabulary becomes a
// SentencePiece ("llama") vocabulary with the same ids, so both engines
// read the same token ids. Quantize the result with llama-quantize.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gguf:", err)
		os.Exit(1)
	}
}

const usage = "usage: gguf random-llama -out DIR | convert -in DIR -out FILE [-type f16|f32] | info FILE"

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", usage)
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch args[0] {
	case "random-llama":
		out := fs.String("out", "", "folder to write")
		seed := fs.Uint64("seed", 1, "seed of the weights")
		shape := fs.String("shape", "1b", "1b (the benchmarks' shape) or tiny (for tests)")
		vocab := fs.Int("vocab", 0, "vocabulary size instead of the shape's")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *out == "" {
			return fmt.Errorf("random-llama: -out is required")
		}
		s := Llama1B
		switch *shape {
		case "1b":
		case "tiny":
			s = tinyShape
		default:
			return fmt.Errorf("random-llama: -shape %q: want 1b or tiny", *shape)
		}
		if *vocab != 0 {
			s.Vocab = *vocab
		}
		return WriteRandomLlama(*out, s, *seed)
	case "convert":
		in := fs.String("in", "", "Llama checkpoint folder")
		out := fs.String("out", "", "GGUF file to write")
		typ := fs.String("type", "f16", "element type of the matrices: f16 or f32")
		name := fs.String("name", "", "general.name (default: the folder's name)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *in == "" || *out == "" {
			return fmt.Errorf("convert: -in and -out are required")
		}
		opt := ConvertOptions{Name: *name}
		switch strings.ToLower(*typ) {
		case "f16":
			opt.Type = TypeF16
		case "f32":
			opt.Type = TypeF32
		default:
			return fmt.Errorf("convert: -type %q: want f16 or f32", *typ)
		}
		return ConvertLlama(*in, *out, opt)
	case "info":
		if len(args) != 2 {
			return fmt.Errorf("info: want one file")
		}
		return printInfo(args[1], stdout)
	}
	return fmt.Errorf("unknown command %q; %s", args[0], usage)
}

// tinyShape is a small Llama for tests.
var tinyShape = LlamaShape{Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, FFN: 128, Vocab: 512}

// printInfo prints the metadata (arrays by length) and, per element type,
// the tensors' count, bytes and bits per weight.
func printInfo(path string, w io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	h, err := ReadHeader(f, st.Size())
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: GGUF v%d, %d keys, %d tensors, %d bytes\n", path, h.Version, len(h.Keys), len(h.Tensors), st.Size())
	for _, k := range h.Keys {
		v := h.KV[k]
		if a, ok := v.([]any); ok {
			fmt.Fprintf(w, "  %s = [%d values]\n", k, len(a))
			continue
		}
		fmt.Fprintf(w, "  %s = %v\n", k, v)
	}
	type agg struct{ n, elems, bytes uint64 }
	byType := map[GGMLType]*agg{}
	var total agg
	for _, t := range h.Tensors {
		a := byType[t.Type]
		if a == nil {
			a = &agg{}
			byType[t.Type] = a
		}
		e := elements(t.Dims)
		a.n++
		a.elems += e
		a.bytes += t.Size
		total.elems += e
		total.bytes += t.Size
	}
	types := make([]GGMLType, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		a := byType[t]
		fmt.Fprintf(w, "  %-5s %4d tensors %13d weights %12d bytes %.3f bits/weight\n", t, a.n, a.elems, a.bytes, 8*float64(a.bytes)/float64(a.elems))
	}
	fmt.Fprintf(w, "  all   %4d tensors %13d weights %12d bytes %.3f bits/weight\n", len(h.Tensors), total.elems, total.bytes, 8*float64(total.bytes)/float64(total.elems))
	return nil
}
