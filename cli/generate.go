package main

import (
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

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "generate",
		summary: "generate a continuation of a prompt",
		run:     runGenerate,
	})
}

// genFlags are the generate verb's flags.
type genFlags struct {
	dir, promptIDs, prompt, system, backend, kvConfig string
	kvQuant                                           string
	maxTokens, chunk, chunkOld, topK, logprobs        int
	kvBits, kvGroup, kvStart                          int
	temp, topP, minP, repPenalty                      float64
	seed                                              uint64
	raw, ignoreEOS, copyWeights, asJSON               bool
	stops                                             []string
	adapters                                          []string
	gram                                              grammarFlags
	experts                                           expertFlags
	spec                                              specFlags
	media                                             []mediaArg
}

// runGenerate loads a model, builds the prompt (chat template applied to
// --prompt unless --raw) and streams the continuation through the
// generate package: text to stdout as it is decoded, statistics to
// stderr; with --json one object with ids, text and stats.
func runGenerate(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var f genFlags
	fl := newFlags("generate", stderr)
	fl.StringVar(&f.dir, "model", "", "model: a folder, a cached repo id (or a unique part of one), or demo / demo-q4 (default: the built-in demo model)")
	fl.StringVar(&f.promptIDs, "prompt-ids", "", "comma-separated prompt token ids (used as is)")
	fl.StringVar(&f.prompt, "prompt", "", "prompt text (needs tokenizer.json in the model folder)")
	fl.StringVar(&f.system, "system", "", "system message for the chat template")
	fl.BoolVar(&f.raw, "raw", false, "tokenize --prompt as is, without the chat template")
	fl.IntVar(&f.maxTokens, "max-tokens", 256, "tokens to generate at most (-1: no limit)")
	fl.IntVar(&f.chunk, "prefill-chunk-size", generate.DefaultPrefillChunkSize, "prompt tokens per forward pass during prefill")
	fl.IntVar(&f.chunkOld, "prefill-chunk", 0, "alias of --prefill-chunk-size")
	_ = fl.MarkHidden("prefill-chunk")
	fl.Float64Var(&f.temp, "temp", 0, "sampling temperature (0: greedy)")
	fl.Float64Var(&f.topP, "top-p", 0, "nucleus sampling threshold (0 or 1: off)")
	fl.IntVar(&f.topK, "top-k", 0, "sample among the k most likely tokens (0: off)")
	fl.Float64Var(&f.minP, "min-p", 0, "drop tokens less likely than min-p × the top one (0: off)")
	fl.Uint64Var(&f.seed, "seed", 0, "random seed (default: drawn from the system)")
	fl.Float64Var(&f.repPenalty, "repetition-penalty", 0, "penalty for tokens of the last 20 (0 or 1: off)")
	fl.IntVar(&f.logprobs, "logprobs", 0, "report each token's logprob and the N most likely alternatives")
	fl.StringArrayVar(&f.stops, "stop", nil, "stop when this text is generated (repeatable)")
	fl.IntVar(&f.kvBits, "kv-bits", 0, "quantize the KV cache to this many bits (4 or 8; 0: off)")
	fl.IntVar(&f.kvGroup, "kv-group-size", generate.DefaultKVGroupSize, "KV quantization group size")
	fl.IntVar(&f.kvStart, "quantized-kv-start", generate.DefaultQuantizedKVStart, "context length from which the KV cache is quantized")
	fl.StringVar(&f.kvConfig, "kv-config", "", "kv_config.json with per-layer KV bits and group sizes")
	addKVQuantFlag(fl, &f.kvQuant)
	fl.StringVar(&f.backend, "backend", "auto", "compute backend: cpu, mlx, or auto (mlx when MLX has a GPU device, else cpu)")
	int8Flag(fl)
	fl.BoolVar(&f.ignoreEOS, "ignore-eos", false, "keep going past end-of-sequence tokens")
	fl.BoolVar(&f.copyWeights, "copy-weights", false, "copy weights into memory instead of mapping the files")
	fl.StringArrayVar(&f.adapters, "adapter-path", nil, adapterUsage)
	fl.BoolVar(&f.asJSON, "json", false, `print {"ids": [...], "text": "...", "stats": {...}} instead of streaming`)
	addGrammarFlags(fl, &f.gram)
	addExpertFlags(fl, &f.experts)
	addSpecFlags(fl, &f.spec)
	addMediaFlags(fl, &f.media)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo generate [--model MODEL] (PROMPT | --prompt TEXT | --prompt-ids 1,2,3) [flags]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	if fl.Changed("prefill-chunk") {
		f.chunk = f.chunkOld
	}
	if fl.NArg() == 1 && f.prompt == "" && f.promptIDs == "" {
		f.prompt = fl.Arg(0) // mlxgo generate "prompt text"
	} else if fl.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fl.Arg(0))
	}
	if f.dir == "" {
		fmt.Fprintf(stderr, "mlxgo: no --model given; using the built-in demo model\n")
	}
	dir, err := resolveModel(f.dir)
	if err != nil {
		return err
	}
	f.dir = dir
	switch {
	case (f.promptIDs == "") == (f.prompt == ""):
		return fmt.Errorf("%w: give exactly one of --prompt-ids and --prompt", errUsage)
	case f.chunk <= 0:
		return fmt.Errorf("%w: --prefill-chunk-size must be > 0", errUsage)
	case f.logprobs < 0:
		return fmt.Errorf("%w: --logprobs must be ≥ 0", errUsage)
	}
	gram, err := f.gram.parse()
	if err != nil {
		return err
	}
	if f.maxTokens == 0 {
		return printResult(stdout, f.asJSON, nil, "", nil, jsonStats{})
	}
	params := sampler.Params{Temperature: f.temp, TopP: f.topP, TopK: f.topK, MinP: f.minP,
		RepetitionPenalty: f.repPenalty, TopLogprobs: f.logprobs, Logprobs: f.logprobs > 0}
	if fl.Changed("seed") {
		params.Seed = &f.seed
	}
	opts := &generate.Options{MaxTokens: f.maxTokens, PrefillChunkSize: f.chunk, Sampler: params,
		KVBits: f.kvBits, KVGroupSize: f.kvGroup, QuantizedKVStart: f.kvStart}
	if opts.KVQuant, err = parseKVQuantFlag(f.kvQuant, f.kvBits, f.kvConfig); err != nil {
		return err
	}
	if f.kvConfig != "" {
		cfg, err := kv.ReadKVConfig(f.kvConfig)
		if err != nil {
			return fmt.Errorf("%w: --kv-config: %v", errUsage, err)
		}
		opts.KVConfig = cfg
	}

	var tok *tokenizer.Tokenizer
	if _, err := os.Stat(filepath.Join(f.dir, "tokenizer.json")); err == nil {
		if tok, err = tokenizer.Load(f.dir); err != nil {
			return err
		}
	}
	if len(f.media) > 0 && f.prompt != "" && tok != nil {
		ph, err := mediaPlaceholders(f.dir, tok, f.media)
		if err != nil {
			return err
		}
		f.prompt = ph + f.prompt
	}
	ids, err := promptTokens(&f, tok, stderr)
	if err != nil {
		return err
	}
	es, err := f.experts.streaming(f.dir)
	if err != nil {
		return err
	}
	m, be, err := loadModelOpts(f.dir, f.backend, f.copyWeights, f.adapters, es, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkKVQuant(m, opts.KVQuant); err != nil {
		return err
	}
	opts.Backend = be
	sp, closeDraft, err := f.spec.build(m, f.dir, tok, be, f.copyWeights, stderr)
	if err != nil {
		return err
	}
	defer closeDraft()
	opts.Speculation = sp
	info := m.Info()
	if !f.ignoreEOS {
		opts.EOS = toInt32s(eosIDs(info.EOS, tok))
	}

	if gram != nil {
		if err := useGrammar(gram, &f, tok, info.Vocab, info.EOS, opts, stderr); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var fwd model.Model = m
	if len(f.media) > 0 {
		if sp != nil {
			return fmt.Errorf("%w: --image/--audio do not combine with speculative decoding", errUsage)
		}
		wm, mids, done, err := withMedia(f.dir, be, m, ids, f.media, f.promptIDs != "", &opts.PrefillChunkSize)
		if err != nil {
			return err
		}
		defer done()
		fwd, ids = wm, mids
	}
	s, err := generate.Generate(ctx, generate.Wrap(fwd, info.Vocab), ids, opts)
	if errors.Is(err, sampler.ErrInvalidParams) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return err
	}
	defer s.Close()

	var detok *tokenizer.Detokenizer
	if tok != nil {
		detok = tok.NewDetokenizer(true)
	}
	stopper := generate.NewStopMatcher(f.stops...)
	var out []int32
	var lps []tokenLogprobs
	var text strings.Builder
	emit := func(piece string) {
		text.WriteString(piece)
		if !f.asJSON {
			fmt.Fprint(stdout, piece)
		}
	}
	stopped := false
	var genErr error
	for t, err := range s.Tokens() {
		if err != nil {
			genErr = err
			break
		}
		out = append(out, t.ID)
		if f.logprobs > 0 {
			lps = append(lps, newTokenLogprobs(t))
		}
		if detok == nil {
			if !f.asJSON {
				sep := ","
				if len(out) == 1 {
					sep = ""
				}
				fmt.Fprint(stdout, sep+strconv.Itoa(int(t.ID)))
			}
			continue
		}
		piece, hit := stopper.Add(detok.Add(int(t.ID)))
		emit(piece)
		if hit {
			stopped = true
			break
		}
	}
	if detok != nil && !stopped {
		piece, hit := stopper.Add(detok.Flush())
		emit(piece)
		if !hit {
			emit(stopper.Flush())
		}
	}
	st := s.Stats()
	if genErr != nil && !errors.Is(genErr, context.Canceled) {
		return genErr
	}
	js := jsonStats{Stats: st, Backend: be.Name()}
	if es, ok := expertStats(m); ok {
		js.Experts = newExpertReport(es, st.PromptTokens+st.GeneratedTokens)
	}
	if f.asJSON {
		return printResult(stdout, true, out, text.String(), lps, js)
	}
	fmt.Fprintln(stdout)
	printStats(stderr, st)
	if js.Experts != nil {
		printExpertStats(stderr, js.Experts)
	}
	printSpecStats(stderr, st)
	return nil
}

