package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func TestSortNaNLast(t *testing.T) {
	ewtScope(t)
	nan := float32(math.NaN())
	inf := float32(math.Inf(1))
	x := []float32{3, nan, -inf, 0, inf, -2, nan, 1}
	want := []float64{math.Inf(-1), -2, 0, 1, 3, math.Inf(1), math.NaN(), math.NaN()}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16} {
		ewtSame(t, "sort "+dt.String(), tensor.Sort(tensor.FromFloat32(x, []int{8}, dt), 0).Float64s(), want, 0)
		ewtSame(t, "argsort "+dt.String(), tensor.Argsort(tensor.FromFloat32(x, []int{8}, dt), 0).Float64s(), []float64{2, 5, 3, 7, 0, 4, 1, 6}, 0)
	}
	for _, dt := range []tensor.DType{tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Uint32} {
		a := tensor.FromInts([]int{5, 0, 200, 7, 3}, []int{5}, dt)
		ewtSame(t, "sort "+dt.String(), tensor.Sort(a, 0).Float64s(), []float64{0, 3, 5, 7, 200}, 0)
		ewtSame(t, "argsort "+dt.String(), tensor.Argsort(a, 0).Float64s(), []float64{1, 4, 0, 3, 2}, 0)
	}
	neg := tensor.FromInts([]int{-5, 3, math.MinInt32, -1}, []int{4}, tensor.Int32)
	ewtSame(t, "sort int32 negatives", tensor.Sort(neg, 0).Float64s(), []float64{math.MinInt32, -5, -1, 3}, 0)
}

func TestArgsortStableAndAxes(t *testing.T) {
	ewtScope(t)
	// ties (including -0 == +0) keep their original order
	x := tensor.FromFloat32([]float32{1, 0, 1, float32(math.Copysign(0, -1)), 0, 1}, []int{6}, tensor.Float32)
	ewtSame(t, "stable", tensor.Argsort(x, 0).Float64s(), []float64{1, 3, 4, 0, 2, 5}, 0)
	i64 := tensor.FromInts([]int{2, 1, 2, 1, 1 << 40}, []int{5}, tensor.Int64)
	ewtSame(t, "stable int64", tensor.Argsort(i64, 0).Float64s(), []float64{1, 3, 0, 2, 4}, 0)
	// along axis 0 of a transposed view
	a := tensor.FromFloat32([]float32{3, 1, 2, 0, 5, 4}, []int{2, 3}, tensor.Float32)
	tr := tensor.Transpose(a, 1, 0) // [[3,0],[1,5],[2,4]]
	got := tensor.Argsort(tr, 0)
	if !slices.Equal(got.Shape(), []int{3, 2}) {
		t.Fatalf("shape %v", got.Shape())
	}
	ewtSame(t, "axis 0", got.Float64s(), []float64{1, 0, 2, 2, 0, 1}, 0)
	ewtSame(t, "sort axis 0", tensor.Sort(tr, 0).Float64s(), []float64{1, 0, 2, 4, 3, 5}, 0)
}

// ewtCheckPartition verifies the Argpartition contract on one row.
func ewtCheckPartition(t *testing.T, what string, vals []float64, idx []int64, kth int) {
	t.Helper()
	less := func(a, b float64) bool { // NaN largest
		if math.IsNaN(a) {
			return false
		}
		return math.IsNaN(b) || a < b
	}
	seen := make([]bool, len(vals))
	for _, i := range idx {
		if i < 0 || int(i) >= len(vals) || seen[i] {
			t.Fatalf("%s: indices are not a permutation: %v", what, idx)
		}
		seen[i] = true
	}
	sorted := slices.Clone(vals)
	slices.SortFunc(sorted, func(a, b float64) int {
		switch {
		case less(a, b):
			return -1
		case less(b, a):
			return 1
		}
		return 0
	})
	pv := vals[idx[kth]]
	if !(pv == sorted[kth] || math.IsNaN(pv) && math.IsNaN(sorted[kth])) {
		t.Fatalf("%s: position %d holds %v, want %v", what, kth, pv, sorted[kth])
	}
	for p, i := range idx {
		v := vals[i]
		if p < kth && less(pv, v) || p > kth && less(v, pv) {
			t.Fatalf("%s: position %d value %v on the wrong side of %v", what, p, v, pv)
		}
	}
}

