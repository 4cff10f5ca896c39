package model

import (
	"math"
	"math/rand"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestMLAPackedAbsorb: a quantized kv_b_proj split per head and applied
// by the quantized matmul (the key part untransposed, the value part
// transposed) computes what the dequantized per-head projections do, for
// queries [B, H, T, nope] and latent outputs [B, H, T, rank].
func TestMLAPackedAbsorb(t *testing.T) {
	ForEachBackend(t, func(t *testing.T, _ tensor.Backend) { mlaPackedAbsorb(t) })
}

func mlaPackedAbsorb(t *testing.T) {
	const h, nope, vd, rank, bs, tt = 3, 16, 8, 64, 2, 5
	r := rand.New(rand.NewSource(4))
	rnd := func(shape ...int) *tensor.Array {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return tensor.Reshape(float32sOn(tensor.Default(), v), shape...)
	}
	sc := tensor.NewScope()
	defer sc.Close()
	w := rnd(h*(nope+vd), rank)
	wq, s, b := tensor.Quantize(w, 32, 4)
	l := &Linear{Weight: wq, Scales: s, Biases: b, QuantSpec: tensor.QuantSpec{GroupSize: 32, Bits: 4}}
	kq, vq := splitPackedKVB(l, h, nope, vd)
	deq := tensor.Reshape(tensor.Dequantize(wq, s, b, 32, 4, tensor.Float32), h, nope+vd, rank)
	wk := tensor.SliceAxis(deq, 1, 0, nope)                              // [H, nope, rank]
	wv := tensor.SwapAxes(tensor.SliceAxis(deq, 1, nope, nope+vd), 1, 2) // [H, rank, v]
	q := rnd(bs, h, tt, nope)
	o := rnd(bs, h, tt, rank)
	check := func(what string, got, want *tensor.Array) {
		g, wnt := got.Float32s(), want.Float32s()
		if len(g) != len(wnt) {
			t.Fatalf("%s: %d values, want %d", what, len(g), len(wnt))
		}
		worst, scale := 0.0, 0.0
		for i := range g {
			worst = math.Max(worst, math.Abs(float64(g[i]-wnt[i])))
			scale = math.Max(scale, math.Abs(float64(wnt[i])))
		}
		if worst > 1e-5*scale {
			t.Errorf("%s: max |diff| %.3g of max %.3g", what, worst, scale)
		}
	}
	check("keys (untransposed)", tensor.QuantizedMatmul(q, kq.Weight, kq.Scales, kq.Biases, false, 32, 4), tensor.Matmul(q, wk))
	check("values (transposed)", tensor.QuantizedMatmul(o, vq.Weight, vq.Scales, vq.Biases, true, 32, 4), tensor.Matmul(o, wv))
}
