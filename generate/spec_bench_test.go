package generate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
)

// BenchmarkSpec1B4bit compares plain greedy decoding of the random
// 1B-shaped 4-bit Llama (BenchmarkDecode1B4bit's) with speculative
// decoding by prompt lookup and by a draft model: the same checkpoint cut
// to its first 2 layers (writeLlama's seeded stream makes the embedding,
// head and first layers identical), a "layer-skip" draft that costs
// about a sixth of the target per token. The prompt is a random 32-token
// passage said three times. Configurations alternate, in rounds, so that
// a busy machine's drift hits them alike; each prints its decode tok/s
// per round, the acceptance, tokens per target forward and accepted drafts
// by position. Run: go test -run '^$' -bench Spec1B4bit -benchtime 1x.
func BenchmarkSpec1B4bit(b *testing.B) {
	shape := llamaShape{Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, FFN: 8192, Vocab: 32000}
	dir, _ := writeLlama(b, shape, 4)
	shape.Layers = 2
	ddir, _ := writeLlama(b, shape, 4)
	load := func(dir string) generate.Model {
		lm, err := model.Load(dir, &model.LoadOptions{Copy: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lm.Close() })
		return generate.Wrap(lm, lm.Info().Vocab)
	}
	m, d := load(dir), load(ddir)
	r := rand.New(rand.NewPCG(5, 6))
	passage := make([]int32, 32)
	for i := range passage {
		passage[i] = int32(r.IntN(shape.Vocab))
	}
	prompt := slices.Concat(passage, passage, passage)
	const n = 48
	configs := []struct {
		name string
		sp   *generate.Speculation
	}{
		{"plain", nil},
		{"lookup-g4", &generate.Speculation{Lookup: true, NumDraft: 4}},
		{"lookup-g10", &generate.Speculation{Lookup: true, NumDraft: 10}},
		{"draft2L-g2", &generate.Speculation{Draft: d, NumDraft: 2}},
		{"draft2L-g4", &generate.Speculation{Draft: d, NumDraft: 4}},
	}
	var want []int32
	tps := make([][]float64, len(configs))
	for b.Loop() {
		for round := range 2 {
			for i, c := range configs {
				s, err := generate.Generate(context.Background(), m, prompt, &generate.Options{MaxTokens: n, Speculation: c.sp})
				if err != nil {
					b.Fatal(err)
				}
				var out []int32
				for tok, err := range s.Tokens() {
					if err != nil {
						b.Fatal(err)
					}
					out = append(out, tok.ID)
				}
				st := s.Stats()
				s.Close()
				if want == nil {
					want = out
				} else if !slices.Equal(out, want) {
					b.Fatalf("%s: output differs from plain greedy at %d", c.name, firstDiff(out, want))
				}
				tps[i] = append(tps[i], st.DecodeTPS)
				line := fmt.Sprintf("round %d %-11s %6.2f tok/s", round, c.name, st.DecodeTPS)
				if sp := st.Speculation; sp != nil {
					line += fmt.Sprintf("  acceptance %.2f (%d/%d), %.2f tokens/forward, %d target + %d draft forwards, accepted by position %v of %v",
						sp.AcceptanceRate, sp.Accepted, sp.Drafted, sp.TokensPerForward, sp.TargetCalls, sp.DraftCalls, sp.AcceptedByPos, sp.DraftedByPos)
				}
				b.Log(line)
			}
		}
	}
	for i, c := range configs {
		best := slices.Max(tps[i])
		b.ReportMetric(best, c.name+"-tok/s")
		if i > 0 {
			b.ReportMetric(best/slices.Max(tps[0]), c.name+"-speedup")
		}
	}
}
