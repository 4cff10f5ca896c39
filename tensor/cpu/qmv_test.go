package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// qmvRef is the exact (float64) x @ dequant(w)ᵀ from the packed codes, and
// per output the magnitudes Σ|x·s·q|, Σ|x·b| and Σ|x·s| that bound float32
// rounding.
func qmvRef(x []float32, wq, sc, bi *tensor.Array, m, n, k, gs, bits int) (ref, mq, mb, ms []float64) {
	words := u32s(wq.Bytes())
	sv, bv := sc.Float32s(), bi.Float32s()
	ng := k / gs
	codes := make([]uint8, k)
	ref, mq, mb, ms = make([]float64, m*n), make([]float64, m*n), make([]float64, m*n), make([]float64, m*n)
	for r := range n {
		unpackCodes(codes, words[r*k*bits/32:(r+1)*k*bits/32], bits)
		for i := range m {
			var acc, aq, ab, as float64
			for j, c := range codes {
				s, b := float64(sv[r*ng+j/gs]), float64(bv[r*ng+j/gs])
				xv := float64(x[i*k+j])
				acc += xv * (s*float64(c) + b)
				aq += math.Abs(xv * s * float64(c))
				ab += math.Abs(xv * b)
				as += math.Abs(xv * s)
			}
			ref[i*n+r], mq[i*n+r], mb[i*n+r], ms[i*n+r] = acc, aq, ab, as
		}
	}
	return
}

// TestQMVExact holds the AVX512_BF16 matvec to an exact reference: every
// product is exact, so only float32 accumulation may differ, i.e. a few
// float32 ulps of Σ|terms| per accumulation step, the terms being q·x·s
// and b·x. float32 x must not take this path. 4- and 8-bit codes, group sizes 32,
// 64 and 128, K with and without a partial 128-code block, odd N, 1..7 x
// rows.
func TestQMVExact(t *testing.T) {
	if !hasAVX512 || !hasBF16 {
		t.Skip("no AVX512_BF16")
	}
	// the public product must take this matvec, not the AVX-512 kernels
	defer func(on bool) { qmvzOn = on }(qmvzOn)
	qmvzOn = false
	live := tensor.LiveArrays()
	r := rand.New(rand.NewPCG(11, 12))
	testQMVExact(t, r)
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
}

func testQMVExact(t *testing.T, r *rand.Rand) {
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, kmul := range []int{1, 3, 5, 7, 37} {
				k := gs * kmul
				for _, n := range []int{1, 3, 5, 13, 37} {
					for _, m := range []int{1, 2, 3, 4, 7} {
						for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
							checkQMV(t, r, bits, gs, k, n, m, dt)
						}
					}
				}
			}
		}
	}
}

// qkCase is one random product x @ dequant(w)ᵀ for the exact kernel
// tests: w (n×k in dt, biases of both signs and a non-zero mean) quantized
// and x (m×k in dt).
type qkCase struct {
	name          string
	wq, sc, bi, x *tensor.Array
	xr            []float32     // x as the kernel sees it (rounded to dt)
	got           []float32     // the kernel's float32 result, called directly
	pub           *tensor.Array // the public product
}

// newQKCase builds a case in the caller's scope, fails unless usable sends
// dt (and not float32) down the kernel's path, and runs both the public
// product and the kernel itself (to keep its float32 result before the
// rounding to dt).
func newQKCase(t *testing.T, r *rand.Rand, path string, usable func(qmat, tensor.DType) bool,
	kern func(out, x []float32, raw []uint16, rows int, w qmat), bits, gs, k, n, m int, dt tensor.DType) qkCase {
	t.Helper()
	c := qkCase{name: fmt.Sprintf("%s/b%d/g%d/k%d/n%d/m%d", dt, bits, gs, k, n, m)}
	wv := randF32(r, n*k)
	for i := range wv {
		wv[i] = wv[i]*3 + 0.5
	}
	w := tensor.FromFloat32(wv, []int{n, k}, dt)
	c.wq, c.sc, c.bi = tensor.Quantize(w, gs, bits)
	c.x = tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt)
	c.xr = c.x.Float32s()
	if !usable(qmat{bits: bits, gs: gs, cols: k}, dt) {
		t.Fatalf("%s: %s path not taken", c.name, path)
	}
	if usable(qmat{bits: bits, gs: gs, cols: k}, tensor.Float32) {
		t.Fatalf("%s: float32 x would take the %s path", c.name, path)
	}
	c.pub = tensor.QuantizedMatmul(c.x, c.wq, c.sc, c.bi, true, gs, bits)
	c.got = make([]float32, m*n)
	var raw []uint16
	if dt == tensor.BFloat16 {
		raw = u16s(c.x.Bytes())
	}
	q := loadQ(c.wq, c.sc, c.bi, gs, bits)
	kern(c.got, c.xr, raw, m, q.m)
	q.release()
	return c
}

