package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/spf13/pflag"
)

// expertFlags are the expert streaming flags of the verbs that load a
// model (generate, serve, bench).
type expertFlags struct {
	offload  bool
	cache    string
	workers  int
	policy   string
	prefetch bool
}

// addExpertFlags registers --expert-offload, --expert-cache-bytes and
// --expert-io-workers.
func addExpertFlags(fl *pflag.FlagSet, f *expertFlags) {
	fl.BoolVar(&f.offload, "expert-offload", false, "keep MoE experts on disk and read the routed ones into a bounded cache (output unchanged)")
	fl.StringVar(&f.cache, "expert-cache-bytes", "", "expert cache size with --expert-offload (4GiB, 512MB, 1e9; implies --expert-offload; default: a quarter of the experts)")
	fl.IntVar(&f.workers, "expert-io-workers", 4, "concurrent expert reads with --expert-offload")
	fl.BoolVar(&f.prefetch, "expert-prefetch", false, "with --expert-offload, read the next MoE layer's likely experts ahead (its router applied to this layer's input)")
	fl.StringVar(&f.policy, "expert-cache-policy", "lru", "expert eviction: lru (one least-recently-used order) or per-layer (the budget split evenly between layers' banks)")
}

// streaming returns the load options the flags ask for (nil: experts
// resident). The default cache is a quarter of the model's expert bytes,
// which the plan reads off the headers of dir.
func (f *expertFlags) streaming(dir string) (*model.ExpertStreaming, error) {
	if !f.offload && f.cache == "" {
		return nil, nil
	}
	if f.workers < 1 {
		return nil, fmt.Errorf("%w: --expert-io-workers must be ≥ 1", errUsage)
	}
	es := &model.ExpertStreaming{Workers: f.workers, Prefetch: f.prefetch}
	switch f.policy {
	case "lru", "":
	case "per-layer":
		es.PerBank = true
	default:
		return nil, fmt.Errorf("%w: --expert-cache-policy %q (want lru or per-layer)", errUsage, f.policy)
	}
	if f.cache != "" {
		n, err := parseBytes(f.cache)
		if err != nil {
			return nil, fmt.Errorf("%w: --expert-cache-bytes: %v", errUsage, err)
		}
		es.CacheBytes = n
		return es, nil
	}
	p, err := model.PlanMemory(dir, model.PlanOptions{Memory: 1})
	if err != nil {
		return nil, err
	}
	es.CacheBytes = p.ExpertBytes / 4
	return es, nil
}

// parseBytes reads a byte count: a number (exponent allowed) with an
// optional unit, decimal (KB, MB, GB, TB) or binary (K, M, G, T, KiB,
// MiB, GiB, TiB).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult := map[string]float64{
		"": 1, "b": 1,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
		"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	}[unit]
	if mult == 0 {
		if v, err := strconv.ParseFloat(t, 64); err == nil && v >= 0 && v < math.MaxInt64 {
			return int64(v), nil // 1e9
		}
		return 0, fmt.Errorf("%q: unknown unit %q (want B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s, t[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a byte count", s)
	}
	return int64(v * mult), nil
}

// loadModelOpts is loadModelAdapters with expert streaming (es nil:
// resident experts).
func loadModelOpts(dir, backend string, copyWeights bool, adapters []string, es *model.ExpertStreaming, stderr io.Writer) (model.Model, tensor.Backend, error) {
	if es == nil {
		return loadModelAdapters(dir, backend, copyWeights, adapters, stderr)
	}
	be, err := chooseBackend(backend, stderr)
	if err != nil {
		return nil, nil, err
	}
	tensor.SetDefault(be)
	opts := &model.LoadOptions{Backend: be, Copy: copyWeights, Experts: es}
	var m model.Model
	if len(adapters) > 0 {
		lm, err := lora.Open(dir, opts, adapters...)
		if err != nil {
			return nil, nil, err
		}
		m = lm
	} else if m, err = model.Load(dir, opts); err != nil {
		return nil, nil, err
	}
	st, ok := expertStats(m)
	if !ok || st.Experts == 0 {
		fmt.Fprintln(stderr, "mlxgo: --expert-offload: the model has no routed experts; nothing streams")
	} else {
		fmt.Fprintf(stderr, "mlxgo: streaming %d experts (%s) through a %s cache\n", st.Experts, fmtBytes(st.TotalBytes), fmtBytes(st.BudgetBytes))
	}
	prepackInt8(m, be, stderr)
	return m, be, nil
}

// expertStats reads a model's expert streaming counters, through a LoRA
// host to its base model.
func expertStats(m model.Model) (model.ExpertStats, bool) {
	for m != nil {
		if s, ok := m.(interface {
			ExpertStats() (model.ExpertStats, bool)
		}); ok {
			return s.ExpertStats()
		}
		b, ok := m.(interface{ Base() model.Model })
		if !ok {
			break
		}
		m = b.Base()
	}
	return model.ExpertStats{}, false
}

// expertReport is the experts entry of --json stats.
type expertReport struct {
	model.ExpertStats
	HitRate float64 `json:"hit_rate"`
	// BytesReadPerToken is BytesRead over the tokens of the run.
	BytesReadPerToken float64 `json:"bytes_read_per_token"`
}

// newExpertReport summarises s over tokens processed (0: per-token left 0).
func newExpertReport(s model.ExpertStats, tokens int) *expertReport {
	r := &expertReport{ExpertStats: s}
	if n := s.Hits + s.Misses; n > 0 {
		r.HitRate = float64(s.Hits) / float64(n)
	}
	if tokens > 0 {
		r.BytesReadPerToken = float64(s.BytesRead) / float64(tokens)
	}
	return r
}

// fmtBytes prints n in binary units.
func fmtBytes(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "KiB", "MiB", "GiB", "TiB"} {
		if math.Abs(f) < 1024 || u == "TiB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.2f %s", f, u)
		}
		f /= 1024
	}
	return ""
}

// printExpertStats writes the expert streaming summary line.
func printExpertStats(w io.Writer, r *expertReport) {
	fmt.Fprintf(w, "Experts: %d hits, %d misses (hit rate %.3f), %s read (%s per token), %s resident (peak %s, budget %s)\n",
		r.Hits, r.Misses, r.HitRate, fmtBytes(r.BytesRead), fmtBytes(int64(r.BytesReadPerToken)), fmtBytes(r.ResidentBytes), fmtBytes(r.PeakResidentBytes), fmtBytes(r.BudgetBytes))
}

// resetExpertStats zeroes a model's expert counters (through a LoRA
// host to its base model), so that a phase can be measured alone.
func resetExpertStats(m model.Model) {
	for m != nil {
		if r, ok := m.(interface{ ResetExpertStats() }); ok {
			r.ResetExpertStats()
			return
		}
		b, ok := m.(interface{ Base() model.Model })
		if !ok {
			return
		}
		m = b.Base()
	}
}