// promptTokens turns --prompt-ids or --prompt into token ids. A --prompt
// goes through the model's chat template (as one user message, after the
// --system message) unless --raw or the model has none; like mlx-lm, the
// tokenizer's special tokens are added only when the rendered text does
// not already start with the BOS token.
func promptTokens(f *genFlags, tok *tokenizer.Tokenizer, stderr io.Writer) ([]int32, error) {
	var ids []int32
	if f.promptIDs != "" {
		for _, s := range strings.Split(f.promptIDs, ",") {
			v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("%w: --prompt-ids: %q is not a token id", errUsage, s)
			}
			ids = append(ids, int32(v))
		}
		return ids, nil
	}
	if tok == nil {
		return nil, fmt.Errorf("--prompt needs %s/tokenizer.json; use --prompt-ids", f.dir)
	}
	text := f.prompt
	if !f.raw {
		if ct, err := tok.ChatTemplate(""); err != nil {
			fmt.Fprintf(stderr, "mlxgo: no chat template (%v); using the prompt as is (--raw)\n", err)
		} else {
			var msgs []map[string]string
			if f.system != "" {
				msgs = append(msgs, map[string]string{"role": "system", "content": f.system})
			}
			msgs = append(msgs, map[string]string{"role": "user", "content": f.prompt})
			if text, err = ct.Render(tokenizer.ChatRequest{Messages: msgs, AddGenerationPrompt: true}); err != nil {
				return nil, fmt.Errorf("chat template: %w", err)
			}
		}
	}
	ids = encodePrompt(tok, text, f.raw)
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: the prompt encodes to no tokens", errUsage)
	}
	return ids, nil
}

