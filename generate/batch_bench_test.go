package generate_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// BenchmarkBatchDecode1B4bit measures aggregate decode tokens/s of
// BenchmarkDecode1B4bit's random 1B-shaped 4-bit Llama through a Batch of
// 1, 2, 4, 8 and 16 rows (each iteration is one step: one token for each
// row), against the serial path (Generate) measured in the same run.
// Prefill and the first token are outside the timed part of both. Beside
// tok/s each reports tok/cpu-s, tokens per second of this process's CPU
// time (the comparable figure on a machine shared with other work), and
// wakes/step and wake-us the CPU backend's parked-worker wake-ups per step
// and their mean latency (cpu.PoolWakes).
func BenchmarkBatchDecode1B4bit(b *testing.B) {
	lm, _ := load1B4bit(b)
	m := generate.Wrap(lm, lm.Info().Vocab)
	prompt := func(row int) []int32 {
		p := make([]int32, 32)
		for i := range p {
			p[i] = int32((i*7 + 3 + row*101) % 32000)
		}
		return p
	}
	b.Run("serial", func(b *testing.B) {
		s, err := generate.Generate(context.Background(), m, prompt(0), &generate.Options{MaxTokens: b.N + 1})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		n := -1
		var c0 time.Duration
		var wk wakes
		for _, err := range s.Tokens() {
			if err != nil {
				b.Fatal(err)
			}
			if n++; n == 0 {
				b.ResetTimer() // timed as the rows are: from the first token on
				c0 = processCPU()
				wk = startWakes()
			}
		}
		cpu := processCPU() - c0
		b.StopTimer()
		wk.report(b, n)
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
		b.ReportMetric(float64(n)/cpu.Seconds(), "tok/cpu-s")
	})
	for _, rows := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			bt, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: rows, TokenBudget: 2048})
			if err != nil {
				b.Fatal(err)
			}
			defer bt.Close()
			for r := range rows {
				if _, err := bt.Add(context.Background(), prompt(r), &generate.Options{MaxTokens: -1}); err != nil {
					b.Fatal(err)
				}
			}
			// Prefill and the first token of every row, untimed.
			for bt.Stats().GeneratedTokens < rows {
				if _, err := bt.Step(); err != nil {
					b.Fatal(err)
				}
			}
			before := bt.Stats().GeneratedTokens
			b.ResetTimer()
			c0 := processCPU()
			wk := startWakes()
			for range b.N {
				if _, err := bt.Step(); err != nil {
					b.Fatal(err)
				}
			}
			cpu := processCPU() - c0
			b.StopTimer()
			wk.report(b, b.N)
			n := bt.Stats().GeneratedTokens - before
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(float64(n)/cpu.Seconds(), "tok/cpu-s")
		})
	}
}

