package generate_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// BenchmarkBatchSpecDemo runs 4 greedy rows of the built-in demo model
// (bfloat16) through one Batch, each asked to repeat a list of its own,
// plainly and with every row speculating (prompt lookup γ=4; drafted by
// demo-q4 γ=3), alternating configurations for two rounds. Every row
// must equal its plain batched output. It reports, per configuration,
// the best generated tokens per CPU-second of the process over the whole
// batch (prefill included: the rows' prompts are alike in all three) and
// the speedup over plain, and logs the acceptance by draft position
// summed over the rows. Run:
// go test -run '^$' -bench BatchSpecDemo -benchtime 1x.
func BenchmarkBatchSpecDemo(b *testing.B) {
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
	tok, err := tokenizer.Load(dir)
	if err != nil {
		b.Skipf("demo tokenizer: %v", err)
	}
	lists := []string{"apples, pears, plums, cherries, grapes, lemons", "red, green, blue, yellow, purple, orange",
		"oak, elm, ash, birch, pine, maple", "Paris, Rome, Oslo, Lima, Cairo, Delhi"}
	var prompts [][]int32
	for _, l := range lists {
		var p []int32
		for _, id := range tok.Encode("Repeat this list exactly three times: "+l+".\n"+l+",", true) {
			p = append(p, int32(id))
		}
		prompts = append(prompts, p)
	}
	const n = 64
	configs := []specConfig{
		{"plain", nil},
		{"lookup-g4", &generate.Speculation{Lookup: true, NumDraft: 4}},
		{"q4-g3", &generate.Speculation{Draft: d, NumDraft: 3}},
	}
	var want [][]int32
	best := make([]float64, len(configs))
	for b.Loop() {
		for round := range 2 {
			for ci, c := range configs {
				bt, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: len(prompts)})
				if err != nil {
					b.Fatal(err)
				}
				rows := map[*generate.Row]int{}
				for i, p := range prompts {
					r, err := bt.Add(context.Background(), p, &generate.Options{MaxTokens: n, Speculation: c.sp})
					if err != nil {
						b.Fatal(err)
					}
					rows[r] = i
				}
				out := make([][]int32, len(prompts))
				acc, drf := make([]int, 8), make([]int, 8)
				c0 := processCPU()
				for !bt.Idle() {
					evs, err := bt.Step()
					if err != nil {
						b.Fatal(err)
					}
					for _, ev := range evs {
						i := rows[ev.Row]
						for _, t := range ev.Tokens {
							out[i] = append(out[i], t.ID)
						}
						if sp := ev.Row.Stats().Speculation; ev.Done && sp != nil {
							for k := range sp.AcceptedByPos {
								acc[k] += sp.AcceptedByPos[k]
								drf[k] += sp.DraftedByPos[k]
							}
						}
					}
				}
				used := processCPU() - c0
				st := bt.Stats()
				bt.Close()
				total := 0
				for i := range out {
					total += len(out[i])
				}
				if want == nil {
					want = out
				} else {
					for i := range out {
						if !slices.Equal(out[i], want[i]) {
							b.Fatalf("%s row %d: differs from plain at %d", c.name, i, firstDiff(out[i], want[i]))
						}
					}
				}
				perCPU := float64(total) / used.Seconds()
				best[ci] = max(best[ci], perCPU)
				line := fmt.Sprintf("round %d %-10s %4d tokens in %3d passes, %6.2f tok/cpu-s", round, c.name, total, st.Steps, perCPU)
				if c.sp != nil {
					line += fmt.Sprintf("  accepted by position %v of %v", acc[:c.sp.NumDraft], drf[:c.sp.NumDraft])
				}
				b.Log(line)
			}
		}
	}
	for i, c := range configs {
		b.ReportMetric(best[i], c.name+"-tok/cpu-s")
		if i > 0 {
			b.ReportMetric(best[i]/best[0], c.name+"-cpu-speedup")
		}
	}
}
