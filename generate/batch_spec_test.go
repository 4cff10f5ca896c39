package generate_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestBatchSpecRowsEqualAlone: rows with speculative decoding (prompt
// lookup at a random γ, fixed or adaptive; a draft model of the same
// vocabulary) decode in a batch beside plain rows, joining at random
// steps, over contiguous caches and over a paged pool (Gemma 4's sliding
// windows exceeded by the prompts: snapshot and replay), in float32 and
// (paged) bfloat16. A greedy
// speculative row delivers exactly what the request delivers alone
// without speculation — tokens, logprob bits, top logprobs, stop reason;
// a sampled one exactly what it delivers alone with the same Speculation
// and seed. Every speculative row reports its statistics, and some
// drafts are accepted.
func TestBatchSpecRowsEqualAlone(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	draft := loadModel(t, filepath.Join(fixtures, "qwen3_5", "f32"), nil)
	rowsPer := 8
	if testing.Short() {
		rowsPer = 4
	}
	accepted, restores := 0, 0
	for fi, name := range allFixtures {
		for _, v := range []struct {
			paged bool
			dt    string
		}{{false, "f32"}, {true, "f32"}, {true, "bf16"}} {
			paged := v.paged
			t.Run(fmt.Sprintf("%s/%s/paged=%v", name, v.dt, paged), func(t *testing.T) {
				m := loadModel(t, filepath.Join(fixtures, name, v.dt), nil)
				r := rand.New(rand.NewPCG(uint64(fi), 11))
				reqs := make([]request, rowsPer)
				specs := make([]bool, rowsPer)
				for i := range reqs {
					q := randomRequest(r, m.VocabSize(), nil)
					q.prompt = repetitive(append(q.prompt, randomIDs(r, m.VocabSize(), 12)...))
					q.o.MaxTokens = 4 + r.IntN(20)
					q.join = r.IntN(6)
					if i%4 != 3 { // one row in four decodes plainly
						sp := &generate.Speculation{Lookup: true, NumDraft: 1 + r.IntN(8), Auto: r.IntN(4) == 0}
						if r.IntN(3) == 0 && draft.VocabSize() == m.VocabSize() {
							sp = &generate.Speculation{Draft: draft, NumDraft: 1 + r.IntN(4)}
						}
						if i%2 == 0 { // greedy half the time
							q.o.Sampler.Temperature = 0
						} else {
							// adaptive γ follows measured times: a sampled row's
							// rounds, and so its draws, would vary run to run
							sp.Auto = false
						}
						q.o.Speculation = sp
						specs[i] = true
					}
					reqs[i] = q
				}
				bo := generate.BatchOptions{MaxRows: 2 + r.IntN(4)}
				bo.TokenBudget = bo.MaxRows + 8 + r.IntN(40)
				if paged {
					longest := 0
					for _, q := range reqs {
						longest = max(longest, len(q.prompt)+q.o.MaxTokens)
					}
					pool := poolFor(t, m, 4, 4*((longest+3)/4)+8)
					defer pool.Free()
					bo.Pool = pool
				}
				got, st := runBatchStats(t, m, reqs, bo)
				for i, q := range reqs {
					alone := q.o
					if q.o.Sampler.Temperature == 0 {
						alone.Speculation = nil // greedy: the plain run's tokens
					}
					sameAsSolo(t, name, i, got[i].solo, runSolo(t, m, q.prompt, alone))
					sst := got[i].stats.Speculation
					if specs[i] != (sst != nil) {
						t.Fatalf("row %d: speculation %v, stats %+v", i, specs[i], sst)
					}
					if sst != nil {
						accepted += sst.Accepted
						restores += sst.Restores
						if sst.Drafted != sst.Accepted+sst.Rejected || sst.TargetCalls == 0 {
							t.Errorf("row %d: stats %+v", i, *sst)
						}
					}
				}
				if paged && (st.BlocksReserved != 0 || st.Blocks.Used != 0) {
					t.Errorf("after the batch: %d blocks reserved, %d used", st.BlocksReserved, st.Blocks.Used)
				}
				t.Logf("%d rows, max batch %d of %d, budget %d: %d steps", len(reqs), st.MaxRows, bo.MaxRows, bo.TokenBudget, st.Steps)
			})
		}
	}
	if accepted == 0 {
		t.Error("no draft was ever accepted")
	}
	if restores == 0 {
		t.Error("no row ever restored a snapshot (the sliding-window path went untested)")
	}
	t.Logf("%d drafts accepted, %d restores", accepted, restores)
}

// soloStats is what a batched row delivered, with its final statistics.
type soloStats struct {
	solo
	stats generate.Stats
}

// runBatchStats is runBatch keeping each row's final statistics.
func runBatchStats(t *testing.T, m generate.Model, reqs []request, bo generate.BatchOptions) ([]soloStats, generate.BatchStats) {
	t.Helper()
	b, err := generate.NewBatch(m, bo)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out := make([]soloStats, len(reqs))
	rows := make([]*generate.Row, len(reqs))
	byRow := map[*generate.Row]int{}
	added := 0
	for step := 0; step < 10000; step++ {
		for i, q := range reqs {
			if rows[i] == nil && q.join <= step {
				o := q.o
				row, err := b.Add(t.Context(), q.prompt, &o)
				if err != nil {
					t.Fatal(err)
				}
				rows[i], byRow[row] = row, i
				added++
			}
		}
		if added == len(reqs) && b.Idle() {
			return out, b.Stats()
		}
		evs, err := b.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			i := byRow[ev.Row]
			if ev.Err != nil {
				t.Fatalf("row %d: %v", i, ev.Err)
			}
			out[i].add(ev.Tokens)
			if ev.Done {
				out[i].reason = ev.Row.Stats().StopReason
				out[i].stats = ev.Row.Stats()
			}
		}
	}
	t.Fatal("batch did not finish in 10000 steps")
	return nil, generate.BatchStats{}
}

