package generate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// specConfig is one configuration a speculative benchmark compares.
type specConfig struct {
	name string
	sp   *generate.Speculation
}

// specBench generates n tokens greedily after prompt once per
// configuration per round, alternating configurations so that a busy
// machine's drift hits them alike, checks every output equals the first
// (plain decoding's), logs each run and reports, per configuration, the
// best decode tok/s (wall clock) and the best decode tokens per
// CPU-second of the process (steadier than wall time when other work
// shares the cores): the n−1 tokens after the first over the
// generation's CPU time less that of a plain one-token generation (the
// target's prefill and first step; a draft model's own prefill stays in),
// with the speedups over plain.
func specBench(b *testing.B, m generate.Model, prompt []int32, n, rounds int, configs []specConfig) {
	prefill := time.Duration(1 << 62)
	for range 2 {
		c0 := processCPU()
		if _, _, err := collect(b, m, prompt, &generate.Options{MaxTokens: 1}); err != nil {
			b.Fatal(err)
		}
		prefill = min(prefill, processCPU()-c0)
	}
	var want []int32
	wall := make([]float64, len(configs))
	cpu := make([]float64, len(configs))
	for b.Loop() {
		for round := range rounds {
			for i, c := range configs {
				s, err := generate.Generate(context.Background(), m, prompt, &generate.Options{MaxTokens: n, Speculation: c.sp})
				if err != nil {
					b.Fatal(err)
				}
				var out []int32
				c0 := processCPU()
				for tok, err := range s.Tokens() {
					if err != nil {
						b.Fatal(err)
					}
					out = append(out, tok.ID)
				}
				used := processCPU() - c0 - prefill
				st := s.Stats()
				s.Close()
				if want == nil {
					want = out
				} else if !slices.Equal(out, want) {
					b.Fatalf("%s: output differs from plain greedy at %d", c.name, firstDiff(out, want))
				}
				perCPU := float64(len(out)-1) / used.Seconds()
				wall[i] = max(wall[i], st.DecodeTPS)
				cpu[i] = max(cpu[i], perCPU)
				line := fmt.Sprintf("round %d %-12s %6.2f tok/s %6.2f tok/cpu-s", round, c.name, st.DecodeTPS, perCPU)
				if sp := st.Speculation; sp != nil {
					line += fmt.Sprintf("  acceptance %.2f (%d/%d), %.2f tokens/forward, %d target + %d draft forwards, accepted by position %v of %v",
						sp.AcceptanceRate, sp.Accepted, sp.Drafted, sp.TokensPerForward, sp.TargetCalls, sp.DraftCalls, sp.AcceptedByPos, sp.DraftedByPos)
				}
				b.Log(line)
			}
		}
	}
	for i, c := range configs {
		b.ReportMetric(wall[i], c.name+"-tok/s")
		b.ReportMetric(cpu[i], c.name+"-tok/cpu-s")
		if i > 0 {
			b.ReportMetric(cpu[i]/cpu[0], c.name+"-cpu-speedup")
		}
	}
}

// BenchmarkSpec1B4bit compares plain greedy decoding of the random
// 1B-shaped 4-bit Llama (BenchmarkDecode1B4bit's) with speculative
// decoding by prompt lookup and by a draft model: the same checkpoint cut
// to its first 2 layers (writeLlama's seeded stream makes the embedding,
// head and first layers identical), a "layer-skip" draft that costs
// about a sixth of the target per token. The prompt is a random 32-token
// passage said three times. Random weights make the greedy output
// degenerate (it settles into a loop), so acceptance here is an upper
// bound, not a forecast for real text. Run:
// go test -run '^$' -bench Spec1B4bit -benchtime 1x.
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
	specBench(b, m, slices.Concat(passage, passage, passage), 48, 2, []specConfig{
		{"plain", nil},
		{"lookup-g4", &generate.Speculation{Lookup: true, NumDraft: 4}},
		{"lookup-g10", &generate.Speculation{Lookup: true, NumDraft: 10}},
		{"lookup-auto", &generate.Speculation{Lookup: true, Auto: true}},
		{"draft2L-g2", &generate.Speculation{Draft: d, NumDraft: 2}},
		{"draft2L-g4", &generate.Speculation{Draft: d, NumDraft: 4}},
		{"draft2L-auto", &generate.Speculation{Draft: d, Auto: true}},
	})
}

// BenchmarkSpecDemo compares plain greedy decoding of the built-in demo
// model (bfloat16) with the demo drafted by its 4-bit form and with prompt
// lookup, on a prompt that asks for a list to be repeated. Run:
// go test -run '^$' -bench SpecDemo -benchtime 1x.
func BenchmarkSpecDemo(b *testing.B) {
	dir, err := demo.Dir(demo.BF16)
	if err != nil {
		b.Skipf("demo model: %v", err)
	}
	qdir, err := demo.Dir(demo.Q4)
	if err != nil {
		b.Skipf("demo-q4 model: %v", err)
	}
	load := func(dir string) generate.Model {
		lm, err := model.Load(dir, &model.LoadOptions{Copy: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lm.Close() })
		return generate.Wrap(lm, lm.Info().Vocab)
	}
	m, d := load(dir), load(qdir)
	if _, err := os.Stat(dir + "/tokenizer.json"); err != nil {
		b.Skip("the demo model has no tokenizer.json")
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	text := "Repeat this list exactly three times: apples, pears, plums, cherries, grapes, lemons, limes, figs, dates, kiwis.\napples, pears, plums,"
	ids := tok.Encode(text, true)
	prompt := make([]int32, len(ids))
	for i, id := range ids {
		prompt[i] = int32(id)
	}
	specBench(b, m, prompt, 96, 2, []specConfig{
		{"plain", nil},
		{"q4-g2", &generate.Speculation{Draft: d, NumDraft: 2}},
		{"q4-g3", &generate.Speculation{Draft: d, NumDraft: 3}},
		{"q4-auto", &generate.Speculation{Draft: d, Auto: true}},
		{"lookup-g4", &generate.Speculation{Lookup: true, NumDraft: 4}},
		{"lookup-auto", &generate.Speculation{Lookup: true, Auto: true}},
	})
}
