package model_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/modeltest"
	"github.com/mlxgo/mlxgo/tensor"
)

// bf16Fixtures are the new families' fixtures whose bf16 copy follows
// HF's bfloat16 greedy continuation (tools/oracle/models_more.py). The
// Qwen3.5 / Qwen3-Next and GLM-5 fixtures have bf16 copies and goldens
// too but part from HF by more than a bfloat16 step (our bf16 rounding
// differs from HF's mixed precision there); they are not held to it yet.
var bf16Fixtures = []string{"deepseek_v3", "deepseek_v3_yarn", "generic_phi3_longrope"}

// TestNewFamiliesBF16: each fixture's bfloat16 copy loads as bfloat16 and
// its greedy continuation through the caches (prefill chunks of 5) is
// HF's bfloat16 one, or, where the free-running paths part, HF's token is
// our argmax or ties it within one bfloat16 step at every forced step.
func TestNewFamiliesBF16(t *testing.T) {
	for _, v := range bf16Fixtures {
		t.Run(v, func(t *testing.T) {
			model.ForEachBackend(t, func(t *testing.T, _ tensor.Backend) {
				dir := filepath.Join("testdata", v)
				g := readGolden(t, dir)
				if len(g.GreedyBF16) == 0 {
					t.Fatal("golden.json has no greedy_bf16")
				}
				m, err := model.Load(filepath.Join(dir, "bf16"), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if m.Info().DType != tensor.BFloat16 {
					t.Errorf("dtype %v, want bfloat16", m.Info().DType)
				}
				got, err := modeltest.Greedy(m, g.Prompt, len(g.GreedyBF16), 5, nil)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Equal(got, g.GreedyBF16) {
					t.Logf("greedy bf16: %d tokens identical", len(got))
					return
				}
				n := 0
				for n < len(got) && got[n] == g.GreedyBF16[n] {
					n++
				}
				t.Logf("greedy bf16: free-running agrees for %d tokens; checking HF's path token by token", n)
				forcedBF16(t, m, g.Prompt, g.GreedyBF16, 5)
			})
		})
	}
}