func TestArgpartition(t *testing.T) {
	ewtScope(t)
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 40 {
		n := 1 + r.IntN(3000)
		x := make([]float32, n)
		for i := range x {
			switch r.IntN(6) {
			case 0:
				x[i] = float32(math.Inf(-1)) // masked logits: a mass of equal values
			case 1:
				x[i] = float32(r.IntN(3))
			default:
				x[i] = float32(r.NormFloat64())
			}
			if trial%5 == 0 && r.IntN(50) == 0 {
				x[i] = float32(math.NaN())
			}
		}
		kth := r.IntN(n)
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Int32, tensor.Int64} {
			a := tensor.FromFloat32(x, []int{n}, dt)
			if !dt.IsFloat() {
				a = tensor.AsType(tensor.MaximumScalar(tensor.FromFloat32(x, []int{n}, tensor.Float32), -1e6), dt)
			}
			p := tensor.Argpartition(a, kth, 0)
			if p.DType() != tensor.Int32 {
				t.Fatalf("argpartition dtype %s", p.DType())
			}
			ewtCheckPartition(t, dt.String(), a.Float64s(), p.Int64s(), kth)
		}
	}
	// rows of a 2-D array along both axes
	a := tensor.FromFloat32(ewtRand(40*30, 3), []int{40, 30}, tensor.Float32)
	p := tensor.Argpartition(a, 25, 0)
	pt := tensor.Transpose(p, 1, 0).Int64s()
	at := tensor.Transpose(a, 1, 0).Float64s()
	for c := range 30 {
		ewtCheckPartition(t, "axis 0", at[c*40:(c+1)*40], pt[c*40:(c+1)*40], 25)
	}
	// already sorted and reverse sorted inputs select in a handful of passes
	asc := make([]float32, 100000)
	for i := range asc {
		asc[i] = float32(i)
	}
	sorted := tensor.FromFloat32(asc, []int{len(asc)}, tensor.Float32)
	if got := tensor.Argpartition(sorted, 777, 0).Int64s()[777]; got != 777 {
		t.Errorf("sorted input: position 777 holds index %d", got)
	}
	if got := tensor.Argpartition(tensor.Neg(sorted), 5, 0).Int64s()[5]; got != 99994 {
		t.Errorf("reversed input: position 5 holds index %d", got)
	}
}

func TestEwSelectAdversarial(t *testing.T) {
	// organ-pipe and sawtooth inputs defeat median-of-three; the fallback keeps it correct
	for _, gen := range []func(i, n int) uint64{
		func(i, n int) uint64 { return uint64(min(i, n-i))<<32 | uint64(i) },
		func(i, n int) uint64 { return uint64(i%17)<<32 | uint64(i) },
	} {
		n := 5000
		s := make([]uint64, n)
		for i := range s {
			s[i] = gen(i, n)
		}
		want := slices.Sorted(slices.Values(s))
		for _, k := range []int{0, 1, n / 2, n - 1} {
			c := slices.Clone(s)
			ewSelect(c, k)
			if c[k] != want[k] {
				t.Fatalf("select k=%d: %x, want %x", k, c[k], want[k])
			}
			for i := range c {
				if i < k && c[i] > c[k] || i > k && c[i] < c[k] {
					t.Fatalf("select k=%d: position %d out of place", k, i)
				}
			}
		}
	}
}

func BenchmarkArgpartitionVocab(b *testing.B) {
	x := tensor.FromFloat32(ewtRand(262144, 1), []int{1, 262144}, tensor.Float32)
	defer x.Free()
	for b.Loop() {
		tensor.Argpartition(x, 262144-50, -1).Free()
	}
}

func BenchmarkArgsortVocab(b *testing.B) {
	x := tensor.FromFloat32(ewtRand(262144, 1), []int{1, 262144}, tensor.Float32)
	defer x.Free()
	for b.Loop() {
		tensor.Argsort(x, -1).Free()
	}
}
