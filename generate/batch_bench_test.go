package generate_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
)

// BenchmarkBatchDecode1B4bit measures aggregate decode tokens/s of
// BenchmarkDecode1B4bit's random 1B-shaped 4-bit Llama through a Batch of
// 1, 2, 4, 8 and 16 rows (each iteration is one step: one token for each
// row), against the serial path (Generate) measured in the same run.
// Prefill and the first token are outside the timed part of both.
func BenchmarkBatchDecode1B4bit(b *testing.B) {
	dir, _ := writeLlama(b, llamaShape{Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, FFN: 8192, Vocab: 32000}, 4)
	lm, err := model.Load(dir, &model.LoadOptions{Copy: true})
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
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
		for _, err := range s.Tokens() {
			if err != nil {
				b.Fatal(err)
			}
			if n++; n == 0 {
				b.ResetTimer() // timed as the rows are: from the first token on
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
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
			for range b.N {
				if _, err := bt.Step(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			n := bt.Stats().GeneratedTokens - before
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
