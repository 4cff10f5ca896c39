package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/mlxgo/mlxgo/model"
)

func init() {
	register(&command{name: "fit", summary: "plan a model's memory: weights, experts, KV cache, the largest context that fits", run: runFit})
}

// fitFlags are the fit verb's flags.
type fitFlags struct {
	model, memory       string
	backend             string
	context, batch      int
	kvBits, kvGroup     int
	chunk               int
	bandwidth           float64
	asJSON, noBandwidth bool
	experts             expertFlags
}

// runFit prints the memory plan of a model: from its config and
// safetensors headers, no weight read.
func runFit(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	var f fitFlags
	fl := newFlags("fit", stderr)
	fl.StringVar(&f.model, "model", "", "model folder or cached repo id (or the first argument)")
	fl.IntVar(&f.context, "context", 0, "tokens per sequence (default 4096, capped at the model's max_position_embeddings)")
	fl.IntVar(&f.batch, "batch", 1, "sequences decoded together")
	fl.StringVar(&f.memory, "memory", "", "memory to plan against (8GiB, 16GB; default: MemAvailable)")
	fl.IntVar(&f.kvBits, "kv-bits", 0, "plan a quantized KV cache of this many bits (0: off)")
	fl.IntVar(&f.kvGroup, "kv-group-size", 64, "KV quantization group size")
	fl.IntVar(&f.chunk, "prefill-chunk-size", 512, "prompt tokens per forward pass (sizes the prefill transients)")
	fl.Float64Var(&f.bandwidth, "bandwidth", 0, "predict decode as bytes per token ÷ this bandwidth in GB/s (a roofline) instead of probing the kernels")
	fl.BoolVar(&f.noBandwidth, "no-prediction", false, "skip the kernel probe and the decode prediction")
	fl.StringVar(&f.backend, "backend", "cpu", "backend whose kernels the decode prediction probes: cpu, mlx, or auto")
	fl.BoolVar(&f.asJSON, "json", false, "print the plan as JSON")
	addExpertFlags(fl, &f.experts)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo fit [--model] MODEL [--context N] [--batch N] [--memory BYTES] [--expert-offload] [--json]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	switch {
	case fl.NArg() == 1 && f.model == "":
		f.model = fl.Arg(0)
	case fl.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fl.Arg(0))
	}
	if f.context < 0 || f.batch < 1 || f.chunk < 1 || f.kvBits < 0 || f.bandwidth < 0 {
		return fmt.Errorf("%w: --context must be ≥ 0, --batch and --prefill-chunk-size ≥ 1, --kv-bits and --bandwidth ≥ 0", errUsage)
	}
	dir, err := resolveModel(f.model)
	if err != nil {
		return err
	}
	opts := model.PlanOptions{Context: f.context, Batch: f.batch, PrefillChunk: f.chunk, KVBits: f.kvBits, KVGroup: f.kvGroup}
	if f.memory != "" {
		if opts.Memory, err = parseBytes(f.memory); err != nil || opts.Memory <= 0 {
			return fmt.Errorf("%w: --memory %q", errUsage, f.memory)
		}
	}
	if f.experts.offload || f.experts.cache != "" {
		es, err := f.experts.streaming(dir)
		if err != nil {
			return err
		}
		opts.Stream, opts.ExpertCacheBytes = true, es.CacheBytes
	}
	switch {
	case f.noBandwidth:
	case f.bandwidth > 0:
		opts.BandwidthGBs = f.bandwidth
	default:
		// the checkpoint's decode kernels timed on this machine (cached)
		be, err := chooseBackend(f.backend, stderr)
		if err != nil {
			return err
		}
		opts.Predict, opts.Backend = true, be
	}
	p, err := model.PlanMemory(dir, opts)
	if err != nil {
		return err
	}
	if f.asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			*model.Plan
			BandwidthGBs float64 `json:"bandwidth_gbs,omitempty"`
		}{p, opts.BandwidthGBs})
	}
	printPlan(stdout, p, opts.BandwidthGBs)
	return nil
}

