package quant

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/model/modeltest"
	"github.com/mlxgo/mlxgo/tensor"
)

// demoGolden is the part of model/demo's golden.json (HF transformers on
// the shipped bf16 folder) these tests use: the prompts' ids.
type demoGolden struct {
	Prompts []struct {
		IDs []int32 `json:"ids"`
	} `json:"prompts"`
}

func readDemoGolden(t *testing.T) *demoGolden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "model", "demo", "testdata", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g demoGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Prompts) < 5 {
		t.Fatalf("golden has %d prompts", len(g.Prompts))
	}
	return &g
}

// demoCache points the demo package's cache at a fresh temp folder.
func demoCache(t *testing.T) {
	t.Helper()
	t.Setenv(demo.CacheEnv, t.TempDir())
}

// dequantize writes a float32 copy of the quantized checkpoint in dir
// (Dequantize): the float model that the 4-bit one must reproduce.
// The float32 path is itself checked against HF by model/demo's TestGreedyF32.
func dequantize(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	if err := Dequantize(dir, out, tensor.Float32); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestQuantized is the 4-bit parity check. Its reference is the float32
// model of the dequantized weights (what HF computes on them, since the
// float32 path matches HF's): the 4-bit model's logits must keep cosine
// ≥ 0.999 with it and its greedy tokens must match up to the reference's
// first near-tie. Against the bf16 model (not the reference: it lacks the
// quantization error) the cosine must stay ≥ 0.97; it is logged.
func TestQuantized(t *testing.T) {
	demoCache(t)
	g := readDemoGolden(t)
	qdir, err := demo.QuantizedPath()
	if err != nil {
		t.Fatal(err)
	}
	bdir, err := demo.Path()
	if err != nil {
		t.Fatal(err)
	}
	var qc struct {
		Q struct {
			Group int `json:"group_size"`
			Bits  int `json:"bits"`
		} `json:"quantization"`
	}
	raw, err := os.ReadFile(filepath.Join(qdir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &qc); err != nil || qc.Q.Bits != 4 || qc.Q.Group != 64 {
		t.Fatalf("q4 config.json quantization %+v (%v)", qc.Q, err)
	}
	q := load(t, qdir)
	defer q.Close()
	b := load(t, bdir)
	defer b.Close()
	ref := load(t, dequantize(t, qdir))
	defer ref.Close()
	total := 0
	for _, p := range g.Prompts {
		lq := modeltest.LastLogits(t, q, p.IDs)
		lr := f64s(modeltest.LastLogits(t, ref, p.IDs))
		cosRef := cosine(lq, lr)
		cosBF := cosine(lq, f64s(modeltest.LastLogits(t, b, p.IDs)))
		// reference greedy and its gaps
		want, err := modeltest.Greedy(ref, p.IDs, 16, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		gaps := modeltest.RefGaps(t, ref, p.IDs, want)
		out, err := modeltest.Greedy(q, p.IDs, 16, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		same, tie := modeltest.Agree(out, want, gaps, 0.25)
		total += modeltest.CheckForced(t, fmt.Sprintf("%d-token prompt, teacher-forced", len(p.IDs)), modeltest.ForcedArgmax(t, q, p.IDs, want), want, gaps, 0.25)
		t.Logf("%3d-token prompt: cosine vs dequantized f32 %.6f, vs bf16 %.4f; greedy %d/16 same as the reference (near-tie at %d)",
			len(p.IDs), cosRef, cosBF, same, tie)
		if cosRef < 0.999 {
			t.Errorf("%d-token prompt: 4-bit logits cosine %.5f with the dequantized reference", len(p.IDs), cosRef)
		}
		if cosBF < 0.97 {
			t.Errorf("%d-token prompt: 4-bit logits cosine %.4f with bf16", len(p.IDs), cosBF)
		}
		if same < tie {
			t.Errorf("greedy diverges at %d before the reference's first near-tie at %d:\n got %v\nwant %v", same, tie, out, want)
		}
	}
	if total < 40 {
		t.Errorf("only %d teacher-forced steps compared with the reference", total)
	}
}
