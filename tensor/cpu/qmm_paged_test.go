package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestQuantizedMatmulPagedBitExact holds tensor.QuantizedMatmulPaged (the
// CPU backend's in-place block walk where the AVX-512 kernels serve, the
// gather elsewhere) to QuantizedMatmul on the same rows laid out
// contiguously, bit for bit: scores (x·Kᵀ) and value sums (p·V, whose K
// runs past one 1024-position segment), 4 and 8 bits, every group size,
// block sizes that do and do not divide the kernels' row blocks, float32
// and bfloat16 x, 1–9 rows.
func TestQuantizedMatmulPagedBitExact(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(71, 72))
	c := 0
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, d := range []int{64, 128} {
				if d%gs != 0 {
					continue
				}
				for _, kvLen := range []int{1, 37, 1500} {
					c++
					bs := []int{16, 7, 32}[c%3]
					m := []int{1, 3, 9}[c%3]
					dt := []tensor.DType{tensor.Float32, tensor.BFloat16}[c%2]
					name := fmt.Sprintf("b%d_g%d_d%d_T%d_bs%d_m%d_%s", bits, gs, d, kvLen, bs, m, dt)
					t.Run(name, func(t *testing.T) { pagedQMMCase(t, r, bits, gs, d, kvLen, bs, m, dt) })
				}
			}
		}
	}
}

func pagedQMMCase(t *testing.T, r *rand.Rand, bits, gs, d, kvLen, bs, m int, dt tensor.DType) {
	const h = 2
	used := (kvLen + bs - 1) / bs
	nb := used + 3
	table := make([]int32, used)
	for i, p := range r.Perm(nb)[:used] {
		table[i] = int32(p)
	}
	// the rows contiguously ([1, H, T, D]) and scattered into the pool
	// ([NB, H, bs, D], unused slots random too)
	rows := randF32(r, h*kvLen*d)
	pool := randF32(r, nb*h*bs*d)
	for hd := range h {
		for p := range kvLen {
			dst := ((int(table[p/bs])*h+hd)*bs + p%bs) * d
			copy(pool[dst:dst+d], rows[(hd*kvLen+p)*d:(hd*kvLen+p+1)*d])
		}
	}
	wc := tensor.FromFloat32(rows, []int{1, h, kvLen, d}, tensor.BFloat16)
	wp := tensor.FromFloat32(pool, []int{nb, h, bs, d}, tensor.BFloat16)
	cq, cs, cb := tensor.Quantize(wc, gs, bits)
	pq, ps, pb := tensor.Quantize(wp, gs, bits)
	defer tensor.Free(wc, wp, cq, cs, cb, pq, ps, pb)
	for _, transpose := range []bool{true, false} {
		inner := d
		if !transpose {
			inner = kvLen
		}
		x := tensor.FromFloat32(randF32(r, h*m*inner), []int{1, h, m, inner}, dt)
		want := tensor.QuantizedMatmul(x, cq, cs, cb, transpose, gs, bits)
		got := tensor.QuantizedMatmulPaged(x, pq, ps, pb, table, kvLen, transpose, gs, bits)
		a, b := want.Float32s(), got.Float32s()
		if len(a) != len(b) {
			t.Fatalf("transpose %v: %d outputs, want %d", transpose, len(b), len(a))
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("transpose %v: output %d = %g, contiguous %g", transpose, i, b[i], a[i])
			}
		}
		tensor.Free(x, want, got)
	}
}
