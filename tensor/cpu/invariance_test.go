package cpu

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// Token-level invariance: a row's result must not depend on how many rows
// the call holds, nor on the worker count. Each check computes a product
// over M rows in one call under several GOMAXPROCS values, and row by row
// in one-row calls, and compares the raw bytes.

// invProcs are the worker counts every invariance check runs under (more
// than the machine's cores is fine: it changes how work is split).
var invProcs = []int{1, 2, 5}

// withProcs runs f with GOMAXPROCS set to p.
func withProcs(p int, f func()) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
	f()
}

// checkRowInvariant compares whole() (rows of rowBytes bytes, m of them),
// computed under each of invProcs, with one(i), row i computed alone.
func checkRowInvariant(t *testing.T, name string, m int, whole func() *tensor.Array, one func(i int) *tensor.Array) {
	t.Helper()
	s := tensor.NewScope()
	defer s.Close()
	var ref []byte
	for _, p := range invProcs {
		var got []byte
		withProcs(p, func() { got = whole().Bytes() })
		if ref == nil {
			ref = got
			continue
		}
		if !bytes.Equal(got, ref) {
			t.Fatalf("%s: result with GOMAXPROCS=%d differs from GOMAXPROCS=%d", name, p, invProcs[0])
		}
	}
	rb := len(ref) / m
	for i := range m {
		got := one(i).Bytes()
		if !bytes.Equal(got, ref[i*rb:(i+1)*rb]) {
			t.Fatalf("%s: row %d of %d differs from the row computed alone", name, i, m)
		}
	}
}

// rowOf returns rows [i, i+1) of x along axis (a dense copy).
func rowOf(x *tensor.Array, axis, i int) *tensor.Array {
	return tensor.Contiguous(tensor.SliceAxis(x, axis, i, i+1))
}

var invDTypes = []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16}

// TestMatmulRowInvariant: dense products x·Wᵀ (W stored [N, K], the
// Linear layout) and x·B (B stored [K, N]) give every row of x the same
// bits whether it is multiplied alone or among M rows.
func TestMatmulRowInvariant(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(7, 8))
		shapes := [][2]int{{77, 45}, {300, 70}, {513, 33}, {64, 96}, {16, 17}, {1030, 40}}
		ms := []int{1, 2, 3, 7, 8, 9, 17, 33, 40, 65, 130}
		for _, dt := range invDTypes {
			for si, sh := range shapes {
				k, n := sh[0], sh[1]
				for _, bT := range []bool{true, false} {
					m := ms[(si*3+len(dt.String()))%len(ms)]
					for _, mm := range []int{m, 40, 70} {
						name := fmt.Sprintf("%s/M%d_K%d_N%d/bT=%v", dt, mm, k, n, bT)
						s := tensor.NewScope()
						x := tensor.FromFloat32(randF32(r, mm*k), []int{mm, k}, dt)
						var w *tensor.Array
						if bT {
							w = tensor.Transpose(tensor.FromFloat32(randF32(r, n*k), []int{n, k}, dt))
						} else {
							w = tensor.FromFloat32(randF32(r, k*n), []int{k, n}, dt)
						}
						checkRowInvariant(t, name, mm,
							func() *tensor.Array { return tensor.Matmul(x, w) },
							func(i int) *tensor.Array { return tensor.Matmul(rowOf(x, 0, i), w) })
						s.Close()
					}
				}
			}
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

// TestQuantizedMatmulRowInvariant: quantized products (every bit width,
// group sizes 32/64/128, x·Wᵀ and x·W, float32/bfloat16/float16 x) give
// every row the same bits alone as among M rows, whichever kernel the row
// count selects (matvec, multi-row, prefill).
func TestQuantizedMatmulRowInvariant(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(9, 10))
		ms := []int{2, 5, 7, 8, 9, 13, 24, 40, 67}
		c := 0
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			for _, gs := range []int{32, 64, 128} {
				for _, transpose := range []bool{true, false} {
					for _, dt := range invDTypes {
						c++
						m := ms[c%len(ms)]
						// inner × outer: K a few groups (not a multiple of 64
						// for gs 32) for x·Wᵀ; any K for x·W
						n, k := 40+c%23, gs*(1+c%3)+gs*2*(c%2)
						if !transpose {
							n, k = gs*(1+c%2), 37+c*13%300
						}
						if c%5 == 0 {
							m = 40
						}
						name := fmt.Sprintf("b%d/g%d/T=%v/%s/M%d_K%d_N%d", bits, gs, transpose, dt, m, k, n)
						s := tensor.NewScope()
						wshape := []int{n, k}
						if !transpose {
							wshape = []int{k, n}
						}
						w := tensor.FromFloat32(randF32(r, k*n), wshape, dt)
						wq, sc, bi := tensor.Quantize(w, gs, bits)
						x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt)
						checkRowInvariant(t, name, m,
							func() *tensor.Array { return tensor.QuantizedMatmul(x, wq, sc, bi, transpose, gs, bits) },
							func(i int) *tensor.Array {
								return tensor.QuantizedMatmul(rowOf(x, 0, i), wq, sc, bi, transpose, gs, bits)
							})
						s.Close()
					}
				}
			}
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

