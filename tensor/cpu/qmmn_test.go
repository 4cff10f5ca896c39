package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// qmmNData is a K×N quantized matrix with its float32 scales and biases
// and codes, built directly (not through Quantize) so tests control the
// values.
type qmmNData struct {
	wq, sc, bi *tensor.Array
	codes      []uint8
	sv, bv     []float32
}

// dyadicQ packs random codes with power-of-two scales (1/4..1) and biases
// that are multiples of 1/4 in [-1, 1]: every dequantized value and every
// product with an x of quarters is exact in float32, so a correct kernel
// must match float64 exactly.
func dyadicQ(r *rand.Rand, k, n, gs, bits int, sdt tensor.DType) qmmNData {
	d := qmmNData{codes: make([]uint8, k*n)}
	for i := range d.codes {
		d.codes[i] = uint8(r.IntN(1 << bits))
	}
	ng := n / gs
	d.sv, d.bv = make([]float32, k*ng), make([]float32, k*ng)
	for i := range d.sv {
		d.sv[i] = float32(math.Ldexp(1, -r.IntN(3)))
		d.bv[i] = float32(r.IntN(9)-4) / 4
	}
	words := make([]uint32, k*n*bits/32)
	tensor.PackCodes(words, d.codes, bits)
	d.wq = tensor.FromUint32(words, []int{k, n * bits / 32})
	d.sc = tensor.FromFloat32(d.sv, []int{k, ng}, sdt)
	d.bi = tensor.FromFloat32(d.bv, []int{k, ng}, sdt)
	return d
}

// ref is x @ dequant(W) in float64 for x [m, k], and per output Σ|x·w|.
func (d qmmNData) ref(x []float32, m, k, n, gs int) (out, mag []float64) {
	ng := n / gs
	out, mag = make([]float64, m*n), make([]float64, m*n)
	for kk := range k {
		for j := range n {
			w := float64(d.sv[kk*ng+j/gs])*float64(d.codes[kk*n+j]) + float64(d.bv[kk*ng+j/gs])
			for i := range m {
				p := float64(x[i*k+kk]) * w
				out[i*n+j] += p
				mag[i*n+j] += math.Abs(p)
			}
		}
	}
	return
}

// roundToDT is v rounded to dt, as a float32.
func roundToDT(v float64, dt tensor.DType) float32 {
	a := tensor.FromFloat64([]float64{v}, []int{1}, dt)
	defer a.Free()
	return a.Float32s()[0]
}

// TestQMatmulNExact checks x @ W (transpose=false, W packed along N) for
// decode-attention shapes: exactly on dyadic data (every operation exact,
// so any indexing, permutation or chunking error shows), and on random
// Quantize output within float32 accumulation error of float64.
func TestQMatmulNExact(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(21, 22))
		dts := []tensor.DType{tensor.BFloat16, tensor.Float16, tensor.Float32}
		ks := []int{1, 7, 64, 1000, 4133}
		i := 0
		for _, bits := range []int{4, 8} {
			for _, gs := range []int{32, 64, 128} {
				for _, n := range []int{64, 128, 256} {
					if n%gs != 0 {
						continue
					}
					for _, dt := range dts {
						for _, k := range ks {
							i++
							m := 1 + i%9
							checkQMMNDyadic(t, r, bits, gs, m, k, n, dt)
							if k == 1000 {
								checkQMMNRandom(t, r, bits, gs, m, 2*k+37, n, dt)
							}
						}
					}
				}
			}
		}
		// every row count through one wide case, and head dim 96 (three
		// 32-column blocks)
		for m := 1; m <= 17; m++ {
			checkQMMNDyadic(t, r, 4, 64, m, 777, 128, tensor.BFloat16)
		}
		checkQMMNDyadic(t, r, 8, 32, 5, 1500, 96, tensor.Float32)
		checkQMMNDyadic(t, r, 4, 32, 3, 300, 96, tensor.Float16)
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

func checkQMMNDyadic(t *testing.T, r *rand.Rand, bits, gs, m, k, n int, dt tensor.DType) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	name := fmt.Sprintf("dyadic/%s/b%d/g%d/m%d/k%d/n%d", dt, bits, gs, m, k, n)
	d := dyadicQ(r, k, n, gs, bits, dt)
	xv := make([]float32, m*k)
	for i := range xv {
		xv[i] = float32(r.IntN(17)-8) / 4
	}
	x := tensor.FromFloat32(xv, []int{m, k}, dt)
	got := tensor.QuantizedMatmul(x, d.wq, d.sc, d.bi, false, gs, bits)
	if !slices.Equal(got.Shape(), []int{m, n}) {
		t.Fatalf("%s: shape %v", name, got.Shape())
	}
	ref, _ := d.ref(xv, m, k, n, gs)
	for i, v := range got.Float32s() {
		if want := roundToDT(ref[i], dt); v != want {
			t.Fatalf("%s: [%d, %d] = %g, want %g", name, i/n, i%n, v, want)
		}
	}
}

