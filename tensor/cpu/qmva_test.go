package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// qmvaCase quantizes a random n×k weight (biases of both signs, a non-zero
// mean) and makes m random x rows rounded to dt, as float32.
func qmvaCase(r *rand.Rand, bits, gs, k, n, m int, dt tensor.DType) (wq, sc, bi *tensor.Array, x []float32) {
	wv := randF32(r, n*k)
	for i := range wv {
		wv[i] = wv[i]*3 + 0.5
	}
	w := tensor.FromFloat32(wv, []int{n, k}, tensor.BFloat16)
	wq, sc, bi = tensor.Quantize(w, gs, bits)
	x = tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt).Float32s()
	return
}

// qmvKernels are the float32-exact quantized kernels of this machine
// (qmvA on AVX2, qmvZ on AVX-512), with whether each can run and whether
// the public product takes it for w and x's dtype.
var qmvKernels = []struct {
	name   string
	run    func(out, x []float32, rows int, w qmat)
	usable func(w qmat) bool
	public func(w qmat, dt tensor.DType) bool
}{
	{"avx2", qmvA, qmvaUsable, func(w qmat, dt tensor.DType) bool {
		return !qmvzUsable(w) && !qmvUsable(w, dt) && (w.bits == 8 || !hasAVX512)
	}},
	{"avx512", qmvZ, qmvzUsable, func(w qmat, dt tensor.DType) bool { return true }},
}

// TestQMVAExact holds the AVX2 and AVX-512 quantized matmuls to an exact
// float64 reference: every product q·x is exact inside its FMA, so only float32
// accumulation may differ (a few float32 ulps of Σ|x·s·q| + Σ|x·b| per
// step). 4- and 8-bit codes, group sizes 32, 64 and 128, K from one group
// to several K chunks, odd N, 1..17 x rows (one to three passes), float32,
// bfloat16 and float16 x.
func TestQMVAExact(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA")
	}
	for _, kn := range qmvKernels {
		t.Run(kn.name, func(t *testing.T) {
			if !kn.usable(qmat{bits: 4, gs: 64, cols: 64}) {
				t.Skip("not on this machine")
			}
			live := tensor.LiveArrays()
			r := rand.New(rand.NewPCG(31, 32))
			c := 0
			for _, bits := range []int{4, 8} {
				for _, gs := range []int{32, 64, 128} {
					for _, kmul := range []int{1, 2, 3, 7, 33} {
						for _, n := range []int{1, 5, 37} {
							for _, m := range []int{1, 2, 3, 8, 9, 17, 33} {
								dt := invDTypes[c%3]
								c++
								k := gs * kmul
								if !kn.usable(qmat{bits: bits, gs: gs, cols: k}) {
									continue
								}
								checkQMVA(t, r, kn.run, kn.public, bits, gs, k, n, m, dt)
							}
						}
					}
				}
			}
			if d := tensor.LiveArrays() - live; d != 0 {
				t.Errorf("%d arrays leaked", d)
			}
		})
	}
}

func checkQMVA(t *testing.T, r *rand.Rand, run func(out, x []float32, rows int, w qmat), public func(qmat, tensor.DType) bool,
	bits, gs, k, n, m int, dt tensor.DType) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	name := fmt.Sprintf("%s/b%d/g%d/k%d/n%d/m%d", dt, bits, gs, k, n, m)
	wq, sc, bi, x := qmvaCase(r, bits, gs, k, n, m, dt)
	q := loadQ(wq, sc, bi, gs, bits)
	got := make([]float32, m*n)
	run(got, x, m, q.m)
	pubHere := public(q.m, dt)
	q.release()
	ref, mq, mb, _ := qmvRef(x, wq, sc, bi, m, n, k, gs, bits)
	steps := float64(k/32 + k/gs + gs + 16)
	for i := range ref {
		tol := 0x1p-24 * steps * (mq[i] + mb[i])
		if d := math.Abs(float64(got[i]) - ref[i]); !(d <= tol) {
			t.Fatalf("%s: [%d] = %g, want %g (err %.3g, tol %.3g)", name, i, got[i], ref[i], d, tol)
		}
	}
	// the public product (float32 x) is the kernel's value
	if dt == tensor.Float32 && pubHere {
		pub := tensor.QuantizedMatmul(tensor.FromFloat32(x, []int{m, k}, dt), wq, sc, bi, true, gs, bits).Float32s()
		for i := range pub {
			if pub[i] != got[i] {
				t.Fatalf("%s: public [%d] = %g, kernel %g", name, i, pub[i], got[i])
			}
		}
	}
}

