package generate_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestSpecMTP: the MTP fixtures (DeepSeek-V3's block; Qwen3-Next's, whose
// recurrent layers restore snapshots) draft for their own model through
// the verifier's prefill and round hooks; greedy output equals plain
// greedy at γ 1, 2 and 4, and drafts are proposed.
func TestSpecMTP(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	for _, name := range []string{"deepseek_v3_mtp", "qwen3_next_mtp"} {
		t.Run(name, func(t *testing.T) {
			lm, err := model.Load(filepath.Join(fixtures, name, "f32"), nil)
			if err != nil {
				t.Skipf("MTP fixture: %v", err)
			}
			defer lm.Close()
			p, ok := lm.(*model.Loaded).MTP()
			if !ok {
				t.Fatal("no MTP head")
			}
			m := generate.Wrap(lm, lm.Info().Vocab)
			prompt := repetitive([]int32{5, 9, 33, 7, 10, 5, 9, 33, 7, 3, 2, 3, 5, 9, 33, 7, 40, 41})
			want, _, err := collect(t, m, prompt, &generate.Options{MaxTokens: 24, PrefillChunkSize: 7})
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range []int{1, 2, 4} {
				sp := &generate.Speculation{NumDraft: g, Drafter: func(info generate.DraftInfo) (generate.Drafter, error) {
					return generate.NewMTPDrafter(p, info)
				}}
				got, st, err := collect(t, m, prompt, &generate.Options{MaxTokens: 24, PrefillChunkSize: 7, Speculation: sp})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Errorf("γ=%d: differs from plain greedy at %d", g, firstDiff(got, want))
				}
				s := st.Speculation
				if s == nil || s.Drafted == 0 || s.DraftCalls == 0 {
					t.Fatalf("γ=%d: stats %+v", g, s)
				}
				t.Logf("γ=%d: %d drafted, %d accepted (by position %v of %v), %d target calls, %d MTP steps, %d restores",
					g, s.Drafted, s.Accepted, s.AcceptedByPos, s.DraftedByPos, s.TargetCalls, s.DraftCalls, s.Restores)
			}
		})
	}
}

// TestSpecMTPWarmCaches: a second turn that starts from the first turn's
// caches (the prompt cache's path: the MTP block sees only the new
// positions) decodes plain greedy's tokens with MTP drafts.
func TestSpecMTPWarmCaches(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	lm, err := model.Load(filepath.Join(fixtures, "deepseek_v3_mtp", "f32"), nil)
	if err != nil {
		t.Skipf("MTP fixture: %v", err)
	}
	defer lm.Close()
	p, _ := lm.(*model.Loaded).MTP()
	m := generate.Wrap(lm, lm.Info().Vocab)
	turn1 := repetitive([]int32{5, 9, 33, 7, 10, 5, 9, 33, 7, 3, 2, 3, 5, 9, 33, 7, 40, 41})
	sp := &generate.Speculation{NumDraft: 3, Drafter: func(info generate.DraftInfo) (generate.Drafter, error) {
		return generate.NewMTPDrafter(p, info)
	}}
	s, err := generate.Generate(context.Background(), m, turn1, &generate.Options{MaxTokens: 8, Speculation: sp})
	if err != nil {
		t.Fatal(err)
	}
	var gen1 []int32
	for tok, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		gen1 = append(gen1, tok.ID)
	}
	held := s.Stats().CacheTokens
	caches := s.TakeCaches()
	s.Close()
	defer model.FreeCaches(caches)
	turn2 := slices.Concat(turn1, gen1, []int32{11, 12, 13, 5, 9, 33})
	if !slices.Equal(held, turn2[:len(held)]) {
		t.Fatalf("caches hold %v, not a prefix of turn 2", held)
	}
	want, _, err := collect(t, m, turn2, &generate.Options{MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	got, st, err := collect(t, m, turn2, &generate.Options{MaxTokens: 16, Caches: caches, Speculation: sp})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) || st.CachedTokens != len(held) {
		t.Errorf("warm turn: %v (%d cached), cold plain %v", got, st.CachedTokens, want)
	}
	if st.Speculation == nil || st.Speculation.Drafted == 0 {
		t.Errorf("warm turn drafted nothing: %+v", st.Speculation)
	}
}
