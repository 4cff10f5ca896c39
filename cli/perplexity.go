package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "perplexity",
		summary: "measure a model's perplexity on text (and what a KV scheme costs, with --ref)",
		run:     runPerplexity,
	})
}

// pplFlags are the perplexity verb's flags.
type pplFlags struct {
	dir, data, backend, kvConfig, kvQuant string
	seqLen, samples, chunk                int
	kvBits, kvGroup, kvStart              int
	seed                                  uint64
	asJSON, ref, copyWeights              bool
}

// runPerplexity tokenizes --data (plain text, or JSONL with a "text"
// field per line), cuts the token stream into windows of --seq-len, picks
// --num-samples of them at random (--seed) and scores each through
// generate.Score: the chunked, cached prefill path, so every KV flag is
// measured. It prints the perplexity (exp of the mean NLL) with its
// standard error and, with --ref, the mean KL of each position against an
// unquantized run of the same model.
func runPerplexity(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var f pplFlags
	fl := newFlags("perplexity", stderr)
	fl.StringVar(&f.dir, "model", "", "model: a folder, a cached repo id, or demo (default: the built-in demo model)")
	fl.StringVar(&f.data, "data", "", "text to score: a plain-text file, or JSONL with a \"text\" field per line")
	fl.IntVar(&f.seqLen, "seq-len", 512, "tokens per scored sequence")
	fl.IntVar(&f.samples, "num-samples", 8, "sequences to score (-1: every window of the data)")
	fl.Uint64Var(&f.seed, "seed", 123, "seed choosing the sequences")
	fl.IntVar(&f.chunk, "prefill-chunk-size", 64, "tokens per forward pass (small, so that later tokens read quantized KV)")
	fl.IntVar(&f.kvBits, "kv-bits", 0, "affine-quantize the KV cache to this many bits (4 or 8; 0: off)")
	fl.IntVar(&f.kvGroup, "kv-group-size", generate.DefaultKVGroupSize, "KV quantization group size")
	fl.IntVar(&f.kvStart, "quantized-kv-start", 0, "offset from which the KV cache is quantized")
	fl.StringVar(&f.kvConfig, "kv-config", "", "kv_config.json with per-layer KV bits and group sizes")
	addKVQuantFlag(fl, &f.kvQuant)
	fl.BoolVar(&f.ref, "ref", false, "also run unquantized caches and report mean_kl, the mean KL of each position against them")
	fl.StringVar(&f.backend, "backend", "auto", "compute backend: cpu, mlx, or auto")
	int8Flag(fl)
	fl.BoolVar(&f.copyWeights, "copy-weights", false, "copy weights into memory instead of mapping the files")
	fl.BoolVar(&f.asJSON, "json", false, `print {"perplexity", "tokens", ...} as one JSON object`)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo perplexity [--model MODEL] --data FILE [flags]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	switch {
	case fl.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fl.Arg(0))
	case f.data == "":
		return fmt.Errorf("%w: --data is required", errUsage)
	case f.seqLen < 2:
		return fmt.Errorf("%w: --seq-len must be ≥ 2", errUsage)
	case f.chunk <= 0:
		return fmt.Errorf("%w: --prefill-chunk-size must be > 0", errUsage)
	case f.samples == 0 || f.samples < -1:
		return fmt.Errorf("%w: --num-samples must be > 0 or -1", errUsage)
	}
	opts := &generate.Options{PrefillChunkSize: f.chunk, KVBits: f.kvBits, KVGroupSize: f.kvGroup, QuantizedKVStart: f.kvStart}
	var err error
	if opts.KVQuant, err = parseKVQuantFlag(f.kvQuant, f.kvBits, f.kvConfig); err != nil {
		return err
	}
	if f.kvConfig != "" {
		if opts.KVConfig, err = kv.ReadKVConfig(f.kvConfig); err != nil {
			return fmt.Errorf("%w: --kv-config: %v", errUsage, err)
		}
	}
	texts, err := readTexts(f.data)
	if err != nil {
		return err
	}
	if f.dir == "" {
		fmt.Fprintf(stderr, "mlxgo: no --model given; using the built-in demo model\n")
	}
	if f.dir, err = resolveModel(f.dir); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(f.dir, "tokenizer.json")); err != nil {
		return fmt.Errorf("perplexity needs the model's tokenizer.json: %w", err)
	}
	tok, err := tokenizer.Load(f.dir)
	if err != nil {
		return err
	}
	var stream []int32
	for _, t := range texts {
		for _, id := range tok.Encode(t, true) {
			stream = append(stream, int32(id))
		}
	}
	seqs := pickWindows(stream, f.seqLen, f.samples, f.seed)
	if len(seqs) == 0 {
		return fmt.Errorf("%w: --data holds %d tokens, fewer than one --seq-len window of %d", errUsage, len(stream), f.seqLen)
	}
	m, be, err := loadModel(f.dir, f.backend, f.copyWeights, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkKVQuant(m, opts.KVQuant); err != nil {
		return err
	}
	opts.Backend = be
	gm := generate.Wrap(m, m.Info().Vocab)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var tot generate.ScoreResult
	for i, s := range seqs {
		r, err := generate.Score(ctx, gm, s, opts, f.ref)
		if err != nil {
			return err
		}
		tot.Tokens += r.Tokens
		tot.NLL += r.NLL
		tot.NLLSq += r.NLLSq
		tot.KL += r.KL
		tot.KVBytes = max(tot.KVBytes, r.KVBytes)
		tot.LiveKVBytes = max(tot.LiveKVBytes, r.LiveKVBytes)
		if !f.asJSON {
			fmt.Fprintf(stderr, "sample %d/%d: perplexity %.4f\n", i+1, len(seqs), math.Exp(r.NLL/float64(r.Tokens)))
		}
	}
	n := float64(tot.Tokens)
	mean := tot.NLL / n
	ppl := math.Exp(mean)
	se := ppl * math.Sqrt(max(tot.NLLSq/n-mean*mean, 0)/n)
	scheme := "bf16"
	switch {
	case opts.KVQuant != nil:
		scheme = opts.KVQuant.String()
	case f.kvBits != 0:
		scheme = fmt.Sprintf("kv%d (group %d)", f.kvBits, f.kvGroup)
	case f.kvConfig != "":
		scheme = "kv-config"
	}
	res := map[string]any{"perplexity": ppl, "perplexity_se": se, "tokens": tot.Tokens, "nll": mean,
		"samples": len(seqs), "seq_len": f.seqLen, "kv_scheme": scheme, "kv_bytes": tot.KVBytes,
		"kv_bytes_per_token": float64(tot.LiveKVBytes) / float64(f.seqLen-1)}
	if f.ref {
		res["mean_kl"] = tot.KL / n
	}
	if f.asJSON {
		js, _ := json.Marshal(res)
		_, err := fmt.Fprintln(stdout, string(js))
		return err
	}
	fmt.Fprintf(stdout, "perplexity %.4f ± %.4f over %d tokens (%d × %d), KV %s: %d bytes\n", ppl, se, tot.Tokens, len(seqs), f.seqLen, scheme, tot.KVBytes)
	if f.ref {
		fmt.Fprintf(stdout, "mean KL vs unquantized KV: %.6f\n", tot.KL/n)
	}
	return nil
}

