package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestQGemmExact holds the AVX512_BF16 kernels at prefill batch sizes to
// an exact float64 reference: every product is exact, so only float32
// accumulation may differ (a few float32 ulps of Σ|x·s·q| + Σ|x·b| per
// accumulation step). Batches of 8..200 rows (passes of 8, 4, 2 and 1
// rows), odd N, K of 1, 3 and 5 groups of 32, 64 and 128, 4- and 8-bit codes,
// bfloat16 and float16 x; the public product must be the kernel's value
// rounded to x's dtype, and the same product without AVX512_BF16 (the
// fallback kernels) must agree within the same bound.
func TestQGemmExact(t *testing.T) {
	if !hasAVX512 || !hasBF16 {
		t.Skip("no AVX512_BF16")
	}
	// the public product must take this matvec, not the AVX-512 kernels
	defer func(on bool) { qmvzOn = on }(qmvzOn)
	qmvzOn = false
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
	c := newQKCase(t, r, "prefill", qmvUsable, qmvT, bits, gs, k, n, m, dt)
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

// BenchmarkQMVKern times the matvec kernel alone on one core at prefill
// pass size (64 weight rows of K = 2048 from L2, 8 x rows): its GFLOP/s is
// the ceiling of the quantized prefill per core.
func BenchmarkQMVKern(b *testing.B) {
	if !hasBF16 {
		b.Skip("no AVX512_BF16")
	}
	const k, gs, rows, nx = 2048, 64, 64, 8
	ng := k / gs
	wb := make([]byte, rows*k/2)
	for i := range wb {
		wb[i] = byte(i * 37)
	}
	x := make([]uint16, nx*k)
	for i := range x {
		x[i] = 0x3f80
	}
	s := make([]float32, rows*ng+16)
	bias := make([]float32, rows*ng+16)
	gx := make([]float32, nx*ng)
	out := make([]float32, nx*rows)
	sidx := &qmvLaneGroup[1]
	for b.Loop() {
		qmvRowsX(&wb[0], &x[0], 0, 2*k, k/128, 0, &s[0], ng, 128/gs*4, &sidx[0], &bias[0], &gx[0], 4*ng,
			&out[0], 4*rows, rows, k/2, nx, nil, qmvAccFinish, 0)
	}
	b.ReportMetric(2*float64(nx*rows*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
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

// TestStoreF16 holds the vector rounding to tensor.F32ToF16 bit for bit:
// every half-precision value and the floats just above, below and halfway
// to its neighbours (ties both ways), subnormal results, overflow to
// infinity, underflow to zero, NaNs with payloads (both signs) and random
// bits, with a tail shorter than a vector.
func TestStoreF16(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(7, 8))
		bitsIn := []uint32{0x7f800001, 0xffc00001, 0x7fbfffff, 0x477fe000, 0x477ff000, 0x477fefff, 0x47800000,
			0x33000000, 0x33000001, 0x32ffffff, 0x33800000, 0x387fc000, 0x38800000, 0x7f7fffff, 0x00000001}
		for h := range 1 << 16 {
			f := math.Float32bits(tensor.F16ToF32(uint16(h)))
			bitsIn = append(bitsIn, f, f+1, f-1, f+0x1000, f+0x0fff, f+0x1001)
		}
		for len(bitsIn)%16 != 7 || len(bitsIn) < 1<<19 {
			bitsIn = append(bitsIn, r.Uint32())
		}
		src := make([]float32, len(bitsIn))
		for i, b := range bitsIn {
			src[i] = math.Float32frombits(b)
		}
		got := make([]uint16, len(src))
		storeF16(got, src)
		for i, v := range src {
			if want := tensor.F32ToF16(v); got[i] != want {
				t.Fatalf("%#08x: got %#04x, want %#04x", bitsIn[i], got[i], want)
			}
		}
	})
}