// TestBatchSpecTargetDrafters: rows drafting from the target's own state
// — the Gemma 4 assistant over gemma4_dense, the MTP heads of the
// DeepSeek-V3 and Qwen3-Next fixtures — in a batch beside a plain row,
// over contiguous caches and a paged pool, each deliver their solo plain
// greedy output exactly (tokens and logprob bits), and draft.
func TestBatchSpecTargetDrafters(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	type tc struct {
		target  string
		drafter func(t *testing.T, lm model.Model) func(generate.DraftInfo) (generate.Drafter, error)
	}
	mtp := func(t *testing.T, lm model.Model) func(generate.DraftInfo) (generate.Drafter, error) {
		p, ok := lm.(*model.Loaded).MTP()
		if !ok {
			t.Fatal("no MTP head")
		}
		return func(info generate.DraftInfo) (generate.Drafter, error) { return generate.NewMTPDrafter(p, info) }
	}
	cases := []tc{
		{"gemma4_dense", func(t *testing.T, lm model.Model) func(generate.DraftInfo) (generate.Drafter, error) {
			am, err := model.Load(filepath.Join(fixtures, "gemma4_assistant", "tied"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { am.Close() })
			a := am.(*model.Loaded).Arch().(*model.Gemma4Assistant)
			g := lm.(*model.Loaded).Arch().(*model.Gemma4)
			return func(info generate.DraftInfo) (generate.Drafter, error) {
				return generate.NewAssistantDrafter(a, g, info)
			}
		}},
		{"deepseek_v3_mtp", mtp},
		{"qwen3_next_mtp", mtp},
	}
	for ci, c := range cases {
		for _, paged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/paged=%v", c.target, paged), func(t *testing.T) {
				lm, err := model.Load(filepath.Join(fixtures, c.target, "f32"), nil)
				if err != nil {
					t.Skipf("fixture: %v", err)
				}
				defer lm.Close()
				m := generate.Wrap(lm, lm.Info().Vocab)
				factory := c.drafter(t, lm)
				r := rand.New(rand.NewPCG(uint64(ci), 3))
				reqs := make([]request, 4)
				for i := range reqs {
					p := repetitive(randomIDs(r, m.VocabSize(), 14))
					o := generate.Options{MaxTokens: 12 + r.IntN(8), Sampler: sampler.Params{Logprobs: true}, PrefillChunkSize: []int{5, 2048}[i%2]}
					if i != 3 {
						o.Speculation = &generate.Speculation{NumDraft: 1 + i, Drafter: factory}
					}
					reqs[i] = request{prompt: p, o: o, join: i}
				}
				bo := generate.BatchOptions{MaxRows: 4, TokenBudget: 24}
				if paged {
					pool := poolFor(t, m, 4, 64)
					defer pool.Free()
					bo.Pool = pool
				}
				got, _ := runBatchStats(t, m, reqs, bo)
				drafted := 0
				for i, q := range reqs {
					alone := q.o
					alone.Speculation = nil
					sameAsSolo(t, c.target, i, got[i].solo, runSolo(t, m, q.prompt, alone))
					if s := got[i].stats.Speculation; s != nil {
						drafted += s.Drafted
					}
				}
				if drafted == 0 {
					t.Error("no row drafted")
				}
			})
		}
	}
}

// TestBatchSpecGrammar: a speculative row with a grammar (drafts made
// without the mask, the mask applied in the accept walk) decodes in a
// batch beside other rows what the request decodes alone without
// speculation, ending on the grammar.
func TestBatchSpecGrammar(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	g := readGolden(t, "gemma4_dense")
	m := loadModel(t, filepath.Join(fixtures, "gemma4_dense", "f32"), nil)
	prompt := repetitive(g.Prompt)
	allowed := []int{int(prompt[3]), int(prompt[5]), 7, 100, 201}
	opts := func(sp *generate.Speculation) generate.Options {
		return generate.Options{MaxTokens: 30, Grammar: &allowGrammar{allowed: allowed, n: 25}, Speculation: sp, Sampler: sampler.Params{Logprobs: true}}
	}
	want := runSolo(t, m, prompt, opts(nil))
	reqs := []request{
		{prompt: prompt, o: opts(&generate.Speculation{Lookup: true, NumDraft: 4})},
		{prompt: g.Prompt, o: generate.Options{MaxTokens: 20, Sampler: sampler.Params{Logprobs: true}}, join: 1},
		{prompt: prompt, o: opts(&generate.Speculation{Lookup: true, NumDraft: 2}), join: 2},
	}
	got, _ := runBatchStats(t, m, reqs, generate.BatchOptions{MaxRows: 3, TokenBudget: 64})
	sameAsSolo(t, "grammar", 0, got[0].solo, want)
	sameAsSolo(t, "grammar", 2, got[2].solo, want)
	sameAsSolo(t, "plain", 1, got[1].solo, runSolo(t, m, g.Prompt, reqs[1].o))
	if got[0].reason != generate.StopGrammar || got[0].stats.Speculation == nil || got[0].stats.Speculation.Drafted == 0 {
		t.Errorf("grammar row: %s, stats %+v", got[0].reason, got[0].stats.Speculation)
	}
}
