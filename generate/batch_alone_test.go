package generate_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestBatchPrefillAlone: with PrefillAlone 3 and three rows decoding, the
// pass in which a joiner's prompt ends holds the joiner alone (its whole
// prompt, its first token out, no decoding row's) and the next pass every
// row (the joiner now decoding too); with two rows decoding the joiner's
// pass holds them too. Every row still equals its solo run.
func TestBatchPrefillAlone(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	mm, err := model.Load(filepath.Join(fixtures, "llama3", "f32"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mm.Close()
	m := generate.Wrap(mm, mm.Info().Vocab)
	prompt := func(n, seed int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32((i*31 + seed*17 + 5) % m.VocabSize())
		}
		return p
	}
	for _, decoding := range []int{2, 3} {
		b, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: 4, TokenBudget: 64, PrefillAlone: 3})
		if err != nil {
			t.Fatal(err)
		}
		opts := generate.Options{MaxTokens: 6, Sampler: sampler.Params{Logprobs: true}}
		got := map[*generate.Row]*solo{}
		prompts := map[*generate.Row][]int32{}
		step := func() map[*generate.Row]int {
			evs, err := b.Step()
			if err != nil {
				t.Fatal(err)
			}
			out := map[*generate.Row]int{}
			for _, ev := range evs {
				if got[ev.Row] == nil {
					got[ev.Row] = &solo{}
				}
				got[ev.Row].add(ev.Tokens)
				out[ev.Row] += len(ev.Tokens)
				if ev.Done {
					got[ev.Row].reason = ev.Row.Stats().StopReason
				}
			}
			return out
		}
		for i := range decoding {
			p := prompt(5+i, i)
			o := opts
			r, err := b.Add(context.Background(), p, &o)
			if err != nil {
				t.Fatal(err)
			}
			prompts[r] = p
		}
		step() // the decoding rows' prompts and first tokens
		jp := prompt(9, 50)
		o := opts
		joiner, err := b.Add(context.Background(), jp, &o)
		if err != nil {
			t.Fatal(err)
		}
		prompts[joiner] = jp
		out := step()
		if decoding == 3 {
			if out[joiner] != 1 || len(out) != 1 || b.Stats().LastStepTokens != len(jp) {
				t.Fatalf("%d decoding: the joiner's pass gave %v tokens to rows (%d tokens in the pass), want its first token alone in a pass of its %d prompt tokens", decoding, out, b.Stats().LastStepTokens, len(jp))
			}
			if out = step(); len(out) != decoding+1 || b.Stats().LastStepTokens != decoding+1 {
				t.Fatalf("the pass after the joiner's gave %v (%d tokens), want a token to each of the %d rows, the joiner's second", out, b.Stats().LastStepTokens, decoding+1)
			}
		} else if out[joiner] != 1 || len(out) != decoding+1 {
			t.Fatalf("%d decoding (below PrefillAlone): the joiner's pass gave %v, want every row a token", decoding, out)
		}
		for !b.Idle() {
			step()
		}
		b.Close()
		i := 0
		for r, g := range got {
			sameAsSolo(t, "llama3", i, *g, runSolo(t, m, prompts[r], opts))
			i++
		}
	}
}
