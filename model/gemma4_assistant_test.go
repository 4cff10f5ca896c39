package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// assistantGolden is tools/oracle/models_gemma4_assistant.py's golden.json.
type assistantGolden struct {
	Target   string  `json:"target"`
	Prompt   []int32 `json:"prompt"`
	Steps    int     `json:"steps"`
	Variants map[string]struct {
		Drafts []int       `json:"drafts"`
		Logits [][]float32 `json:"logits"`
		Hidden [][]float32 `json:"hidden"`
		Normed bool        `json:"hidden_is_normed"`
	} `json:"variants"`
}

// TestGemma4AssistantParity: the Gemma 4 assistant drafter (a tied head,
// and the centroid-routed head of use_ordered_embeddings) drafts from the
// gemma4_dense target's state after prompt[:-1] — its final hidden
// state, its embedding of the last prompt token, its last sliding and
// full layers' K/V — the tokens, logits and projected hidden states
// transformers computes, step after step.
func TestGemma4AssistantParity(t *testing.T) {
	raw, err := os.ReadFile("testdata/gemma4_assistant/golden.json")
	if err != nil {
		t.Skipf("no assistant fixture: %v", err)
	}
	var g assistantGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	tm, err := Load(filepath.Join("testdata", g.Target), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	target := tm.(*Loaded).Arch().(*Gemma4)
	for name, want := range g.Variants {
		t.Run(name, func(t *testing.T) {
			if !want.Normed {
				t.Fatal("the oracle's target hidden state is not the final-normed one this code passes")
			}
			am, err := Load(filepath.Join("testdata", "gemma4_assistant", name), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer am.Close()
			a := am.(*Loaded).Arch().(*Gemma4Assistant)
			err = tensor.Try(func() {
				sc := tensor.NewScope()
				defer sc.Close()
				caches := target.MakeCaches()
				defer FreeCaches(caches)
				ids := g.Prompt[:len(g.Prompt)-1]
				h := target.Forward(tensor.FromInt32(ids, []int{1, len(ids)}), caches, nil)
				h = tensor.SliceAxis(h, 1, len(ids)-1, len(ids))
				shared, err := target.AssistantKV(caches, a.SlidingWindow())
				if err != nil {
					t.Fatal(err)
				}
				defer shared.Free()
				tok := g.Prompt[len(g.Prompt)-1]
				for step := range g.Steps {
					e, err := target.EmbedTokens(tensor.FromInt32([]int32{tok}, []int{1, 1}))
					if err != nil {
						t.Fatal(err)
					}
					proj, logits := a.Step(tensor.Concatenate([]*tensor.Array{e, h}, 2), shared, len(g.Prompt)-1)
					lg := tensor.AsType(logits, tensor.Float32).Float32s()
					hid := tensor.AsType(proj, tensor.Float32).Float32s()
					if d := maxAbsDiff(lg, want.Logits[step]); d > 2e-4 {
						t.Errorf("step %d: logits differ from HF's by up to %g", step, d)
					}
					if d := maxAbsDiff(hid, want.Hidden[step]); d > 2e-4 {
						t.Errorf("step %d: projected hidden state differs from HF's by up to %g", step, d)
					}
					best := 0
					for i, v := range lg {
						if v > lg[best] {
							best = i
						}
					}
					if best != want.Drafts[step] {
						t.Fatalf("step %d: drafted %d, HF %d", step, best, want.Drafts[step])
					}
					tok, h = int32(best), proj
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}