// TestQuantizedMatmulNLongK: x·W over a K long enough to be summed in
// several segments gives the same bits whatever the worker count and row
// count.
func TestQuantizedMatmulNLongK(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(11, 12))
		for _, bits := range []int{4, 8} {
			const k, n, gs, m = 3*1024 + 77, 64, 64, 12
			s := tensor.NewScope()
			w := tensor.FromFloat32(randF32(r, k*n), []int{k, n}, tensor.BFloat16)
			wq, sc, bi := tensor.Quantize(w, gs, bits)
			x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, tensor.BFloat16)
			checkRowInvariant(t, fmt.Sprintf("b%d", bits), m,
				func() *tensor.Array { return tensor.QuantizedMatmul(x, wq, sc, bi, false, gs, bits) },
				func(i int) *tensor.Array { return tensor.QuantizedMatmul(rowOf(x, 0, i), wq, sc, bi, false, gs, bits) })
			s.Close()
		}
	})
}

// sdpaInvCase is one attention problem for the decode-vs-prefill check:
// T queries that are the last T of L = off + T positions.
type sdpaInvCase struct {
	hq, hkv, t, off, d int
	dt                 tensor.DType
	mask               string // "causal", "window" (bool), "addwindow" (additive −∞), "none"
	window             int
	sinks              bool
}

// visible reports whether query position pos sees key j under the case's
// mask.
func (c sdpaInvCase) visible(pos, j int) bool {
	switch c.mask {
	case "window", "addwindow":
		return j <= pos && j > pos-c.window
	case "none":
		return true
	}
	return j <= pos
}

// options builds the SDPA options for queries at positions pos0.. (nq of
// them) over nk keys.
func (c sdpaInvCase) options(pos0, nq, nk int, sinks *tensor.Array) tensor.SDPAOptions {
	o := tensor.SDPAOptions{Sinks: sinks}
	switch c.mask {
	case "causal":
		o.MaskKind = tensor.MaskCausal
	case "window", "addwindow":
		bm := make([]bool, nq*nk)
		am := make([]float32, nq*nk)
		for i := range nq {
			for j := range nk {
				bm[i*nk+j] = c.visible(pos0+i, j)
				if !bm[i*nk+j] {
					am[i*nk+j] = float32(math.Inf(-1))
				}
			}
		}
		o.MaskKind = tensor.MaskArray
		if c.mask == "window" {
			o.Mask = tensor.FromBools(bm, []int{nq, nk})
		} else {
			o.Mask = tensor.FromFloat32(am, []int{nq, nk}, tensor.Float32)
		}
	}
	return o
}

