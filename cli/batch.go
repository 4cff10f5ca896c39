package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "batch",
		summary: "generate for many prompts at once (JSON lines in, JSON lines out)",
		run:     runBatch,
	})
}

// batchLine is one input line of `mlxgo batch`: each field means what the
// generate flag of that name means.
type batchLine struct {
	ID                json.RawMessage `json:"id"`
	Prompt            *string         `json:"prompt"`
	PromptIDs         []int32         `json:"prompt_ids"`
	System            string          `json:"system"`
	Raw               bool            `json:"raw"`
	MaxTokens         *int            `json:"max_tokens"`
	Temp              float64         `json:"temp"`
	TopP              float64         `json:"top_p"`
	TopK              int             `json:"top_k"`
	MinP              float64         `json:"min_p"`
	Seed              *uint64         `json:"seed"`
	RepetitionPenalty float64         `json:"repetition_penalty"`
	Stop              []string        `json:"stop"`
	Logprobs          int             `json:"logprobs"`
	JSONSchema        json.RawMessage `json:"json_schema"`
	JoinAtStep        int             `json:"join_at_step"`
}

// batchRow is one input's state while the batch runs.
type batchRow struct {
	in      batchLine
	line    int // the request's 1-based number among the input lines, for errors
	opts    *generate.Options
	prompt  []int32
	row     *generate.Row
	ids     []int32
	lps     []tokenLogprobs
	text    strings.Builder
	detok   *tokenizer.Detokenizer
	stopper *generate.StopMatcher
	stopped bool // a stop string was generated
}

