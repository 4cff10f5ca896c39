//go:build unix

package model_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// benchMoEShape is Qwen3-30B-A3B (hidden 2048, 48 layers, 128 experts,
// top 8, expert width 768, 32/4 heads of 128) scaled to this machine:
// half the width, 8 layers, every expert count and ratio kept; experts,
// attention and head 4-bit (group 64), the rest bfloat16, as in an MLX
// 4-bit checkpoint. 680 MB of experts, 42 MB of them routed per token.
var benchMoEShape = moeShape{Hidden: 1024, Layers: 8, Experts: 128, TopK: 8, MoEInter: 384, Heads: 16, KVHeads: 2, HeadDim: 64,
	Vocab: 16384, Bits: 4, Group: 64, DType: tensor.BFloat16}

var (
	benchMoEOnce sync.Once
	benchMoEDir  string
)

// benchMoE writes the benchmark checkpoint once per process (into
// $MLXGO_BENCH_MOE_DIR when set, kept between runs; else a temporary
// folder). $MLXGO_BENCH_MOE_LAYERS sets its layer count (48, Qwen3-30B-
// A3B's, gives 4 GB of experts).
func benchMoE(b *testing.B) string {
	benchMoEOnce.Do(func() {
		if n, err := strconv.Atoi(os.Getenv("MLXGO_BENCH_MOE_LAYERS")); err == nil && n > 0 {
			benchMoEShape.Layers = n
		}
		dir := os.Getenv("MLXGO_BENCH_MOE_DIR")
		if dir == "" {
			d, err := os.MkdirTemp("", "mlxgo-bench-moe")
			if err != nil {
				b.Fatal(err)
			}
			dir = d
		}
		if _, err := os.Stat(dir + "/config.json"); err != nil {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			writeRandomMoE(b, dir, benchMoEShape)
		}
		benchMoEDir = dir
	})
	return benchMoEDir
}

// BenchmarkExpertStreamingDecode decodes with the experts resident and
// streamed through caches of 25 % (one LRU order, split per bank, and
// with prefetch), 50 % and 100 % of their bytes,
// reporting tokens/s, the hit rate and the bytes read per token (the
// checkpoint sits in the page cache: this measures the streaming path,
// not the disk). Each op is one decoded token, after a 32-token prefill
// and 32 warm-up steps.
func BenchmarkExpertStreamingDecode(b *testing.B) {
	dir := benchMoE(b)
	for _, c := range []struct {
		share             int
		perBank, prefetch bool
	}{{0, false, false}, {25, false, false}, {25, true, false}, {25, false, true}, {50, false, false}, {100, false, false}} {
		share := c.share
		name := "resident"
		if share > 0 {
			name = fmt.Sprintf("stream%d", share)
		}
		if c.perBank {
			name += "-perbank"
		}
		if c.prefetch {
			name += "-prefetch"
		}
		b.Run(name, func(b *testing.B) {
			opts := &model.LoadOptions{}
			probe, err := model.PlanMemory(dir, model.PlanOptions{Memory: 1})
			if err != nil {
				b.Fatal(err)
			}
			po := model.PlanOptions{Context: 128, Memory: 1 << 40}
			if share > 0 {
				opts.Experts = &model.ExpertStreaming{CacheBytes: probe.ExpertBytes * int64(share) / 100, PerBank: c.perBank, Prefetch: c.prefetch}
				po.Stream, po.ExpertCacheBytes = true, opts.Experts.CacheBytes
			}
			plan, err := model.PlanMemory(dir, po)
			if err != nil {
				b.Fatal(err)
			}
			m, err := model.Load(dir, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			lm := m.(*model.Loaded)
			caches := m.MakeCaches()
			defer model.FreeCaches(caches)
			step := func(ids []int32) {
				sc := tensor.NewScope()
				defer sc.Close()
				h, err := m.Forward(ids2D(ids), caches, nil)
				if err != nil {
					b.Fatal(err)
				}
				l, err := m.Logits(tensor.SliceAxis(h, 1, len(ids)-1, len(ids)))
				if err != nil {
					b.Fatal(err)
				}
				tensor.Eval(l)
			}
			prompt := make([]int32, 32)
			for i := range prompt {
				prompt[i] = int32(7 + 131*i%benchMoEShape.Vocab)
			}
			step(prompt)
			tok := int32(11)
			next := func() []int32 { tok = (tok*7919 + 13) % int32(benchMoEShape.Vocab); return []int32{tok} }
			for range 32 {
				step(next())
			}
			lm.ResetExpertStats()
			b.ResetTimer()
			t0, c0 := time.Now(), cpuTime()
			for range b.N {
				step(next())
			}
			el, cpu := time.Since(t0), cpuTime()-c0
			b.ReportMetric(float64(b.N)/el.Seconds(), "tok/s")
			// CPU time per token (all goroutines, reads included): less
			// sensitive than wall time to other work on a shared machine
			b.ReportMetric(cpu.Seconds()*1e3/float64(b.N), "cpu_ms/tok")
			if s, ok := lm.ExpertStats(); ok {
				if n := s.Hits + s.Misses; n > 0 {
					b.ReportMetric(float64(s.Hits)/float64(n), "hit_rate")
				}
				b.ReportMetric(float64(s.BytesRead)/float64(b.N), "read_B/tok")
				b.ReportMetric(float64(s.PeakResidentBytes), "peak_expert_B")
				if s.Prefetched > 0 {
					b.ReportMetric(float64(s.PrefetchUsed)/float64(s.Prefetched), "prefetch_used")
				}
			}
			// resident set now (mapped weights touched, expert cache, Go
			// heap) beside the plan's total less its fixed runtime reserve
			b.ReportMetric(float64(procStatus("VmRSS:"))/(1<<20), "rss_MiB")
			// the process's peak: this run's own when it runs alone
			// (-bench 'ExpertStreamingDecode/stream25$' on an existing
			// $MLXGO_BENCH_MOE_DIR)
			b.ReportMetric(float64(procStatus("VmHWM:"))/(1<<20), "peak_rss_MiB")
			b.ReportMetric(float64(plan.TotalBytes-plan.ReserveBytes)/(1<<20), "plan_MiB")
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus reads a size field (VmRSS:, VmHWM:) of /proc/self/status
// in bytes (0 where unknown).
func procStatus(field string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