func checkQMV(t *testing.T, r *rand.Rand, bits, gs, k, n, m int, dt tensor.DType) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	c := newQKCase(t, r, "matvec", qmvUsable, qmvT, bits, gs, k, n, m, dt)
	name, g := c.name, c.got
	ref, mq, mb, _ := qmvRef(c.xr, c.wq, c.sc, c.bi, m, n, k, gs, bits)
	steps := float64(k/128 + gs + 48)
	for i := range ref {
		tol := 0x1p-24 * steps * (mq[i] + mb[i])
		if d := math.Abs(float64(g[i]) - ref[i]); !(d <= tol) {
			t.Fatalf("%s: [%d] = %g, want %g (err %.3g, tol %.3g)", name, i, g[i], ref[i], d, tol)
		}
	}
	// the public result is the same value rounded to dt
	pub := c.pub.Float32s()
	for i := range pub {
		if want := tensor.FromFloat32(g[i:i+1], []int{1}, dt).Float32s()[0]; pub[i] != want {
			t.Fatalf("%s: public [%d] = %g, kernel %g", name, i, pub[i], want)
		}
	}
}

// TestQMVChunkedSameBits: running rows in chunks of blocks with the
// accumulators carried through memory, and weight rows in pairs through
// the two-row kernels, gives the bits of whole-row one-row-kernel calls,
// for 4- and 8-bit codes, every group size, bfloat16 and float16 x (one
// and two layouts), odd and even block counts with and without a partial
// last block, row blocks past qmvRowBlock and every pass size; and
// bfloat16 scales read in place by the B kernels give the bits of scales
// staged as float32 (the reference runs staged, every other run in place
// where the driver can; a row block whose scale reads could pass the end
// of the scales' memory stays staged).
func TestQMVChunkedSameBits(t *testing.T) {
	if !hasAVX512 || !hasBF16 {
		t.Skip("no AVX512_BF16")
	}
	defer func(xb int, pairs, inPlace bool) {
		qmvChunkXBytes, qmvPairsOn, qmvScalesInPlaceOn = xb, pairs, inPlace
	}(qmvChunkXBytes, qmvPairsOn, qmvScalesInPlaceOn)
	live := tensor.LiveArrays()
	r := rand.New(rand.NewPCG(21, 22))
	// the kernel's float32 results (before any rounding to x's dtype)
	run := func(x, wq, sc, bi *tensor.Array, gs, bits, m, n, xb int, pairs, inPlace bool) []float32 {
		qmvChunkXBytes, qmvPairsOn, qmvScalesInPlaceOn = xb, pairs, inPlace
		var raw []uint16
		if x.DType() == tensor.BFloat16 {
			raw = u16s(x.Bytes())
		}
		q := loadQ(wq, sc, bi, gs, bits)
		defer q.release()
		out := make([]float32, m*n)
		qmvT(out, x.Float32s(), raw, m, q.m)
		return out
	}
	c := 0
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
				for _, k := range []int{64, 768, 1152, 1280, 2048 + 64} {
					if k%gs != 0 {
						continue
					}
					c++
					m := []int{1, 3, 8, 11, 19, 6}[c%6]
					n := 66 + c%5
					s := tensor.NewScope()
					w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, dt)
					wq, sc, bi := tensor.Quantize(w, gs, bits)
					x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt)
					want := run(x, wq, sc, bi, gs, bits, m, n, 1<<30, false, false)
					for _, cfg := range []struct {
						xb    int
						pairs bool
					}{{1 << 30, false}, {1, false}, {3 * 2048, false}, {5000, false}, {1 << 30, true}, {1, true}, {3000, true}} {
						xb := cfg.xb
						got := run(x, wq, sc, bi, gs, bits, m, n, xb, cfg.pairs, true)
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("b%d/g%d/%s/k%d/m%d/n%d chunk bytes %d pairs %v: out[%d] = %v, whole rows %v",
									bits, gs, dt, k, m, n, xb, cfg.pairs, i, got[i], want[i])
							}
						}
					}
					s.Close()
				}
			}
		}
	}
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
}
