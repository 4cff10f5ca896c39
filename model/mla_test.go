package model_test

import (
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

var mlaFixtures = []string{"deepseek_v3", "deepseek_v3_yarn", "glm_moe_dsa_h8"}

func TestMLAParity(t *testing.T) {
	for _, v := range mlaFixtures {
		t.Run(v, func(t *testing.T) { checkFixture(t, filepath.Join("testdata", v)) })
	}
}

// TestGLMDSAParityTies holds GLM-5 (glm_moe_dsa) with 2 indexer heads,
// whose scores tie exactly at the top-k cut from the tenth position on
// (every head's ReLU zero), to HF's one-shot prefill at every position:
// the tied keys it keeps are the ones torch.topk keeps (torchTopK). Its
// chunked prefill and cached greedy are not compared: where ties straddle
// the cut, HF's choice for a query depends on how many masked future keys
// its row holds, so HF's no-cache recomputation is not causal there and
// no cache can follow it (TestTorchTopKMaskedTail). glm_moe_dsa_h8 (8
// heads, no ties in its goldens) is held to everything in mlaFixtures.
func TestGLMDSAParityTies(t *testing.T) {
	model.ForEachBackend(t, func(t *testing.T, _ tensor.Backend) {
		dir := filepath.Join("testdata", "glm_moe_dsa")
		g := readGolden(t, dir)
		m, err := model.Load(filepath.Join(dir, "f32"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		compareLogits(t, "one-shot prefill", prefillLogits(t, m, g.Prompt, 0), g.LogitsF32)
	})
}

// TestMLACompressedCache: each layer's cache holds kv_lora_rank +
// qk_rope_head_dim values per token (DeepSeek-V3), plus the indexer's key
// with DSA (GLM-5), whatever the number of heads.
func TestMLACompressedCache(t *testing.T) {
	for _, c := range []struct {
		dir    string
		perTok int // values per token per layer: 16 latent + 8 rope (+ 16 indexer)
	}{{"deepseek_v3", 16 + 8}, {"glm_moe_dsa", 16 + 8 + 16}} {
		t.Run(c.dir, func(t *testing.T) {
			g := readGolden(t, filepath.Join("testdata", c.dir))
			m, err := model.Load(filepath.Join("testdata", c.dir, "f32"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			caches := m.MakeCaches()
			defer model.FreeCaches(caches)
			sc := tensor.NewScope()
			if _, err := m.Forward(ids2D(g.Prompt), caches, nil); err != nil {
				t.Fatal(err)
			}
			sc.Close()
			for i, cc := range caches {
				st := cc.State()
				n := 0
				for _, a := range st.Arrays {
					n += a.Size()
				}
				st.Free()
				if want := c.perTok * len(g.Prompt); n != want {
					t.Errorf("layer %d holds %d values for %d tokens, want %d", i, n, len(g.Prompt), want)
				}
			}
			t.Logf("kv_bytes after %d tokens: %d", len(g.Prompt), caches[0].Bytes())
		})
	}
}