// TestSDPADecodeEqualsPrefill: every query of a T-query attention call
// (prefill) gives the same bits as the same query alone over the keys it
// sees (decode), for causal masks with offsets (across key chunks),
// sliding-window masks (bool and additive), no mask, grouped-query ratios
// 1/4/8, head dims 64/128/256, sinks, three dtypes, and several worker
// counts.
func TestSDPADecodeEqualsPrefill(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(13, 14))
		cases := []sdpaInvCase{
			{hq: 2, hkv: 2, t: 9, off: 0, d: 64, dt: tensor.Float32, mask: "causal"},
			{hq: 8, hkv: 2, t: 13, off: 37, d: 128, dt: tensor.BFloat16, mask: "causal"},
			{hq: 16, hkv: 2, t: 5, off: 600, d: 64, dt: tensor.Float16, mask: "causal", sinks: true},
			{hq: 4, hkv: 1, t: 40, off: 1000, d: 128, dt: tensor.BFloat16, mask: "causal"},
			{hq: 8, hkv: 1, t: 7, off: 20, d: 256, dt: tensor.Float32, mask: "window", window: 11},
			{hq: 4, hkv: 4, t: 11, off: 530, d: 64, dt: tensor.BFloat16, mask: "addwindow", window: 100},
			{hq: 8, hkv: 2, t: 6, off: 700, d: 128, dt: tensor.Float16, mask: "window", window: 600, sinks: true},
			{hq: 4, hkv: 1, t: 3, off: 1030, d: 64, dt: tensor.Float32, mask: "none"},
		}
		for _, c := range cases {
			name := fmt.Sprintf("%s/hq%d_hkv%d_T%d_off%d_d%d_%s", c.dt, c.hq, c.hkv, c.t, c.off, c.d, c.mask)
			s := tensor.NewScope()
			L := c.off + c.t
			q := tensor.FromFloat32(randF32(r, c.hq*c.t*c.d), []int{1, c.hq, c.t, c.d}, c.dt)
			k := tensor.FromFloat32(randF32(r, c.hkv*L*c.d), []int{1, c.hkv, L, c.d}, c.dt)
			v := tensor.FromFloat32(randF32(r, c.hkv*L*c.d), []int{1, c.hkv, L, c.d}, c.dt)
			var sinks *tensor.Array
			if c.sinks {
				sinks = tensor.FromFloat32(randF32(r, c.hq), []int{c.hq}, tensor.Float32)
			}
			// [1, hq, T, d] → rows along T: compare per (head, t) by
			// transposing to [T, hq, d]
			whole := func() *tensor.Array {
				o := tensor.ScaledDotProductAttention(q, k, v, c.options(c.off, c.t, L, sinks))
				return tensor.Contiguous(tensor.SwapAxes(o, 1, 2))
			}
			one := func(i int) *tensor.Array {
				n := c.off + i + 1
				if c.mask == "none" {
					n = L
				}
				qi := tensor.SliceAxis(q, 2, i, i+1)
				ki, vi := tensor.SliceAxis(k, 2, 0, n), tensor.SliceAxis(v, 2, 0, n)
				o := tensor.ScaledDotProductAttention(qi, ki, vi, c.options(c.off+i, 1, n, sinks))
				return tensor.Contiguous(tensor.SwapAxes(o, 1, 2))
			}
			checkRowInvariant(t, name, c.t, whole, one)
			s.Close()
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

// TestRowOpsRowInvariant: the per-row operations around the matmuls
// (norms, softmax, reductions along the last axis, RoPE, elementwise
// activations) give each row the same bits alone and among M rows, under
// several worker counts, including rows long enough to be split into
// pieces (a vocabulary of logits).
func TestRowOpsRowInvariant(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		live := tensor.LiveArrays()
		r := rand.New(rand.NewPCG(19, 20))
		for _, dt := range invDTypes {
			for _, d := range []int{77, 256, 70000, 140000} {
				m := 5
				if d > 1000 {
					m = 3
				}
				s := tensor.NewScope()
				x := tensor.FromFloat32(randF32(r, m*d), []int{m, d}, dt)
				w := tensor.FromFloat32(randF32(r, d), []int{d}, dt)
				bias := tensor.FromFloat32(randF32(r, d), []int{d}, dt)
				ops := map[string]func(*tensor.Array) *tensor.Array{
					"rmsnorm":   func(a *tensor.Array) *tensor.Array { return tensor.RMSNorm(a, w, 1e-5) },
					"layernorm": func(a *tensor.Array) *tensor.Array { return tensor.LayerNorm(a, w, bias, 1e-5) },
					"softmax":   func(a *tensor.Array) *tensor.Array { return tensor.Softmax(a, -1) },
					"sum":       func(a *tensor.Array) *tensor.Array { return tensor.Sum(a, []int{1}, true) },
					"max":       func(a *tensor.Array) *tensor.Array { return tensor.Max(a, []int{1}, true) },
					"logsumexp": func(a *tensor.Array) *tensor.Array { return tensor.LogSumExp(a, []int{1}, true) },
					"argmax":    func(a *tensor.Array) *tensor.Array { return tensor.Argmax(a, -1, true) },
					"silu":      tensor.Silu,
					"gelu":      tensor.GeluApprox,
					"mul":       func(a *tensor.Array) *tensor.Array { return tensor.Mul(a, w) },
				}
				for name, f := range ops {
					checkRowInvariant(t, fmt.Sprintf("%s/%s/d%d", name, dt, d), m,
						func() *tensor.Array { return f(x) },
						func(i int) *tensor.Array { return f(rowOf(x, 0, i)) })
				}
				s.Close()
			}
		}
		if d := tensor.LiveArrays() - live; d != 0 {
			t.Errorf("%d arrays leaked", d)
		}
	})
}