// tokenLogprobs is one token's logprobs in --json output.
type tokenLogprobs struct {
	ID      int32            `json:"id"`
	Logprob float32          `json:"logprob"`
	Top     []map[string]any `json:"top"`
}

func newTokenLogprobs(t generate.Token) tokenLogprobs {
	out := tokenLogprobs{ID: t.ID, Logprob: t.Logprob}
	for _, a := range t.Top {
		out.Top = append(out.Top, map[string]any{"id": a.ID, "logprob": a.Logprob})
	}
	return out
}

// jsonStats are the stats --json prints: the generation loop's, and the
// backend that computed them ("cpu" or "mlx"; absent when nothing ran, as
// with --max-tokens 0), since --backend auto leaves that to the machine.
type jsonStats struct {
	generate.Stats
	Backend string `json:"backend,omitempty"`
	// Experts are the expert streaming counters (--expert-offload).
	Experts *expertReport `json:"experts,omitempty"`
}

// printResult prints the result: the text, or with asJSON the ids, text,
// logprobs and stats.
func printResult(w io.Writer, asJSON bool, ids []int32, text string, lps []tokenLogprobs, st jsonStats) error {
	if ids == nil {
		ids = []int32{}
	}
	if !asJSON {
		_, err := fmt.Fprintln(w, text)
		return err
	}
	return json.NewEncoder(w).Encode(struct {
		IDs      []int32         `json:"ids"`
		Text     string          `json:"text"`
		Logprobs []tokenLogprobs `json:"logprobs,omitempty"`
		Stats    jsonStats       `json:"stats"`
	}{ids, text, lps, st})
}

// printStats writes mlx-lm's summary lines.
func printStats(w io.Writer, st generate.Stats) {
	fmt.Fprintf(w, "Prompt: %d tokens (%d cached), %.3f tokens-per-sec\n", st.PromptTokens, st.CachedTokens, st.PrefillTPS)
	fmt.Fprintf(w, "Generation: %d tokens, %.3f tokens-per-sec\n", st.GeneratedTokens, st.DecodeTPS)
	if st.ForcedTokens > 0 {
		fmt.Fprintf(w, "Jump-forward: %d forced tokens, %d decode steps\n", st.ForcedTokens, st.DecodeSteps)
	}
	if st.PeakMemory > 0 {
		fmt.Fprintf(w, "Peak memory: %.3f GB\n", float64(st.PeakMemory)/1e9)
	}
}
