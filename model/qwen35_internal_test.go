package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestGatedDeltaChunkedMatchesRecurrence: the chunked gated delta rule
// (several chunks, the last padded, from a non-zero state) gives the
// token-by-token recurrence's outputs and final state.
func TestGatedDeltaChunkedMatchesRecurrence(t *testing.T) {
	ForEachBackend(t, func(t *testing.T, _ tensor.Backend) {
		sc := tensor.NewScope()
		defer sc.Close()
		r := rand.New(rand.NewPCG(3, 4))
		b, h, n, dk, dv := 1, 2, 150, 8, 4
		arr := func(scale, shift float64, shape ...int) *tensor.Array {
			size := 1
			for _, d := range shape {
				size *= d
			}
			v := make([]float32, size)
			for i := range v {
				v[i] = float32(shift + scale*r.NormFloat64())
			}
			return tensor.FromFloat32(v, shape, tensor.Float32)
		}
		l2 := func(x *tensor.Array) *tensor.Array {
			return tensor.Mul(x, tensor.Rsqrt(tensor.Sum(tensor.Square(x), []int{-1}, true)))
		}
		q, k := l2(arr(1, 0, b, h, n, dk)), l2(arr(1, 0, b, h, n, dk))
		v := arr(1, 0, b, h, n, dv)
		logDecay := tensor.Neg(tensor.Softplus(arr(1, 0, b, h, n)))
		beta := tensor.Sigmoid(arr(1, 0, b, h, n))
		s0 := arr(0.5, 0, b, h, dk, dv)
		wantO, wantS := gatedDeltaRule(q, k, v, tensor.Exp(logDecay), beta, s0)
		gotO, gotS := gatedDeltaChunked(q, k, v, logDecay, beta, s0)
		for _, p := range [][2]*tensor.Array{{gotO, wantO}, {gotS, wantS}} {
			g, w := p[0].Float32s(), p[1].Float32s()
			worst := 0.0
			for i := range w {
				worst = math.Max(worst, math.Abs(float64(g[i]-w[i])))
			}
			if len(g) != len(w) || worst > 1e-4 {
				t.Errorf("chunked vs recurrent: %d vs %d values, max |diff| %.3g", len(g), len(w), worst)
			}
		}
	})
}