// TestSoftmaxMaskedTail: a softmax row with masked (−∞) entries appended,
// as a query inside a prefill block sees the keys past its position,
// gives its visible entries the same bits as the row without them.
func TestSoftmaxMaskedTail(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{100, 40000} {
		for _, extra := range []int{1, 37, 50000} {
			s := tensor.NewScope()
			v := randF32(r, n)
			long := append(append([]float32{}, v...), make([]float32, extra)...)
			for i := n; i < len(long); i++ {
				long[i] = float32(math.Inf(-1))
			}
			a := tensor.Softmax(tensor.FromFloat32(v, []int{1, n}, tensor.Float32), -1).Bytes()
			b := tensor.Softmax(tensor.FromFloat32(long, []int{1, len(long)}, tensor.Float32), -1).Bytes()
			if !bytes.Equal(a, b[:len(a)]) {
				t.Fatalf("n %d + %d masked: visible probabilities differ", n, extra)
			}
			s.Close()
		}
	}
}

// TestRoPEPositionInvariant: a token rotated inside a T-token block at
// offset o gives the same bits as the token alone at offset o+t.
func TestRoPEPositionInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	for _, dt := range invDTypes {
		s := tensor.NewScope()
		const h, tt, d, off = 4, 9, 64, 1000
		x := tensor.FromFloat32(randF32(r, h*tt*d), []int{1, h, tt, d}, dt)
		o := tensor.RoPEOptions{Dims: d, Base: 10000, Scale: 1, Offset: off}
		checkRowInvariant(t, "rope/"+dt.String(), tt,
			func() *tensor.Array { return tensor.Contiguous(tensor.SwapAxes(tensor.RoPE(x, o), 1, 2)) },
			func(i int) *tensor.Array {
				oi := o
				oi.Offset = off + i
				return tensor.Contiguous(tensor.SwapAxes(tensor.RoPE(tensor.SliceAxis(x, 2, i, i+1), oi), 1, 2))
			})
		s.Close()
	}
}

// TestGatherQMMRowInvariant: expert products (mixture-of-experts) give a
// token's rows the same bits whatever other tokens the call holds.
func TestGatherQMMRowInvariant(t *testing.T) {
	forEachKernel(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(25, 26))
		for _, dt := range invDTypes {
			const e, n, k, tok, top = 4, 48, 128, 9, 2
			s := tensor.NewScope()
			w := tensor.FromFloat32(randF32(r, e*n*k), []int{e, n, k}, dt)
			wq, sc, bi := tensor.Quantize(w, 64, 4)
			x := tensor.FromFloat32(randF32(r, tok*k), []int{tok, 1, 1, k}, dt)
			idx := make([]int32, tok*top)
			for i := range idx {
				idx[i] = int32(r.IntN(e))
			}
			inds := tensor.FromInt32(idx, []int{tok, top})
			checkRowInvariant(t, "gatherqmm/"+dt.String(), tok,
				func() *tensor.Array { return tensor.GatherQMM(x, wq, sc, bi, nil, inds, true, 64, 4) },
				func(i int) *tensor.Array {
					return tensor.GatherQMM(rowOf(x, 0, i), wq, sc, bi, nil, rowOf(inds, 0, i), true, 64, 4)
				})
			s.Close()
		}
	})
}

// TestQuantizedMatmulStagedRows runs TestQuantizedMatmulRowInvariant with
// every product's input widening, x row layout and output rounding split
// over the workers in whole rows (stageRows, which splits only products of
// 64K values and more otherwise): the split gives the bits of one
// goroutine doing them (GOMAXPROCS 1) and of each row alone.
func TestQuantizedMatmulStagedRows(t *testing.T) {
	defer func(v int) { stageRowsMin = v }(stageRowsMin)
	stageRowsMin = 1
	TestQuantizedMatmulRowInvariant(t)
}