// TestQMVARowInvariant calls the AVX2 and AVX-512 kernels themselves (float32 results,
// before any rounding to x's dtype) with M rows under several worker
// counts and compares every row, bit for bit, with the row computed
// alone: M from 3 to 40 (one to three passes, uneven pass sizes), K long
// enough that a full pass runs in K chunks while one row runs whole,
// and each row also placed at another position among other rows.
func TestQMVARowInvariant(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2+FMA")
	}
	for _, kn := range qmvKernels {
		t.Run(kn.name, func(t *testing.T) {
			if !kn.usable(qmat{bits: 4, gs: 64, cols: 64}) {
				t.Skip("not on this machine")
			}
			checkQMVARows(t, kn.run)
		})
	}
}

func checkQMVARows(t *testing.T, qmvA func(out, x []float32, rows int, w qmat)) {
	r := rand.New(rand.NewPCG(33, 34))
	s := tensor.NewScope()
	defer s.Close()
	for ci, cs := range []struct{ bits, gs, k, n, m int }{
		{4, 64, 2048, 70, 8}, {4, 32, 1024, 33, 5}, {4, 128, 8192, 40, 9}, {4, 64, 2048, 19, 40},
		{8, 64, 2048, 37, 16}, {8, 32, 512, 17, 3}, {8, 128, 4096, 20, 20}, {4, 64, 4160, 50, 13}, {8, 32, 4096, 21, 17},
	} {
		name := fmt.Sprintf("b%d/g%d/k%d/n%d/m%d", cs.bits, cs.gs, cs.k, cs.n, cs.m)
		dt := invDTypes[ci%3]
		wq, sc, bi, x := qmvaCase(r, cs.bits, cs.gs, cs.k, cs.n, cs.m, dt)
		q := loadQ(wq, sc, bi, cs.gs, cs.bits)
		k, n, m := cs.k, cs.n, cs.m
		var ref []byte
		for _, p := range invProcs {
			out := make([]float32, m*n)
			withProcs(p, func() { qmvA(out, x, m, q.m) })
			b := f32Bytes(out)
			if ref == nil {
				ref = b
			} else if !bytes.Equal(b, ref) {
				t.Fatalf("%s: GOMAXPROCS=%d differs from %d", name, p, invProcs[0])
			}
		}
		rb := 4 * n
		for i := range m {
			one := make([]float32, n)
			qmvA(one, x[i*k:(i+1)*k], 1, q.m)
			if !bytes.Equal(f32Bytes(one), ref[i*rb:(i+1)*rb]) {
				t.Fatalf("%s: row %d of %d differs from the row alone", name, i, m)
			}
		}
		// row 0 last among three other rows
		if m >= 3 {
			xs := append(append([]float32{}, x[k:3*k]...), x[:k]...)
			three := make([]float32, 3*n)
			qmvA(three, xs, 3, q.m)
			if !bytes.Equal(f32Bytes(three[2*n:]), ref[:rb]) {
				t.Fatalf("%s: row 0 placed third differs", name)
			}
		}
		q.release()
	}
}

func f32Bytes(v []float32) []byte {
	return bytes.Clone(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v)))
}

// TestToF32Widening holds the widening of every bfloat16 and float16 bit
// pattern (vector paths and their scalar tails) to the scalar definitions:
// equal bits, or NaN for NaN.
func TestToF32Widening(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		src := make([]uint16, 1<<16+5)
		for i := range src {
			src[i] = uint16(i)
		}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 2*len(src))
		got := make([]float32, len(src))
		for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float16} {
			toF32(got, b, dt)
			for i, h := range src {
				want := math.Float32frombits(uint32(h) << 16)
				if dt == tensor.Float16 {
					want = tensor.F16ToF32(h)
				}
				if g := got[i]; math.Float32bits(g) != math.Float32bits(want) && !(g != g && want != want) {
					t.Fatalf("%s %#04x: got %#08x, want %#08x", dt, h, math.Float32bits(g), math.Float32bits(want))
				}
			}
		}
	})
}
