package generate_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// plainForward hides a Model's ForwardOutputs: every pass computes every
// position, as before the loop asked for the sampled ones alone.
type plainForward struct{ generate.Model }

// countOutputs counts the passes that asked for some positions only.
type countOutputs struct {
	generate.Model
	of    generate.OutputForwarder
	asked int
}

func (c *countOutputs) ForwardOutputs(ids *tensor.Array, caches []kv.Cache, pos []int32) (*tensor.Array, error) {
	c.asked++
	return c.of.ForwardOutputs(ids, caches, pos)
}

// TestOutputsSameTokens: generating with the model asked for the sampled
// positions' hidden states only (Wrap's ForwardOutputs: the last layer's
// feed-forward skipped for the rest of a prompt chunk) gives the ids and
// logprob bits of generating with every position computed, alone (prompts
// of one and of several prefill chunks) and in a batch whose passes mix
// prefill chunks and decoding rows; and the loop does ask.
func TestOutputsSameTokens(t *testing.T) {
	for _, fx := range []string{"llama3", "qwen3", "gemma4_ple"} {
		for _, form := range []string{"f32", "bf16"} {
			t.Run(fx+"/"+form, func(t *testing.T) {
				defer tensortest.NoLeaks(t)()
				mm, err := model.Load(filepath.Join(fixtures, fx, form), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer mm.Close()
				w := generate.Wrap(mm, mm.Info().Vocab)
				of := &countOutputs{Model: w, of: w.(generate.OutputForwarder)}
				plain := plainForward{w}
				prompt := func(n, seed int) []int32 {
					p := make([]int32, n)
					for i := range p {
						p[i] = int32((i*29 + seed*13 + 3) % w.VocabSize())
					}
					return p
				}
				opts := generate.Options{MaxTokens: 8, PrefillChunkSize: 5, Sampler: sampler.Params{Logprobs: true}}
				for _, n := range []int{1, 4, 13} {
					p := prompt(n, n)
					a, b := runSolo(t, of, p, opts), runSolo(t, plain, p, opts)
					if !slices.Equal(a.ids, b.ids) || !slices.Equal(a.lps, b.lps) {
						t.Fatalf("prompt of %d: ids %v / logprobs %x asking for outputs, %v / %x computing all", n, a.ids, a.lps, b.ids, b.lps)
					}
				}
				if of.asked == 0 {
					t.Fatal("the stream never asked for some positions only")
				}
				asked := of.asked
				run := func(m generate.Model) map[int]*solo {
					bt, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: 3, TokenBudget: 12})
					if err != nil {
						t.Fatal(err)
					}
					rows := map[*generate.Row]int{}
					got := map[int]*solo{}
					for i, n := range []int{9, 2, 17} {
						o := opts
						r, err := bt.Add(context.Background(), prompt(n, 40+i), &o)
						if err != nil {
							t.Fatal(err)
						}
						rows[r], got[i] = i, &solo{}
					}
					for bt.Stats().RowsRunning+bt.Stats().RowsWaiting > 0 {
						evs, err := bt.Step()
						if err != nil {
							t.Fatal(err)
						}
						for _, ev := range evs {
							got[rows[ev.Row]].add(ev.Tokens)
						}
					}
					bt.Close()
					return got
				}
				a, b := run(of), run(plain)
				for i := range a {
					if !slices.Equal(a[i].ids, b[i].ids) || !slices.Equal(a[i].lps, b[i].lps) {
						t.Fatalf("batch row %d: ids %v asking for outputs, %v computing all", i, a[i].ids, b[i].ids)
					}
				}
				if of.asked == asked {
					t.Fatal("the batch never asked for some positions only")
				}
			})
		}
	}
}