// runBatch reads one request per JSON line, runs them all through one
// generate.Batch (each joining at its join_at_step) and writes one JSON
// line per input, in input order, with generate --json's fields, then a
// summary line.
func runBatch(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var dir, input, backend, kvQuant string
	var maxBatch, budget, blockSize, kvBlocks, kvStart int
	var copyWeights, paged bool
	fl := newFlags("batch", stderr)
	fl.StringVar(&dir, "model", "", "model: a folder, a cached repo id, or demo / demo-q4 (default: the built-in demo model)")
	fl.StringVar(&input, "input", "", "JSON-lines file of requests (- for stdin)")
	fl.IntVar(&maxBatch, "max-batch", generate.DefaultMaxRows, "rows generating at once")
	fl.IntVar(&budget, "token-budget", generate.DefaultPrefillChunkSize, "tokens per forward pass (decode tokens first, then prefill chunks)")
	fl.StringVar(&backend, "backend", "auto", "compute backend: cpu, mlx, or auto")
	int8Flag(fl)
	fl.BoolVar(&copyWeights, "copy-weights", false, "copy weights into memory instead of mapping the files")
	fl.BoolVar(&paged, "paged-kv", true, "keep KV in a paged block pool (prefix blocks shared between rows); false: contiguous caches per row")
	fl.IntVar(&blockSize, "block-size", kv.DefaultBlockSize, "token slots per KV block (--paged-kv)")
	fl.IntVar(&kvBlocks, "kv-blocks", 0, "KV blocks per layer (--paged-kv; 0: room for --max-batch of the longest request)")
	addKVQuantFlag(fl, &kvQuant)
	fl.IntVar(&kvStart, "quantized-kv-start", generate.DefaultQuantizedKVStart, "context length from which the KV cache is quantized (--kv-quant with --paged-kv=false; a TurboQuant pool stores codes from the first token)")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo batch [--model MODEL] --input FILE.jsonl [--max-batch N]")
		fmt.Fprintln(stderr, `Each line: {"id": ..., "prompt": "..." | "prompt_ids": [...], "max_tokens", "temp", "top_p", "top_k", "min_p", "seed", "repetition_penalty", "stop", "logprobs", "json_schema", "raw", "system", "join_at_step"}`)
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	if input == "" || fl.NArg() > 0 {
		return fmt.Errorf("%w: give --input FILE.jsonl (and no arguments)", errUsage)
	}
	if maxBatch <= 0 || budget < maxBatch {
		return fmt.Errorf("%w: --max-batch must be > 0 and --token-budget at least --max-batch", errUsage)
	}
	if blockSize <= 0 || kvBlocks < 0 {
		return fmt.Errorf("%w: --block-size must be > 0 and --kv-blocks ≥ 0", errUsage)
	}
	turbo, err := parseKVQuantFlag(kvQuant, 0, "")
	if err != nil {
		return err
	}
	if turbo != nil && paged && fl.Changed("quantized-kv-start") {
		return fmt.Errorf("%w: --quantized-kv-start needs --paged-kv=false (a TurboQuant pool stores codes from the first token)", errUsage)
	}
	lines, err := readBatchInput(input, stdin)
	if err != nil {
		return err
	}
	if dir == "" {
		fmt.Fprintf(stderr, "mlxgo: no --model given; using the built-in demo model\n")
	}
	if dir, err = resolveModel(dir); err != nil {
		return err
	}
	var tok *tokenizer.Tokenizer
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		if tok, err = tokenizer.Load(dir); err != nil {
			return err
		}
	}
	m, be, err := loadModel(dir, backend, copyWeights, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkKVQuant(m, turbo); err != nil {
		return err
	}
	info := m.Info()
	eos := toInt32s(eosIDs(info.EOS, tok))
	gm := generate.Wrap(m, info.Vocab)
	rows := make([]*batchRow, len(lines))
	byRow := map[*generate.Row]*batchRow{}
	longest := 0
	for i, ln := range lines {
		r := &batchRow{in: ln, line: i + 1, stopper: generate.NewStopMatcher(ln.Stop...)}
		if tok != nil {
			r.detok = tok.NewDetokenizer(true)
		}
		rows[i] = r
		if r.opts, r.prompt, err = batchRequest(ln, tok, info.Vocab, info.EOS, eos, stderr); err != nil {
			return fmt.Errorf("input line %d: %w", r.line, err)
		}
		if turbo != nil && !paged { // paged: the pool's blocks hold the codes
			r.opts.KVQuant, r.opts.QuantizedKVStart = turbo, kvStart
		}
		longest = max(longest, len(r.prompt)+max(r.opts.MaxTokens, 0))
	}
	bo := generate.BatchOptions{MaxRows: maxBatch, TokenBudget: budget, Backend: be}
	if paged {
		if kvBlocks == 0 {
			kvBlocks = maxBatch * ((longest + blockSize - 1) / blockSize)
		}
		if bo.Pool, err = newKVPool(gm, blockSize, kvBlocks, turbo); err != nil {
			return err
		}
		defer bo.Pool.Free()
	}
	b, err := generate.NewBatch(gm, bo)
	if err != nil {
		return err
	}
	defer b.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	added := 0
	for step := 0; ; step++ {
		for _, r := range rows {
			if r.row == nil && r.in.JoinAtStep <= step {
				row, err := b.Add(ctx, r.prompt, r.opts)
				if errors.Is(err, sampler.ErrInvalidParams) {
					return fmt.Errorf("%w: input line %d: %v", errUsage, r.line, err)
				}
				if err != nil {
					return fmt.Errorf("input line %d: %w", r.line, err)
				}
				r.row, byRow[row] = row, r
				added++
			}
		}
		if added == len(rows) && b.Idle() {
			break
		}
		evs, err := b.Step()
		if err != nil {
			return err
		}
		for _, ev := range evs {
			r := byRow[ev.Row]
			r.add(ev.Tokens)
			if ev.Done && ev.Err != nil && !r.stopped && !errors.Is(ev.Err, context.Canceled) {
				return fmt.Errorf("input line %d: %w", r.line, ev.Err)
			}
			if ev.Done {
				r.flush()
			}
		}
		if ctx.Err() != nil && b.Idle() {
			break
		}
	}
	wall := time.Since(start).Seconds()
	enc := json.NewEncoder(stdout)
	for _, r := range rows {
		st := r.row.Stats()
		if r.stopped {
			st.StopReason = "stop"
		}
		out := struct {
			ID       json.RawMessage `json:"id,omitempty"`
			IDs      []int32         `json:"ids"`
			Text     string          `json:"text"`
			Logprobs []tokenLogprobs `json:"logprobs,omitempty"`
			Stats    jsonStats       `json:"stats"`
		}{r.in.ID, r.ids, r.text.String(), r.lps, jsonStats{Stats: st, Backend: be.Name()}}
		if out.IDs == nil {
			out.IDs = []int32{}
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	bs := b.Stats()
	tps := 0.0
	if wall > 0 {
		tps = float64(bs.GeneratedTokens) / wall
	}
	sum := map[string]any{
		"rows": len(rows), "generated_tokens": bs.GeneratedTokens, "wall_s": wall,
		"decode_tokens_per_sec": tps, "max_batch": bs.MaxRows, "steps": bs.Steps,
		"peak_blocks": bs.PeakBlocks,
	}
	if paged {
		sum["block_size"], sum["kv_blocks"], sum["cached_tokens"] = blockSize, bs.Blocks.Capacity, bs.CachedTokens
		sum["kv_bytes_peak"] = peakBytes(bs.Blocks)
	}
	return enc.Encode(map[string]any{"summary": sum})
}

// newKVPool makes a paged pool laid out like m's own caches
// (generate.PoolLayout), blocks blocks of blockSize slots per layer; with
// turbo, every layer with a cache of its own stores TurboQuant codes.
func newKVPool(m generate.Model, blockSize, blocks int, turbo *kv.TurboSpec) (*kv.Pool, error) {
	specs, err := generate.PoolLayout(m)
	if err != nil {
		return nil, err
	}
	if turbo != nil {
		if specs, err = kv.TurboLayerSpecs(specs, *turbo); err != nil {
			return nil, err
		}
	}
	return kv.NewPool(kv.PoolConfig{BlockSize: blockSize, Blocks: blocks, Layers: specs})
}

// peakBytes is the KV memory the pool's peak blocks held, layer by layer.
func peakBytes(s kv.PoolStats) int {
	n := 0
	for _, l := range s.Layers {
		n += l.Peak * l.BlockBytes
	}
	return n
}

// add takes a row's delivered tokens: ids, logprobs and text (through the
// stop matcher; a stop string cancels the row, and what follows it is
// dropped).
func (r *batchRow) add(toks []generate.Token) {
	for _, t := range toks {
		if r.stopped {
			return
		}
		r.ids = append(r.ids, t.ID)
		if r.in.Logprobs > 0 {
			r.lps = append(r.lps, newTokenLogprobs(t))
		}
		if r.detok == nil {
			continue
		}
		piece, hit := r.stopper.Add(r.detok.Add(int(t.ID)))
		r.text.WriteString(piece)
		if hit {
			r.stopped = true
			r.row.Cancel()
		}
	}
}

// flush ends the row's text once it is done.
func (r *batchRow) flush() {
	if r.detok == nil || r.stopped {
		return
	}
	piece, hit := r.stopper.Add(r.detok.Flush())
	r.text.WriteString(piece)
	if !hit {
		r.text.WriteString(r.stopper.Flush())
	} else {
		r.stopped = true
	}
}

// readBatchInput parses the JSON lines (blank lines skipped; unknown
// fields refused, so a typo is not silently ignored).
func readBatchInput(path string, stdin io.Reader) ([]batchLine, error) {
	var rd io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		rd = f
	}
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	var out []batchLine
	for n := 1; sc.Scan(); n++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var ln batchLine
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ln); err != nil {
			return nil, fmt.Errorf("%w: input line %d: %v", errUsage, n, err)
		}
		if (ln.Prompt == nil) == (ln.PromptIDs == nil) {
			return nil, fmt.Errorf("%w: input line %d: give exactly one of prompt and prompt_ids", errUsage, n)
		}
		if ln.JoinAtStep < 0 || ln.Logprobs < 0 {
			return nil, fmt.Errorf("%w: input line %d: join_at_step and logprobs must be ≥ 0", errUsage, n)
		}
		out = append(out, ln)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s holds no requests", errUsage, path)
	}
	return out, nil
}

