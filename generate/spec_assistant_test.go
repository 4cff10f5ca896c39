package generate_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestSpecAssistant: the Gemma 4 assistant fixtures (tied and
// centroid-routed heads) draft for the gemma4_dense target through the
// verifier's target hooks; greedy output equals plain greedy's, drafts
// are proposed in every round the target's state allows (the first round
// and those after a sliding-window restore draft none), and a seeded
// sampled run is reproducible.
func TestSpecAssistant(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	tm, err := model.Load(filepath.Join(fixtures, "gemma4_dense", "f32"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tm.Close() })
	target, ok := tm.(*model.Loaded).Arch().(*model.Gemma4)
	if !ok {
		t.Fatal("gemma4_dense is not a Gemma4")
	}
	m := generate.Wrap(tm, tm.Info().Vocab)
	prompt := repetitive([]int32{5, 9, 33, 7, 10, 5, 9, 33, 7, 3, 2, 3, 5, 9, 33, 7, 40, 41})
	want, _, err := collect(t, m, prompt, &generate.Options{MaxTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tied", "ordered"} {
		t.Run(name, func(t *testing.T) {
			am, err := model.Load(filepath.Join(fixtures, "gemma4_assistant", name), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer am.Close()
			a := am.(*model.Loaded).Arch().(*model.Gemma4Assistant)
			sp := func(g int) *generate.Speculation {
				return &generate.Speculation{NumDraft: g, Drafter: func(info generate.DraftInfo) (generate.Drafter, error) {
					return generate.NewAssistantDrafter(a, target, info)
				}}
			}
			for _, g := range []int{1, 3, 6} {
				got, st, err := collect(t, m, prompt, &generate.Options{MaxTokens: 24, Speculation: sp(g)})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("γ=%d: differs from plain greedy at %d", g, firstDiff(got, want))
				}
				s := st.Speculation
				if s == nil || s.Drafted == 0 || s.DraftCalls != s.Drafted || s.Rounds == 0 {
					t.Fatalf("γ=%d: stats %+v", g, s)
				}
				t.Logf("γ=%d: %d drafted, %d accepted over %d rounds, %d target calls, %d restores", g, s.Drafted, s.Accepted, s.Rounds, s.TargetCalls, s.Restores)
			}
			seed := uint64(7)
			o := func() *generate.Options {
				return &generate.Options{MaxTokens: 16, Speculation: sp(3), Sampler: sampler.Params{Temperature: 0.9, Seed: &seed}}
			}
			a1, _, err := collect(t, m, prompt, o())
			if err != nil {
				t.Fatal(err)
			}
			a2, _, err := collect(t, m, prompt, o())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a1, a2) || len(a1) != 16 {
				t.Errorf("seeded sampling: %v then %v", a1, a2)
			}
		})
	}
	if _, err := generate.NewAssistantDrafter(nil, target, generate.DraftInfo{}); err == nil {
		t.Error("a nil assistant was accepted")
	}
}