// printPlan writes the plan as a table of its terms.
func printPlan(w io.Writer, p *model.Plan, bw float64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, n int64, note string) { fmt.Fprintf(tw, "%s\t%s\t  %s\n", name, fmtBytes(n), note) }
	fmt.Fprintf(w, "%s: %d tokens × %d sequences\n", p.ModelType, p.Context, p.Batch)
	row("weights (files)", p.WeightsBytes, "")
	if p.ExpertBytes > 0 {
		row("  of which experts", p.ExpertBytes, fmt.Sprintf("%s read per token", fmtBytes(p.ActiveExpertBytesPerToken)))
	}
	row("resident weights", p.ResidentWeightsBytes, "")
	if p.Streamed {
		row("expert cache", p.ExpertCacheBytes, "streamed from disk")
	}
	kinds := make([]string, 0, len(p.KVByKind))
	for k := range p.KVByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		n := 0
		for _, l := range p.Layers {
			if l.Kind == k {
				n++
			}
		}
		unit := "per token"
		if k == model.KVRecurrent {
			unit = "per sequence"
		}
		row("  kv "+k, p.KVByKind[k], fmt.Sprintf("%s, %d layers", unit, n))
	}
	row("kv cache", p.KVBytes, fmt.Sprintf("%s per token", fmtBytes(p.KVBytesPerToken)))
	row("prefill transients", p.PrefillBytes, "")
	row("reserve", p.ReserveBytes, "")
	row("total", p.TotalBytes, "")
	row("memory", p.MemoryBytes, "")
	tw.Flush()
	if p.Fits {
		fmt.Fprintf(w, "fits: yes\n")
	} else {
		fmt.Fprintf(w, "fits: no (shrink the %s)\n", p.Shrink)
	}
	fmt.Fprintf(w, "largest context at batch %d: %d tokens", p.Batch, p.MaxContext)
	if p.ModelMaxContext > 0 {
		fmt.Fprintf(w, " (model maximum %d)", p.ModelMaxContext)
	}
	fmt.Fprintf(w, "\nlargest batch at %d tokens: %d\n", p.Context, p.MaxBatch)
	switch {
	case p.PredictedDecodeTPS > 0 && len(p.DecodeSeconds) > 0:
		terms := make([]string, 0, len(p.DecodeSeconds))
		for k := range p.DecodeSeconds {
			terms = append(terms, k)
		}
		sort.Strings(terms)
		for i, k := range terms {
			terms[i] = fmt.Sprintf("%s %.2f ms", k, p.DecodeSeconds[k]*1e3)
		}
		fmt.Fprintf(w, "predicted decode: %.1f tokens/s (%s read per token; probed step: %s)\n", p.PredictedDecodeTPS, fmtBytes(p.DecodeBytesPerToken), strings.Join(terms, ", "))
	case p.PredictedDecodeTPS > 0:
		fmt.Fprintf(w, "predicted decode: %.1f tokens/s (%s per token at %.1f GB/s)\n", p.PredictedDecodeTPS, fmtBytes(p.DecodeBytesPerToken), bw)
	}
}

// servePlan is the memory plan serve starts under (--memory-budget, the
// expert flags): the plan against the budget (MemAvailable when none is
// given, then advisory), the expert streaming options, the context the
// server admits (the model's, capped at the plan's largest safe context
// when a budget is given) and the KV pool budget (--kv-budget, or what
// the budget leaves after weights, experts, transients and reserve). With
// a budget, a plan in which not even one token fits is an error naming
// the term to shrink.
func servePlan(dir string, ef *expertFlags, budget string, batch, context int, kvBudget int64, stderr io.Writer) (*model.Plan, *model.ExpertStreaming, int, int64, error) {
	es, err := ef.streaming(dir)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	opts := model.PlanOptions{Context: context, Batch: batch}
	if es != nil {
		opts.Stream, opts.ExpertCacheBytes = true, es.CacheBytes
	}
	if budget != "" {
		if opts.Memory, err = parseBytes(budget); err != nil || opts.Memory <= 0 {
			return nil, nil, 0, 0, fmt.Errorf("%w: --memory-budget %q", errUsage, budget)
		}
	}
	p, err := model.PlanMemory(dir, opts)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	switch {
	case budget == "" && !p.Fits:
		fmt.Fprintf(stderr, "mlxgo serve: warning: the memory plan (%s at %d tokens × %d) exceeds the %s available; shrink the %s\n",
			fmtBytes(p.TotalBytes), p.Context, p.Batch, fmtBytes(p.MemoryBytes), p.Shrink)
	case budget != "" && p.MaxContext == 0:
		return nil, nil, 0, 0, fmt.Errorf("the model does not fit --memory-budget %s: %s are needed before any KV cache; shrink the %s",
			fmtBytes(p.MemoryBytes), fmtBytes(p.FixedBytes()), p.Shrink)
	case budget != "":
		if context <= 0 || p.MaxContext < context {
			context = p.MaxContext
		}
		if kvBudget == 0 {
			kvBudget = p.MemoryBytes - p.FixedBytes()
		}
		fmt.Fprintf(stderr, "mlxgo serve: memory plan %s of %s at %d tokens × %d; largest safe context %d\n",
			fmtBytes(p.TotalBytes), fmtBytes(p.MemoryBytes), p.Context, p.Batch, p.MaxContext)
	}
	return p, es, context, kvBudget, nil
}
