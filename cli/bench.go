package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"time"

	"github.com/mlxgo/mlxgo/generate"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "measure prefill and decode tokens/s (mlx_lm.benchmark's shape)",
		run:     runBench,
	})
}

// benchTrial is one timed generation.
type benchTrial struct {
	PromptTPS     float64 `json:"prompt_tps"`
	GenerationTPS float64 `json:"generation_tps"`
	// PeakMemory is in GB, as mlx_lm.benchmark prints it: the backend's
	// high-water mark, or the process's peak RSS when the backend keeps
	// none (the CPU backend).
	PeakMemory float64 `json:"peak_memory"`
	TotalTime  float64 `json:"total_time"`
	// GeneratedTokens can fall short of --generation-tokens only when the
	// model's context ends; EOS is ignored, as in mlx_lm.benchmark.
	GeneratedTokens int `json:"generation_tokens"`
	// Experts are the expert streaming counters of the decode phase
	// (--expert-offload; per token: per generated token after the first).
	Experts *expertReport `json:"experts,omitempty"`
	// Speculation holds speculative decoding's statistics when it is on.
	Speculation *generate.SpecStats `json:"speculation,omitempty"`
}

// runBench times generations of -g tokens after a random prompt of -p
// tokens, after one warm-up run, and prints each trial and the averages
// with mlx_lm.benchmark's names, so the numbers compare line by line.
func runBench(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var modelArg, backend, kvQuant string
	var promptN, genN, trials, chunk, kvStart int
	var seed uint64
	var asJSON bool
	var adapters []string
	var spec specFlags
	var ef expertFlags
	fl := newFlags("bench", stderr)
	addExpertFlags(fl, &ef)
	fl.StringVar(&modelArg, "model", "", "model folder, cached repo name, or demo (default)")
	fl.IntVarP(&promptN, "prompt-tokens", "p", 512, "length of the (random) prompt")
	fl.IntVarP(&genN, "generation-tokens", "g", 1024, "tokens to generate")
	fl.IntVarP(&trials, "num-trials", "n", 5, "timed trials (after one warm-up)")
	fl.IntVar(&chunk, "prefill-step-size", generate.DefaultPrefillChunkSize, "prompt tokens per forward pass during prefill")
	fl.Uint64Var(&seed, "seed", 0, "seed of the random prompt")
	fl.StringVar(&backend, "backend", "auto", "compute backend: cpu, mlx, or auto")
	int8Flag(fl)
	fl.BoolVar(&asJSON, "json", false, "print one JSON object with the trials and averages")
	fl.StringArrayVar(&adapters, "adapter-path", nil, adapterUsage)
	addKVQuantFlag(fl, &kvQuant)
	addSpecFlags(fl, &spec)
	fl.IntVar(&kvStart, "quantized-kv-start", generate.DefaultQuantizedKVStart, "context length from which the KV cache is quantized (--kv-quant)")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo bench [--model] MODEL [-p N] [-g N] [-n N] [flags]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	switch {
	case fl.NArg() == 1 && modelArg == "":
		modelArg = fl.Arg(0)
	case fl.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fl.Arg(0))
	case modelArg == "":
		fmt.Fprintln(stderr, "mlxgo bench: no model given; using the embedded demo model")
	}
	if promptN < 1 || genN < 1 || trials < 1 || chunk < 1 {
		return fmt.Errorf("%w: --prompt-tokens, --generation-tokens, --num-trials and --prefill-step-size must be ≥ 1", errUsage)
	}
	turbo, err := parseKVQuantFlag(kvQuant, 0, "")
	if err != nil {
		return err
	}
	dir, err := resolveModel(modelArg)
	if err != nil {
		return err
	}
	es, err := ef.streaming(dir)
	if err != nil {
		return err
	}
	m, be, err := loadModelOpts(dir, backend, false, adapters, es, stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	if err := checkKVQuant(m, turbo); err != nil {
		return err
	}
	sp, closeDraft, err := spec.build(m, dir, nil, be, false, stderr)
	if err != nil {
		return err
	}
	defer closeDraft()
	vocab := m.Info().Vocab
	rng := rand.New(rand.NewPCG(seed, 0x6d6c78676f))
	prompt := make([]int32, promptN)
	for i := range prompt {
		prompt[i] = int32(rng.IntN(vocab))
	}
	gm := generate.Wrap(m, vocab)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	opts := &generate.Options{MaxTokens: genN, PrefillChunkSize: chunk, Backend: be, KVQuant: turbo, QuantizedKVStart: kvStart,
		Speculation: sp}
	once := func() (benchTrial, error) {
		tic := time.Now()
		s, err := generate.Generate(ctx, gm, prompt, opts)
		if err != nil {
			return benchTrial{}, err
		}
		defer s.Close()
		first := true
		for _, err := range s.Tokens() {
			if err != nil {
				return benchTrial{}, err
			}
			if first {
				resetExpertStats(m) // count decode only
				first = false
			}
		}
		st := s.Stats()
		tr := benchTrial{PromptTPS: st.PrefillTPS, GenerationTPS: st.DecodeTPS,
			PeakMemory: float64(st.PeakMemory) / 1e9, TotalTime: time.Since(tic).Seconds(), GeneratedTokens: st.GeneratedTokens,
			Speculation: st.Speculation}
		if st.PeakMemory == 0 {
			tr.PeakMemory = float64(peakRSS()) / 1e9
		}
		if es, ok := expertStats(m); ok {
			tr.Experts = newExpertReport(es, st.GeneratedTokens-1)
		}
		return tr, nil
	}
	say := func(format string, a ...any) {
		if !asJSON {
			fmt.Fprintf(stdout, format, a...)
		}
	}
	say("Running warmup..\n")
	if _, err := once(); err != nil {
		return benchErr(err)
	}
	say("Timing with prompt_tokens=%d, generation_tokens=%d, batch_size=1.\n", promptN, genN)
	var res []benchTrial
	var avg benchTrial
	for i := range trials {
		tr, err := once()
		if err != nil {
			return benchErr(err)
		}
		res = append(res, tr)
		say("Trial %d:  prompt_tps=%.3f, generation_tps=%.3f, peak_memory=%.3f, total_time=%.3f\n",
			i+1, tr.PromptTPS, tr.GenerationTPS, tr.PeakMemory, tr.TotalTime)
		if e := tr.Experts; e != nil {
			say("         expert_hit_rate=%.3f, expert_bytes_read_per_token=%.0f, expert_resident_bytes=%d\n", e.HitRate, e.BytesReadPerToken, e.ResidentBytes)
		}
		if sp := tr.Speculation; sp != nil {
			say("         acceptance=%.3f, tokens_per_forward=%.3f, accepted_by_position=%v\n", sp.AcceptanceRate, sp.TokensPerForward, sp.AcceptedByPos)
		}
		avg.PromptTPS += tr.PromptTPS / float64(trials)
		avg.GenerationTPS += tr.GenerationTPS / float64(trials)
		avg.PeakMemory += tr.PeakMemory / float64(trials)
		avg.TotalTime += tr.TotalTime / float64(trials)
		avg.GeneratedTokens += tr.GeneratedTokens
	}
	avg.GeneratedTokens /= trials
	if short := avg.GeneratedTokens; short < genN && !asJSON {
		fmt.Fprintf(stderr, "mlxgo bench: only %d of %d tokens generated per trial on average\n", short, genN)
	}
	say("Averages: prompt_tps=%.3f, generation_tps=%.3f, peak_memory=%.3f\n", avg.PromptTPS, avg.GenerationTPS, avg.PeakMemory)
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"model": dir, "backend": be.Name(), "prompt_tokens": promptN, "generation_tokens": genN,
			"trials": res, "averages": avg,
		})
	}
	return nil
}

func benchErr(err error) error {
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	return err
}