// batchRequest turns an input line into generate options and prompt ids,
// the way the generate verb turns its flags into them.
func batchRequest(ln batchLine, tok *tokenizer.Tokenizer, vocab int, modelEOS []int, eos []int32, stderr io.Writer) (*generate.Options, []int32, error) {
	f := genFlags{system: ln.System, raw: ln.Raw}
	if ln.Prompt != nil {
		f.prompt = *ln.Prompt
	} else {
		s := make([]string, len(ln.PromptIDs))
		for i, id := range ln.PromptIDs {
			s[i] = strconv.Itoa(int(id))
		}
		f.promptIDs = strings.Join(s, ",")
	}
	if len(ln.JSONSchema) > 0 {
		f.gram.jsonSchema = string(ln.JSONSchema)
		if s := strings.TrimSpace(f.gram.jsonSchema); !strings.HasPrefix(s, "{") {
			return nil, nil, fmt.Errorf("%w: json_schema must be a JSON object", errUsage)
		}
	}
	ids, err := promptTokens(&f, tok, stderr)
	if err != nil {
		return nil, nil, err
	}
	maxTokens := 256
	if ln.MaxTokens != nil {
		maxTokens = *ln.MaxTokens
	}
	params := sampler.Params{Temperature: ln.Temp, TopP: ln.TopP, TopK: ln.TopK, MinP: ln.MinP,
		RepetitionPenalty: ln.RepetitionPenalty, TopLogprobs: ln.Logprobs, Logprobs: ln.Logprobs > 0, Seed: ln.Seed}
	opts := &generate.Options{MaxTokens: maxTokens, Sampler: params, EOS: eos}
	gram, err := f.gram.parse()
	if err != nil {
		return nil, nil, err
	}
	if gram != nil {
		if err := useGrammar(gram, &f, tok, vocab, modelEOS, opts, stderr); err != nil {
			return nil, nil, err
		}
	}
	return opts, ids, nil
}
