package demo

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/model/modeltest"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// goldenQ4 is tools/demo-model/q4_reference.py's output: HF transformers
// (float32) on the 4-bit checkpoint's weights expanded with the affine
// scheme — the float model the 4-bit form must reproduce.
type goldenQ4 struct {
	Bits      int `json:"bits"`
	GroupSize int `json:"group_size"`
	Prompts   []struct {
		IDs        []int32   `json:"ids"`
		LogitsLast []float64 `json:"logits_last"`
		Greedy     []int32   `json:"greedy"`
		Gaps       []float64 `json:"gaps"`
	} `json:"prompts"`
}

// TestQuantizedMatchesHF: mlxgo's 4-bit demo model (bf16 activations,
// quantized matmuls) against HF transformers running the dequantized
// weights: last-position logits nearly parallel and close, and greedy
// decoding identical up to HF's first near-tie.
func TestQuantizedMatchesHF(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	cacheDir(t)
	raw, err := os.ReadFile(filepath.Join("testdata", "golden_q4.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenQ4
	if err := json.Unmarshal(raw, &g); err != nil || len(g.Prompts) == 0 {
		t.Fatalf("golden_q4.json: %v (%d prompts)", err, len(g.Prompts))
	}
	qdir, err := QuantizedPath()
	if err != nil {
		t.Fatal(err)
	}
	q := load(t, qdir)
	defer q.Close()
	total := 0
	for _, p := range g.Prompts {
		lg := modeltest.LastLogits(t, q, p.IDs)
		cos := cosine(lg, p.LogitsLast)
		maxRef, maxDiff := 0.0, 0.0
		for i, v := range p.LogitsLast {
			maxRef = math.Max(maxRef, math.Abs(v))
			maxDiff = math.Max(maxDiff, math.Abs(float64(lg[i])-v))
		}
		out, err := modeltest.Greedy(q, p.IDs, len(p.Greedy), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		same, tie := modeltest.Agree(out, p.Greedy, p.Gaps, 0.25)
		total += modeltest.CheckForced(t, fmt.Sprintf("%d-token prompt, teacher-forced", len(p.IDs)), modeltest.ForcedArgmax(t, q, p.IDs, p.Greedy), p.Greedy, p.Gaps, 0.25)
		t.Logf("%3d-token prompt: cosine %.6f, max |Δlogit| %.3f of max %.1f; greedy %d/%d same (HF near-tie at %d)",
			len(p.IDs), cos, maxDiff, maxRef, same, len(p.Greedy), tie)
		if cos < 0.9995 {
			t.Errorf("%d-token prompt: logits cosine %.6f with HF on the dequantized weights", len(p.IDs), cos)
		}
		if maxDiff > 0.05*maxRef {
			t.Errorf("%d-token prompt: logits differ by %.3f (max |logit| %.1f)", len(p.IDs), maxDiff, maxRef)
		}
		if same < tie {
			t.Errorf("greedy diverges at %d before HF's first near-tie at %d:\n got %v\nwant %v", same, tie, out, p.Greedy)
		}
	}
	// every divergence above sits at a near-tie; teacher forcing keeps
	// comparing after it
	if total < 6*len(g.Prompts) {
		t.Errorf("only %d of %d teacher-forced steps compared", total, 16*len(g.Prompts))
	}
}