// checkQMMNRandom runs normal x against Quantize's output: the float32
// result may differ from float64 by the rounding of each dequantized
// weight and of each of ≤ k additions (u·(k+2)·Σ|x·w|), plus the final
// rounding to dt.
func checkQMMNRandom(t *testing.T, r *rand.Rand, bits, gs, m, k, n int, dt tensor.DType) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	name := fmt.Sprintf("random/%s/b%d/g%d/m%d/k%d/n%d", dt, bits, gs, m, k, n)
	wv := randF32(r, k*n)
	for i := range wv {
		wv[i] = wv[i]*3 + 0.5
	}
	wq, sc, bi := tensor.Quantize(tensor.FromFloat32(wv, []int{k, n}, dt), gs, bits)
	d := qmmNData{wq: wq, sc: sc, bi: bi, codes: make([]uint8, k*n), sv: sc.Float32s(), bv: bi.Float32s()}
	unpackCodes(d.codes, u32s(wq.Bytes()), bits)
	x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt)
	xv := x.Float32s()
	got := tensor.QuantizedMatmul(x, wq, sc, bi, false, gs, bits).Float32s()
	ref, mag := d.ref(xv, m, k, n, gs)
	half := map[tensor.DType]float64{tensor.Float32: 0, tensor.BFloat16: 0x1p-8, tensor.Float16: 0x1p-11}[dt]
	for i := range ref {
		tol := 0x1p-24*float64(k+2)*mag[i] + half*math.Abs(ref[i]) + 0x1p-24
		if e := math.Abs(float64(got[i]) - ref[i]); !(e <= tol) {
			t.Fatalf("%s: [%d] = %g, want %g (err %.3g, tol %.3g)", name, i, got[i], ref[i], e, tol)
		}
	}
}

// TestQMatmulNBatchedViews runs the kv cache's layout: probabilities
// [B, H, R, T] against values [B, H, T, D] that are a prefix (along T) of
// a longer buffer, so neither operand is contiguous, plus a weight
// broadcast over x's batch. Each matrix must equal its own 2-D product.
func TestQMatmulNBatchedViews(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(23, 24))
		for _, bits := range []int{4, 8} {
			func() {
				s := tensor.NewScope()
				defer s.Close()
				const b, h, rr, tc, tl, d, gs = 2, 3, 4, 1200, 1100, 64, 32
				// full-capacity cache, then the live prefix
				wv := randF32(r, b*h*tc*d)
				wq, sc, bi := tensor.Quantize(tensor.FromFloat32(wv, []int{b, h, tc, d}, tensor.BFloat16), gs, bits)
				pre := func(a *tensor.Array) *tensor.Array {
					return tensor.SliceAxis(a, 2, 0, tl)
				}
				vq, vs, vb := pre(wq), pre(sc), pre(bi)
				// probabilities stored as [B, R, H, T] and viewed [B, H, R, T]
				xs := tensor.FromFloat32(randF32(r, b*rr*h*tl), []int{b, rr, h, tl}, tensor.BFloat16)
				x := tensor.SwapAxes(xs, 1, 2)
				got := tensor.QuantizedMatmul(x, vq, vs, vb, false, gs, bits)
				if !slices.Equal(got.Shape(), []int{b, h, rr, d}) {
					t.Fatalf("b%d: shape %v", bits, got.Shape())
				}
				gv := got.Float32s()
				// broadcast: one weight matrix for every x batch entry
				one := func(a *tensor.Array) *tensor.Array {
					return tensor.Contiguous(tensor.SliceAxis(tensor.SliceAxis(a, 0, 1, 2), 1, 2, 3))
				}
				bq, bs, bb := one(vq), one(vs), one(vb)
				gotB := tensor.QuantizedMatmul(x, bq, bs, bb, false, gs, bits).Float32s()
				for bi2 := range b {
					for hi := range h {
						xm := tensor.Contiguous(tensor.Reshape(tensor.SliceAxis(tensor.SliceAxis(x, 0, bi2, bi2+1), 1, hi, hi+1), rr, tl))
						mat := func(a *tensor.Array) *tensor.Array {
							v := tensor.SliceAxis(tensor.SliceAxis(a, 0, bi2, bi2+1), 1, hi, hi+1)
							return tensor.Contiguous(tensor.Reshape(v, tl, a.Dim(-1)))
						}
						want := tensor.QuantizedMatmul(xm, mat(vq), mat(vs), mat(vb), false, gs, bits).Float32s()
						off := (bi2*h + hi) * rr * d
						if !slices.Equal(gv[off:off+rr*d], want) {
							t.Fatalf("b%d: batch (%d, %d) differs from its 2-D product", bits, bi2, hi)
						}
						wantB := tensor.QuantizedMatmul(xm, bq, bs, bb, false, gs, bits).Float32s()
						if !slices.Equal(gotB[off:off+rr*d], wantB) {
							t.Fatalf("b%d: broadcast batch (%d, %d) differs", bits, bi2, hi)
						}
					}
				}
			}()
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

// BenchmarkQMatmulN times probs @ V for one KV head at decode (4 query
// rows, head dim 128), reporting the packed bytes read per second.
func BenchmarkQMatmulN(b *testing.B) {
	for _, bits := range []int{4, 8} {
		for _, k := range []int{8192, 32768} {
			b.Run(fmt.Sprintf("b%d/k%d", bits, k), func(b *testing.B) {
				const m, n, gs = 4, 128, 64
				r := rand.New(rand.NewPCG(1, uint64(k)))
				w := tensor.FromFloat32(randF32(r, k*n), []int{k, n}, tensor.BFloat16)
				wq, sc, bi := tensor.Quantize(w, gs, bits)
				x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, tensor.BFloat16)
				defer tensor.Free(w, wq, sc, bi, x)
				bytes := float64(wq.Size()*4 + 2*sc.Size()*2)
				b.ResetTimer()
				for range b.N {
					tensor.QuantizedMatmul(x, wq, sc, bi, false, gs, bits).Free()
				}
				b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
