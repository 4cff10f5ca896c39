package generate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
)

// BenchmarkBatchDecodeCPU1B4bit is BenchmarkBatchDecode1B4bit's batch
// steps (1, 2, 4, 8 and 16 rows) reporting, beside aggregate tok/s, the
// tokens per second of this process's CPU time (tok/cpu-s, processCPU): on a machine
// shared with other work, wall time mostly measures the other work, while
// the CPU time a step takes measures what batching saves (rows=8 over
// rows=1 is the batch's gain per core).
func BenchmarkBatchDecodeCPU1B4bit(b *testing.B) {
	lm, _ := load1B4bit(b)
	m := generate.Wrap(lm, lm.Info().Vocab)
	prompt := func(row int) []int32 {
		p := make([]int32, 32)
		for i := range p {
			p[i] = int32((i*7 + 3 + row*101) % 32000)
		}
		return p
	}
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
			for bt.Stats().GeneratedTokens < rows {
				if _, err := bt.Step(); err != nil {
					b.Fatal(err)
				}
			}
			before := bt.Stats().GeneratedTokens
			b.ResetTimer()
			c0 := processCPU()
			for range b.N {
				if _, err := bt.Step(); err != nil {
					b.Fatal(err)
				}
			}
			cpu := processCPU() - c0
			b.StopTimer()
			n := bt.Stats().GeneratedTokens - before
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
			b.ReportMetric(float64(n)/cpu.Seconds(), "tok/cpu-s")
		})
	}
}
