package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// The radix path (rows ≥ radixMin) must agree with a stable comparison sort,
// duplicates, negative zero, infinities and NaN included.
func TestArgsortRadixMatchesStableSort(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(3, 4))
	n := 3*radixMin + 17
	vals := make([]float32, 2*n)
	for i := range vals {
		switch r.IntN(10) {
		case 0:
			vals[i] = float32(math.Inf(-1))
		case 1:
			vals[i] = float32(math.NaN())
		case 2:
			vals[i] = float32(math.Copysign(0, -1))
		case 3:
			vals[i] = float32(r.IntN(5)) // many ties
		default:
			vals[i] = float32(r.NormFloat64())
		}
	}
	a := tensor.FromFloat32(vals, []int{2, n}, tensor.Float32)
	defer a.Free()
	got := tensor.Argsort(a, -1)
	defer got.Free()
	idx := got.Int64s()
	key := func(v float32) float64 {
		if math.IsNaN(float64(v)) {
			return math.Inf(1) * 2 // NaN last
		}
		return float64(v) + 0 // -0 == 0
	}
	for row := 0; row < 2; row++ {
		x := vals[row*n : (row+1)*n]
		want := make([]int64, n)
		for i := range want {
			want[i] = int64(i)
		}
		slices.SortStableFunc(want, func(p, q int64) int {
			kp, kq := key(x[p]), key(x[q])
			switch {
			case math.IsInf(kp, 1) && math.IsNaN(float64(x[p])) && math.IsNaN(float64(x[q])):
				return 0
			case math.IsNaN(float64(x[p])):
				return 1
			case math.IsNaN(float64(x[q])):
				return -1
			case kp < kq:
				return -1
			case kp > kq:
				return 1
			}
			return 0
		})
		if !slices.Equal(idx[row*n:(row+1)*n], want) {
			t.Fatalf("row %d: radix argsort differs from a stable sort", row)
		}
	}
}