// readTexts reads a plain-text file (one text) or a JSONL file (a "text"
// field per line; the .jsonl extension or a first line that is a JSON
// object selects it).
func readTexts(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --data: %v", errUsage, err)
	}
	trim := bytes.TrimSpace(raw)
	if !strings.HasSuffix(path, ".jsonl") && !bytes.HasPrefix(trim, []byte("{")) {
		return []string{string(raw)}, nil
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<30)
	for line := 1; sc.Scan(); line++ {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		var rec struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(l, &rec); err != nil || rec.Text == nil {
			return nil, fmt.Errorf("%w: --data %s line %d: want a JSON object with a \"text\" string", errUsage, path, line)
		}
		out = append(out, *rec.Text)
	}
	return out, sc.Err()
}

// pickWindows cuts stream into consecutive windows of n tokens and returns
// k of them chosen at random by seed, in their original order (all of
// them when k is -1 or at least their number).
func pickWindows(stream []int32, n, k int, seed uint64) [][]int32 {
	var all [][]int32
	for i := 0; i+n <= len(stream); i += n {
		all = append(all, stream[i:i+n])
	}
	if k < 0 || k >= len(all) {
		return all
	}
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	keep := r.Perm(len(all))[:k]
	chosen := make([]bool, len(all))
	for _, i := range keep {
		chosen[i] = true
	}
	var out [][]int32
	for i, w := range all {
		if chosen[i] {
			out = append(out, w)
		}
	}
	return out
}
