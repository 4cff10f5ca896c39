package model_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// dequantized writes a copy of the quantized checkpoint in src with every
// packed weight dequantized to float32 and no quantization config.
func dequantized(t *testing.T, src string) string {
	t.Helper()
	cfg, err := model.ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	set, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	out := map[string]*tensor.Array{}
	for _, n := range set.Names() {
		if strings.HasSuffix(n, ".scales") || strings.HasSuffix(n, ".biases") {
			continue
		}
		a, err := set.Array(n, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(n, ".weight")
		if set.Has(base + ".scales") {
			s, _ := set.Array(base+".scales", nil, true)
			b, _ := set.Array(base+".biases", nil, true)
			spec, _ := cfg.Quant.For(base)
			d := tensor.Dequantize(a, s, b, spec.GroupSize, spec.Bits, tensor.Float32)
			tensor.Free(a, s, b)
			a = d
		}
		out[n] = a
	}
	dst := t.TempDir()
	if err := safetensors.WriteArrays(filepath.Join(dst, "model.safetensors"), out, nil); err != nil {
		t.Fatal(err)
	}
	for _, a := range out {
		a.Free()
	}
	var m map[string]any
	if err := json.Unmarshal(cfg.Raw, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "quantization")
	delete(m, "quantization_config")
	raw, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestConvertCosine converts a Llama with HF's default init scale (std
// 0.02) and compares logits with the float32 model's. On Gaussian random
// weights 4-bit affine quantization (group 64) leaves ~9% error in every
// weight, and the errors of the embedding, each layer and the head add up
// to a logit cosine similarity of about 0.97; 8 bits must give ≥ 0.999.
func TestConvertCosine(t *testing.T) {
	src := writeRandomLlama(t, 0.02)
	prompt := []int32{5, 9, 100, 42, 7, 300, 12, 1, 99, 250, 3, 17}
	logits := func(dir string) [][]float32 {
		m, err := model.Load(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		return prefillLogits(t, m, prompt, 0)
	}
	ref := logits(src)
	for _, c := range []struct {
		bits int
		min  float64
	}{{4, 0.95}, {8, 0.999}} {
		dst := t.TempDir()
		if err := model.Convert(src, dst, model.ConvertOptions{Quantize: true, Bits: c.bits}); err != nil {
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

func cosine(a []float32, b []float64) float64 {
	var ab, aa, bb float64
	for i := range b {
		ab += float64(a[i]) * b[i]
		aa += float64(a[i]) * float64(a[i])
		bb += b[i] * b[i]
	}
	return ab / math.Sqrt(aa*bb)
}
