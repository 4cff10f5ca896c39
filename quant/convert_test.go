package quant

import (
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestConvertCosine converts a Llama with HF's default init scale (std
// 0.02) and compares logits with the float32 model's. On Gaussian random
// weights 4-bit affine quantization (group 64) leaves ~9% error in every
// weight, and the errors of the embedding, each layer and the head add up
// to a logit cosine similarity of about 0.97; 8 bits must give ≥ 0.999.
func TestConvertCosine(t *testing.T) {
	src := writeRandomLlama(t, 0.02)
	prompt := []int32{5, 9, 100, 42, 7, 300, 12, 1, 99, 250, 3, 17}
	logits := func(dir string) [][]float32 {
		m := load(t, dir)
		defer m.Close()
		return logitsOf(t, m, prompt, len(prompt)) // one pass through fresh caches
	}
	ref := logits(src)
	for _, c := range []struct {
		bits int
		min  float64
	}{{4, 0.95}, {8, 0.999}} {
		dst := t.TempDir()
		if err := Convert(src, dst, ConvertOptions{Quantize: true, Spec: tensor.QuantSpec{Bits: c.bits}}); err != nil {
			t.Fatal(err)
		}
		q := logits(dst)
		worst := 1.0
		for p := range ref {
			r := make([]float64, len(ref[p]))
			for i, x := range ref[p] {
				r[i] = float64(x)
			}
			worst = math.Min(worst, cosine(q[p], r))
		}
		t.Logf("%d-bit g64: min cosine similarity to float32 logits %.5f", c.bits, worst)
		if worst < c.min {
			t.Errorf("%d bits: cosine similarity %.4f < %.3f", c.bits, worst, c.min)
		}
	}
}
