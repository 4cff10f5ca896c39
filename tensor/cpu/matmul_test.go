package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// refMatmul is a float64 matmul of row-major [batch, m, k] and [batch, k, n]
// values (already rounded to the operand dtype).
func refMatmul(a, b []float32, batch, m, k, n int) []float64 {
	out := make([]float64, batch*m*n)
	for bt := range batch {
		for i := range m {
			for j := range n {
				var s float64
				for p := range k {
					s += float64(a[(bt*m+i)*k+p]) * float64(b[(bt*k+p)*n+j])
				}
				out[(bt*m+i)*n+j] = s
			}
		}
	}
	return out
}

func TestMatmul(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(1, 2))
		shapes := [][3]int{{1, 64, 48}, {1, 130, 77}, {5, 3, 7}, {17, 300, 45}, {64, 64, 64}, {70, 513, 260}, {9, 1, 33}}
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16} {
			for _, s := range shapes {
				m, k, n := s[0], s[1], s[2]
				for _, bT := range []bool{false, true} {
					for _, aT := range []bool{false, true} {
						name := fmt.Sprintf("%s/%dx%dx%d/aT=%v/bT=%v", dt, m, k, n, aT, bT)
						checkMatmul(t, name, r, dt, 1, m, k, n, aT, bT)
					}
				}
			}
			checkMatmul(t, dt.String()+"/batched", r, dt, 3, 20, 70, 40, false, true)
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

// checkMatmul multiplies [batch, m, k] by [batch, k, n] where either operand
// may be stored transposed (and passed as a SwapAxes view).
func checkMatmul(t *testing.T, name string, r *rand.Rand, dt tensor.DType, batch, m, k, n int, aT, bT bool) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	mk := func(rows, cols int, trans bool) (*tensor.Array, []float32) {
		shape := []int{batch, rows, cols}
		if trans {
			shape = []int{batch, cols, rows}
		}
		x := tensor.FromFloat32(randF32(r, batch*rows*cols), shape, dt)
		if trans {
			x = tensor.SwapAxes(x, -1, -2)
		}
		return x, tensor.Contiguous(x).Float32s()
	}
	a, av := mk(m, k, aT)
	b, bv := mk(k, n, bT)
	got := tensor.Matmul(a, b).Float32s()
	ref := refMatmul(av, bv, batch, m, k, n)
	tol := 1e-4
	if dt != tensor.Float32 {
		tol = 1e-2
	}
	for i := range ref {
		if d := math.Abs(float64(got[i]) - ref[i]); d > tol*(1+math.Abs(ref[i]))*math.Sqrt(float64(k)) {
			t.Fatalf("%s: out[%d] = %g, want %g", name, i, got[i], ref[i])
		}
	}
}

func TestMatmulBroadcast(t *testing.T) {
	s := tensor.NewScope()
	defer s.Close()
	r := rand.New(rand.NewPCG(3, 4))
	av := randF32(r, 2*1*4*6)
	bv := randF32(r, 3*6*5)
	a := tensor.FromFloat32(av, []int{2, 1, 4, 6}, tensor.Float32)
	b := tensor.FromFloat32(bv, []int{3, 6, 5}, tensor.Float32)
	out := tensor.Matmul(a, b)
	if got := out.Shape(); fmt.Sprint(got) != "[2 3 4 5]" {
		t.Fatalf("shape %v", got)
	}
	got := out.Float32s()
	for i := range 2 {
		for j := range 3 {
			ref := refMatmul(av[i*24:(i+1)*24], bv[j*30:(j+1)*30], 1, 4, 6, 5)
			for e := range ref {
				if d := math.Abs(float64(got[(i*3+j)*20+e]) - ref[e]); d > 1e-4 {
					t.Fatalf("batch (%d,%d) elem %d: %g want %g", i, j, e, got[(i*3+j)*20+e], ref[e])
				}
			}
		}
	}
}
