package quant

import (
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// newFamilyFixtures are the Qwen3.5 / Qwen3-Next, MLA (DeepSeek-V3, GLM-5
// with DSA, one with an MTP block) and Phi-3 fixtures.
var newFamilyFixtures = []string{
	"qwen3_5", "qwen3_5_moe", "qwen3_next", "deepseek_v3", "glm_moe_dsa_h8", "deepseek_v3_mtp", "generic_phi3_longrope",
}

// TestNewFamiliesQuantized: each new family's fixture converted at 4 and
// 8 bits (group 32, the fixtures' widths being 16 to 64) loads with every
// converted tensor used (so its quantized modules load as such; an MTP
// block's too), and computes
// what the float model with the dequantized weights computes (cosine ≥
// 0.9999 at every prompt position, through caches in chunks of 5). The
// distance to HF's float32 logits is logged only (see TestGemma4Quantized).
func TestNewFamiliesQuantized(t *testing.T) {
	ForEachBackend(t, func(t *testing.T, _ tensor.Backend) {
		for _, v := range newFamilyFixtures {
			t.Run(v, func(t *testing.T) {
				g := readFixtureGolden(t, v)
				for _, bits := range []int{4, 8} {
					qdir, ddir := convertWith(t, fixture(v, "f32"), ConvertOptions{Quantize: true, Spec: tensor.QuantSpec{Bits: bits, GroupSize: 32}})
					if scalesIn(t, qdir) == 0 {
						t.Fatalf("%d-bit: nothing quantized", bits)
					}
					m := load(t, qdir)
					if _, ok := m.MTP(); ok != strings.HasSuffix(v, "_mtp") {
						t.Errorf("%d-bit: MTP head %v", bits, ok)
					}
					got := logitsOf(t, m, g.Prompt, 5)
					unused := m.Unused()
					m.Close()
					if len(unused) > 0 {
						t.Errorf("converted tensors never loaded: %v", unused)
					}
					dm := load(t, ddir)
					ref := logitsOf(t, dm, g.Prompt, 0)
					dm.Close()
					same := minCosine(toF64(ref), got)
					hf := minCosine(g.LogitsF32, got)
					t.Logf("%d-bit: min cosine to the dequantized float model %.6f, to HF float32 %.4f", bits, same, hf)
					if same < 0.9999 {
						t.Errorf("%d-bit: quantized kernels differ from the dequantized model (cosine %.6f)", bits, same)
					}
				}
			})
		}
	})
}

// scalesIn counts the quantized modules stored in dir.
func scalesIn(t *testing.T, dir string) int {
	t.Helper()
	set, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	n := 0
	for _, name := range set.Names() {
		if strings.HasSuffix(name, ".scales") {
			n++
		}
	}
	return n
}
