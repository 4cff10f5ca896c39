package generate_test

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// solo is what a request generates alone: ids, logprob bits, top
// alternatives and the stop reason.
type solo struct {
	ids    []int32
	lps    []uint32
	top    [][]sampler.TokenLogprob
	reason string
}

func (s *solo) add(toks []generate.Token) {
	for _, t := range toks {
		s.ids = append(s.ids, t.ID)
		s.lps = append(s.lps, math.Float32bits(t.Logprob))
		s.top = append(s.top, t.Top)
	}
}

func runSolo(t *testing.T, m generate.Model, prompt []int32, o generate.Options) solo {
	t.Helper()
	s, err := generate.Generate(context.Background(), m, prompt, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out solo
	for tok, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		out.add([]generate.Token{tok})
	}
	out.reason = s.Stats().StopReason
	return out
}

// request is one row of a randomized schedule.
type request struct {
	prompt   []int32
	o        generate.Options
	join     int // the step at which it is added
	cancelAt int // the step before which it is cancelled (0: never)
}

func randomRequest(r *rand.Rand, vocab int, eos []int32) request {
	prompt := make([]int32, 1+r.IntN(40))
	for i := range prompt {
		prompt[i] = int32(r.IntN(vocab))
	}
	p := sampler.Params{Logprobs: true}
	seed := r.Uint64()
	p.Seed = &seed
	if r.IntN(3) > 0 {
		p.Temperature = 0.5 + r.Float64()
		if r.IntN(2) == 0 {
			p.TopP = 0.5 + r.Float64()/2
		}
		if r.IntN(2) == 0 {
			p.TopK = 1 + r.IntN(20)
		}
		if r.IntN(3) == 0 {
			p.MinP = r.Float64() / 10
		}
	}
	if r.IntN(3) == 0 {
		p.RepetitionPenalty = 1 + r.Float64()/2
	}
	if r.IntN(2) == 0 {
		p.TopLogprobs = 1 + r.IntN(4)
	}
	if r.IntN(4) == 0 {
		p.LogitBias = map[int]float64{r.IntN(vocab): 3}
	}
	o := generate.Options{MaxTokens: 1 + r.IntN(12), Sampler: p, EOS: eos, PrefillChunkSize: []int{1, 7, 2048}[r.IntN(3)]}
	return request{prompt: prompt, o: o}
}

// runBatch runs the requests through one Batch, each joining at its step
// and cancelled before its cancel step, and returns what each delivered.
func runBatch(t *testing.T, m generate.Model, reqs []request, bo generate.BatchOptions) ([]solo, generate.BatchStats) {
	t.Helper()
	b, err := generate.NewBatch(m, bo)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out := make([]solo, len(reqs))
	rows := make([]*generate.Row, len(reqs))
	byRow := map[*generate.Row]int{}
	added := 0
	for step := 0; step < 10000; step++ {
		for i, q := range reqs {
			if rows[i] == nil && q.join <= step {
				o := q.o
				row, err := b.Add(context.Background(), q.prompt, &o)
				if err != nil {
					t.Fatal(err)
				}
				rows[i], byRow[row] = row, i
				added++
			}
			if rows[i] != nil && q.cancelAt > 0 && q.cancelAt == step {
				rows[i].Cancel()
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
			if ev.Err != nil && ev.Row.Stats().StopReason != generate.StopCancelled {
				t.Fatalf("row %d: %v", i, ev.Err)
			}
			out[i].add(ev.Tokens)
			if ev.Done {
				out[i].reason = ev.Row.Stats().StopReason
			}
		}
	}
	t.Fatal("batch did not finish in 10000 steps")
	return nil, generate.BatchStats{}
}

// sameAsSolo compares a batched row with its solo run: equal tokens and
// logprobs (bit for bit) and stop reason; a cancelled row delivered a
// prefix of its solo run.
func sameAsSolo(t *testing.T, name string, i int, got, want solo) {
	t.Helper()
	if got.reason == generate.StopCancelled {
		if n := len(got.ids); n > len(want.ids) || !slices.Equal(got.ids, want.ids[:n]) || !slices.Equal(got.lps, want.lps[:n]) {
			t.Errorf("%s row %d (cancelled): delivered %v, not a prefix of its solo run %v", name, i, got.ids, want.ids)
		}
		return
	}
	if !slices.Equal(got.ids, want.ids) || got.reason != want.reason {
		t.Errorf("%s row %d: batched %v (%s), alone %v (%s)", name, i, got.ids, got.reason, want.ids, want.reason)
		return
	}
	if !slices.Equal(got.lps, want.lps) {
		t.Errorf("%s row %d: logprobs differ from the row alone (bits %x vs %x)", name, i, got.lps, want.lps)
	}
	for k := range got.top {
		if !slices.Equal(got.top[k], want.top[k]) {
			t.Errorf("%s row %d token %d: top logprobs %v vs %v", name, i, k, got.top[k], want.top[k])
			return
		}
	}
}

// TestBatchLoneRowEqualsGenerate: a request alone in a Batch generates
// exactly what Generate does, on every fixture.
func TestBatchLoneRowEqualsGenerate(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, name := range allFixtures {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, filepath.Join(fixtures, name, "f32"), nil)
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			for k := range 3 {
				q := randomRequest(r, m.VocabSize(), nil)
				want := runSolo(t, m, q.prompt, q.o)
				got, st := runBatch(t, m, []request{q}, generate.BatchOptions{TokenBudget: 2048})
				sameAsSolo(t, name, k, got[0], want)
				if st.MaxRows != 1 {
					t.Errorf("max rows %d", st.MaxRows)
				}
			}
		})
	}
}
