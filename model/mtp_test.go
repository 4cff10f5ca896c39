package model_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// mtpFixtures are the checkpoints with an MTP block
// (tools/oracle/models_more.py's *_mtp variants).
var mtpFixtures = []string{"deepseek_v3_mtp", "glm_moe_dsa_mtp", "qwen3_next_mtp", "qwen3_5_mtp"}

// mtpLogits runs the model over prompt and the MTP block over the pairs
// (hidden_i, prompt_{i+1}) in chunks (0: at once, without a cache) and
// returns the block's logits at each of the len(prompt)-1 positions.
func mtpLogits(t *testing.T, m *model.Loaded, mtp *model.MTP, prompt []int32, chunk int) [][]float32 {
	t.Helper()
	sc := tensor.NewScope()
	defer sc.Close()
	h, err := m.Forward(ids2D(prompt), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := len(prompt) - 1
	var caches []kv.Cache
	if chunk > 0 {
		caches = mtp.MakeCaches()
		defer model.FreeCaches(caches)
	} else {
		chunk = n
	}
	var out [][]float32
	for s := 0; s < n; s += chunk {
		e := min(s+chunk, n)
		var c kv.Cache
		if caches != nil {
			c = caches[0]
		}
		_, l, err := mtp.Step(0, tensor.SliceAxis(h, 1, s, e), ids2D(prompt[s+1:e+1]), c)
		if err != nil {
			t.Fatal(err)
		}
		v := f32s(t, l)
		vocab := len(v) / (e - s)
		for i := range e - s {
			out = append(out, v[i*vocab:(i+1)*vocab])
		}
	}
	return out
}

// TestMTPParity: each MTP fixture's model proper matches HF (checkFixture;
// the MTP tensors load instead of failing the weight audit), and its MTP
// block's logits match the oracle's, which runs HF's own decoder-layer and
// norm modules for the block (transformers loads but never runs MTP
// weights): at once and through the block's cache in chunks of 1 and 3.
func TestMTPParity(t *testing.T) {
	for _, v := range mtpFixtures {
		t.Run(v, func(t *testing.T) {
			dir := filepath.Join("testdata", v)
			checkFixture(t, dir)
			model.ForEachBackend(t, func(t *testing.T, _ tensor.Backend) {
				raw, err := os.ReadFile(filepath.Join(dir, "golden.json"))
				if err != nil {
					t.Fatal(err)
				}
				var g struct {
					Prompt []int32     `json:"prompt"`
					MTP    [][]float64 `json:"mtp_logits_f32"`
				}
				if err := json.Unmarshal(raw, &g); err != nil {
					t.Fatal(err)
				}
				lm, err := model.Load(filepath.Join(dir, "f32"), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer lm.Close()
				m := lm.(*model.Loaded)
				mtp, ok := m.MTP()
				if !ok {
					t.Fatal("no MTP head")
				}
				if mtp.Depth() != 1 {
					t.Errorf("depth %d, want 1", mtp.Depth())
				}
				compareLogits(t, "MTP at once", mtpLogits(t, m, mtp, g.Prompt, 0), g.MTP)
				compareLogits(t, "MTP through its cache, chunks of 1", mtpLogits(t, m, mtp, g.Prompt, 1), g.MTP)
				compareLogits(t, "MTP through its cache, chunks of 3", mtpLogits(t, m, mtp, g.Prompt, 3), g.MTP)
			})
		})
	}
}

// TestMTPErrors: a model without MTP weights has no MTP head; bad blocks
// and shapes come back as errors.
func TestMTPErrors(t *testing.T) {
	plain, err := model.Load(filepath.Join("testdata", "deepseek_v3", "f32"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, ok := plain.(*model.Loaded).MTP(); ok {
		t.Error("deepseek_v3 without MTP weights has an MTP head")
	}
	lm, err := model.Load(filepath.Join("testdata", "deepseek_v3_mtp", "f32"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	mtp, _ := lm.(*model.Loaded).MTP()
	sc := tensor.NewScope()
	defer sc.Close()
	h := tensor.Zeros([]int{1, 2, lm.Info().Hidden}, tensor.Float32)
	if _, _, err := mtp.Step(1, h, ids2D([]int32{3, 4}), nil); err == nil {
		t.Error("block 1 of 1: no error")
	}
	if _, _, err := mtp.Step(0, h, ids2D([]int32{3}), nil); err == nil {
		t.Error("2 hidden states, 1 token: no error")
	}
	if _, _, err := mtp.Step(0, tensor.Zeros([]int{1, 2, 5}, tensor.Float32), ids2D([]int32{3, 4}), nil); err == nil {
		t.Error("hidden size 5: no error")
	}
}
