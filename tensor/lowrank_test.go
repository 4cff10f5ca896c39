package tensor_test

import (
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
)

// TestLowRankComposedFallback: the composition that backends without a
// LowRanker get agrees with the CPU kernel (within float32 sums and one
// rounding), rows without a pair included.
func TestLowRankComposedFallback(t *testing.T) {
	s := tensor.NewScope()
	defer s.Close()
	vals := func(n int, seed float64) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(math.Sin(seed + float64(i)*0.37))
		}
		return out
	}
	const m, in, out = 5, 70, 24
	x := tensor.FromFloat32(vals(m*in, 1), []int{m, in}, tensor.Float32)
	y := tensor.FromFloat32(vals(m*out, 2), []int{m, out}, tensor.Float32)
	var pairs []tensor.LowRankPair
	for i, r := range []int{4, 16} {
		a := tensor.FromFloat32(vals(r*in, 3+float64(i)), []int{r, in}, tensor.Float32)
		b := tensor.FromFloat32(vals(out*r, 5+float64(i)), []int{out, r}, tensor.Float32)
		pairs = append(pairs, tensor.LowRankPair{A: a, B: b})
	}
	ids := []int{1, -1, 0, 0, 1}
	got := tensor.LowRankGather(y, x, pairs, ids).Float32s()
	want := tensor.LowRankComposed(y, x, pairs, ids)
	if want.Dim(0) != m || want.Dim(1) != out {
		t.Fatalf("composed shape %v", want.Shape())
	}
	w := want.Float32s()
	for i := range got {
		if d := math.Abs(float64(got[i] - w[i])); d > 1e-4*(1+math.Abs(float64(w[i]))) {
			t.Fatalf("[%d]: kernel %v, composed %v", i, got[i], w[i])
		}
	}
	yv := y.Float32s()
	for j := range out {
		if w[out+j] != yv[out+j] {
			t.Fatal("composed: a row without a pair changed")
		}
	}
}