// BenchmarkBatchTTFT1B4bit measures the time to first token of 8
// distinct 256-token prompts added to a Batch at once, over
// BenchmarkDecode1B4bit's random 1B-shaped 4-bit Llama, against that of
// one such prompt alone, for several scheduling policies alternated
// within one run (each round a fresh order): a token budget per pass and
// optionally a cap on the joining rows per pass ("256/1": TokenBudget
// 256, PrefillRows 1) or "f" for FillPrefill ("256f"). Each row then decodes 8 tokens. Reported per
// policy (medians over rounds): idle TTFT, the p50 of the 8 (mean of the
// 4th and 5th), their ratio, and the longest gap between two tokens of a
// row already decoding.
//
//	MLXGO_TTFT_POLICIES=2048,256f,256,128 MLXGO_TTFT_ROUNDS=3 go test ./generate -run '^$' -bench BatchTTFT1B4bit -benchtime 1x
func BenchmarkBatchTTFT1B4bit(b *testing.B) {
	lm, _ := load1B4bit(b)
	m := generate.Wrap(lm, lm.Info().Vocab)
	policies := strings.Split("2048,256f,256,128", ",")
	if s := os.Getenv("MLXGO_TTFT_POLICIES"); s != "" {
		policies = strings.Split(s, ",")
	}
	rounds := 3
	if s := os.Getenv("MLXGO_TTFT_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	const promptLen, gen, rows = 256, 8, 8
	seed := 0
	prompt := func() []int32 {
		seed++
		p := make([]int32, promptLen)
		for i := range p {
			p[i] = int32((i*7 + 3 + seed*101) % 32000)
		}
		return p
	}
	opts := make([]generate.BatchOptions, len(policies))
	for i, pol := range policies {
		pol = strings.TrimSpace(pol)
		opts[i].FillPrefill = strings.HasSuffix(pol, "f")
		tb, pr, _ := strings.Cut(strings.TrimSuffix(pol, "f"), "/")
		opts[i].MaxRows = rows
		var err error
		if opts[i].TokenBudget, err = strconv.Atoi(tb); err != nil {
			b.Fatal(err)
		}
		if pr != "" {
			if opts[i].PrefillRows, err = strconv.Atoi(pr); err != nil {
				b.Fatal(err)
			}
		}
	}
	// run adds n prompts at once and steps to the end: each row's TTFT and
	// the longest gap between two tokens of any row.
	run := func(o generate.BatchOptions, n, maxTokens int) (ttft []float64, stall float64) {
		bt, err := generate.NewBatch(m, o)
		if err != nil {
			b.Fatal(err)
		}
		defer bt.Close()
		start := time.Now()
		last := map[*generate.Row]time.Time{}
		for range n {
			if _, err := bt.Add(context.Background(), prompt(), &generate.Options{MaxTokens: maxTokens}); err != nil {
				b.Fatal(err)
			}
		}
		for !bt.Idle() {
			evs, err := bt.Step()
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			for _, ev := range evs {
				if len(ev.Tokens) == 0 {
					continue
				}
				if t, ok := last[ev.Row]; ok {
					stall = max(stall, now.Sub(t).Seconds()*1000)
				} else {
					ttft = append(ttft, now.Sub(start).Seconds()*1000)
				}
				last[ev.Row] = now
			}
		}
		slices.Sort(ttft)
		return ttft, stall
	}
	type res struct{ idle, p50, ratio, stall []float64 }
	out := make([]res, len(policies))
	for r := range rounds * b.N {
		for k := range policies {
			i := (k + r) % len(policies)
			idle, _ := run(opts[i], 1, 1)
			tt, stall := run(opts[i], rows, gen)
			p50 := (tt[rows/2-1] + tt[rows/2]) / 2
			o := &out[i]
			o.idle = append(o.idle, idle[0])
			o.p50 = append(o.p50, p50)
			o.ratio = append(o.ratio, p50/idle[0])
			o.stall = append(o.stall, stall)
			b.Logf("round %d policy %s: idle %.0f ms, ttfts %.0f ms, stall %.0f ms, load %s", r, policies[i], idle[0], tt, stall, loadAvg())
		}
	}
	med := func(x []float64) float64 {
		x = slices.Clone(x)
		slices.Sort(x)
		if len(x)%2 == 1 {
			return x[len(x)/2]
		}
		return (x[len(x)/2-1] + x[len(x)/2]) / 2
	}
	for i, pol := range policies {
		tag := "_" + strings.ReplaceAll(strings.TrimSpace(pol), "/", "r")
		b.ReportMetric(med(out[i].idle), "ttft_idle_ms"+tag)
		b.ReportMetric(med(out[i].p50), "ttft_p50_8_ms"+tag)
		b.ReportMetric(med(out[i].ratio), "ttft_x"+tag)
		b.ReportMetric(med(out[i].stall), "stall_ms"+tag)
	}
	b.Logf("GOMAXPROCS %d, load %s", runtime.GOMAXPROCS(0), loadAvg())
}

// loadAvg is /proc/loadavg's first three fields ("?" where unreadable).
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	if f := strings.Fields(string(raw)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// load1B4bit writes and loads (copied into memory) the random 1B-shaped
// 4-bit Llama the batch benchmarks share, closed when b ends; it also
// returns the bytes of weights one decode step reads.
func load1B4bit(b *testing.B) (model.Model, int64) {
	dir, stepBytes := writeLlama(b, llamaShape{Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, FFN: 8192, Vocab: 32000}, 4)
	lm, err := model.Load(dir, &model.LoadOptions{Copy: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lm.Close() })
	return lm, stepBytes
}

// wakes counts the CPU backend's worker wake-ups over a timed part
// (cpu.PoolWakes).
type wakes struct {
	n   int64
	lat time.Duration
}

func startWakes() wakes {
	n, lat := cpu.PoolWakes()
	return wakes{n, lat}
}

// report adds wakes/step and their mean latency (wake-us) over steps.
func (w wakes) report(b *testing.B, steps int) {
	n, lat := cpu.PoolWakes()
	if steps > 0 {
		b.ReportMetric(float64(n-w.n)/float64(steps), "wakes/step")
	}
	if n > w.n {
		b.ReportMetric(float64((lat-w.lat).Microseconds())/float64(n-w.n), "wake-us")
	}
}
