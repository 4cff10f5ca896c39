package quant

import (
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// convertCheckpoint runs Convert on the fixture in dir at bits (group 64)
// and returns the quantized folder and a float32 copy of it with every
// quantized tensor dequantized: the float model the quantized one must
// reproduce.
func convertCheckpoint(t *testing.T, dir string, bits int) (quant, dequant string) {
	t.Helper()
	return convertWith(t, dir, ConvertOptions{Quantize: true, Spec: tensor.QuantSpec{Bits: bits, GroupSize: 64}})
}

// convertWith is convertCheckpoint with any options.
func convertWith(t *testing.T, dir string, opts ConvertOptions) (quant, dequant string) {
	t.Helper()
	quant, dequant = t.TempDir(), t.TempDir()
	if err := Convert(dir, quant, opts); err != nil {
		t.Fatal(err)
	}
	if err := Dequantize(quant, dequant, tensor.Float32); err != nil {
		t.Fatal(err)
	}
	return quant, dequant
}

// TestGemma4Quantized checks checkpoints made by Convert (quantized
// embeddings and tied head, attention, MLP, router, per-layer gates):
// at 4 and 8 bits the quantized model must compute what the float model
// with the dequantized weights computes (the quantized kernels add no
// error of their own). The distance to HF's float32 logits is logged, not
// asserted: these tiny random models (weights of std 0.2, attention at
// scale 1 over unit-RMS queries and keys, so nearly argmax) are chaotic
// under any weight rounding, losing far more to it than trained
// checkpoints do (8 bits already cost some variants cosine 0.87).
func TestGemma4Quantized(t *testing.T) {
	ForEachBackend(t, func(t *testing.T, _ tensor.Backend) { gemma4Quantized(t) })
}

// gemma4Quantized runs TestGemma4Quantized's checks on the default backend.
func gemma4Quantized(t *testing.T) {
	for _, v := range gemma4Variants {
		t.Run(v, func(t *testing.T) {
			g := readFixtureGolden(t, v)
			for _, bits := range []int{4, 8} {
				qdir, ddir := convertCheckpoint(t, fixture(v, "f32"), bits)
				m := load(t, qdir)
				arch := m.Arch().(*model.Gemma4)
				if q, ok := arch.Blocks[0].Q.(*model.Linear); !ok || !q.Quantized() || arch.Embed.Scales == nil {
					t.Fatal("quantized checkpoint loaded as plain")
				}
				if b := arch.Blocks[0]; b.MoE != nil && !b.MoE.Experts.Gate.Quantized() {
					t.Fatal("experts loaded as plain")
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
}
