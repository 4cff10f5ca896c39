package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestQGemmExact holds the AVX512_BF16 prefill kernel to an exact float64
// reference: every product is exact, so only float32 accumulation may
// differ (a few float32 ulps of Σ|x·s·q| + Σ|x·b| per accumulation step).
// Batches of 8..200 rows (partial 6-row tiles), N with partial 32-column
// panels, K of 1, 3 and 5 groups of 32, 64 and 128, 4- and 8-bit codes,
// bfloat16 and float16 x; the public product must be the kernel's value
// rounded to x's dtype, and the same product without AVX512_BF16 (the
// fallback kernels) must agree within the same bound.
func TestQGemmExact(t *testing.T) {
	if !hasAVX512 || !hasBF16 {
		t.Skip("no AVX512_BF16")
	}
	live := tensor.LiveArrays()
	r := rand.New(rand.NewPCG(21, 22))
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, kmul := range []int{1, 3, 5} {
				for _, n := range []int{1, 31, 37, 70} {
					for _, m := range []int{8, 9, 33, 64, 200} {
						if m == 200 && n != 37 {
							continue
						}
						for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
							checkQGemm(t, r, bits, gs, gs*kmul, n, m, dt)
						}
					}
				}
			}
		}
	}
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
}

func checkQGemm(t *testing.T, r *rand.Rand, bits, gs, k, n, m int, dt tensor.DType) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	c := newQKCase(t, r, "prefill", qgemmUsable, qgemmT, bits, gs, k, n, m, dt)
	name, g := c.name, c.got
	ref, mq, mb, _ := qmvRef(c.xr, c.wq, c.sc, c.bi, m, n, k, gs, bits)
	steps := float64(k/gs + gs + 8)
	tol := func(i int) float64 { return 0x1p-24 * steps * (mq[i] + mb[i]) }
	for i := range ref {
		if d := math.Abs(float64(g[i]) - ref[i]); !(d <= tol(i)) {
			t.Fatalf("%s: [%d] = %g, want %g (err %.3g, tol %.3g)", name, i, g[i], ref[i], d, tol(i))
		}
	}
	pub := c.pub.Float32s()
	want := tensor.FromFloat32(g, []int{m * n}, dt).Float32s()
	for i := range pub {
		if pub[i] != want[i] {
			t.Fatalf("%s: public [%d] = %g, kernel %g", name, i, pub[i], want[i])
		}
	}
	// the fallback (no AVX512_BF16) computes the same product
	hasBF16 = false
	fb := tensor.QuantizedMatmul(c.x, c.wq, c.sc, c.bi, true, gs, bits).Float32s()
	hasBF16 = true
	for i := range fb {
		// both are rounded to dt: allow one dt ulp of the reference plus
		// the accumulation bound
		ulp := math.Abs(ref[i]) * 0x1p-7
		if dt == tensor.Float16 {
			ulp = math.Abs(ref[i]) * 0x1p-10
		}
		if d := math.Abs(float64(fb[i]) - float64(pub[i])); !(d <= 2*ulp+4*tol(i)+1e-30) {
			t.Fatalf("%s: fallback [%d] = %g, fast %g", name, i, fb[i], pub[i])
		}
	}
}

// BenchmarkQGemmKern times the prefill microkernel alone on one core (a
// 6×32 tile over K = 2048 from an L2-resident panel): its GFLOP/s is the
// ceiling of the quantized prefill per core.
func BenchmarkQGemmKern(b *testing.B) {
	if !hasBF16 {
		b.Skip("no AVX512_BF16")
	}
	for _, k := range []int{256, 2048} {
		b.Run(fmt.Sprintf("K%d", k), func(b *testing.B) {
			const gs = 64
			ng := k / gs
			pan := make([]uint32, k/2*qgNR)
			for i := range pan {
				pan[i] = 0x40004000
			}
			x := make([]uint16, qgMR*k)
			for i := range x {
				x[i] = 0x3f80
			}
			sb := make([]float32, 2*qgNR*ng)
			xs := make([]float32, qgMR*ng)
			out := make([]float32, qgMR*qgNR)
			for b.Loop() {
				qgemmKern(&pan[0], &x[0], 2*k, 0, &sb[0], &xs[0], 4*ng, ng, gs/2, &out[0], 4*qgNR, 0)
			}
			b.ReportMetric(2*qgMR*qgNR*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// TestStoreBF16 holds the vector rounding to tensor.F32ToBF16 bit for bit:
// ties both ways, NaNs (quiet and signalling, both signs), infinities,
// subnormals, the largest finite values and random bits, with a tail
// shorter than a vector.
func TestStoreBF16(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(5, 6))
		bitsIn := []uint32{0, 0x80000000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, 0x7f800000, 0xff800000,
			0x7fc00000, 0x7f800001, 0xff800001, 0xffffffff, 0x7f7fffff, 0xff7fffff, 0x00000001, 0x0000ffff, 0x00018000}
		for len(bitsIn) < 16*40+7 {
			bitsIn = append(bitsIn, r.Uint32())
		}
		src := make([]float32, len(bitsIn))
		for i, b := range bitsIn {
			src[i] = math.Float32frombits(b)
		}
		got := make([]uint16, len(src))
		storeBF16(got, src)
		for i, v := range src {
			if want := tensor.F32ToBF16(v); got[i] != want {
				t.Fatalf("%#08x: got %#04x, want %#04x", bitsIn[i], got[i], want)
			}
		}
	})
}
