package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// sdpaCase describes one attention problem; k/v live in a cache of cacheT
// rows of which the first tk are used (a strided view).
type sdpaCase struct {
	name                  string
	b, hq, hkv, tq, tk, d int
	dv, cacheT            int
	dt                    tensor.DType
	causal                bool
	boolMask              []bool    // [tq, tk] broadcast over b, h
	addMask               []float32 // [b, 1, 1, tk]
	sinks                 []float32 // [hq]
	wantZeroRows          []int     // rows (t) of every head that must be exactly zero
}

// refSDPA is the float64 reference; masked keys are dropped and a row
// with nothing left (and no sink) is zero.
func refSDPA(c sdpaCase, q, k, v []float32, scale float64) []float64 {
	out := make([]float64, c.b*c.hq*c.tq*c.dv)
	g := c.hq / c.hkv
	for b := range c.b {
		for h := range c.hq {
			kh := h / g
			for t := range c.tq {
				qr := q[((b*c.hq+h)*c.tq+t)*c.d:][:c.d]
				s := make([]float64, c.tk)
				keep := make([]bool, c.tk)
				m := math.Inf(-1)
				for j := range c.tk {
					kr := k[((b*c.hkv+kh)*c.cacheT+j)*c.d:][:c.d]
					var dot float64
					for i := range c.d {
						dot += float64(qr[i]) * float64(kr[i])
					}
					s[j] = dot * scale
					keep[j] = true
					if c.causal && j > c.tk-c.tq+t {
						keep[j] = false
					}
					if c.boolMask != nil && !c.boolMask[t*c.tk+j] {
						keep[j] = false
					}
					if c.addMask != nil {
						s[j] += float64(c.addMask[b*c.tk+j])
					}
					if keep[j] {
						m = max(m, s[j])
					}
				}
				if c.sinks != nil {
					m = max(m, float64(c.sinks[h]))
				}
				var l float64
				o := out[((b*c.hq+h)*c.tq+t)*c.dv:][:c.dv]
				for j := range c.tk {
					if !keep[j] || math.IsInf(s[j], -1) {
						continue
					}
					e := math.Exp(s[j] - m)
					l += e
					vr := v[((b*c.hkv+kh)*c.cacheT+j)*c.dv:][:c.dv]
					for i := range c.dv {
						o[i] += e * float64(vr[i])
					}
				}
				if c.sinks != nil {
					l += math.Exp(float64(c.sinks[h]) - m)
				}
				if l > 0 {
					for i := range o {
						o[i] /= l
					}
				}
			}
		}
	}
	return out
}

func runSDPACase(t *testing.T, c sdpaCase) {
	t.Helper()
	if c.dv == 0 {
		c.dv = c.d
	}
	if c.cacheT == 0 {
		c.cacheT = c.tk
	}
	qv := fzRound(fzRand(c.b*c.hq*c.tq*c.d, 41), c.dt)
	kv := fzRound(fzRand(c.b*c.hkv*c.cacheT*c.d, 42), c.dt)
	vv := fzRound(fzRand(c.b*c.hkv*c.cacheT*c.dv, 43), c.dt)
	for i := range qv {
		qv[i] *= 2
	}
	q := tensor.FromFloat32(qv, []int{c.b, c.hq, c.tq, c.d}, c.dt)
	kc := tensor.FromFloat32(kv, []int{c.b, c.hkv, c.cacheT, c.d}, c.dt)
	vc := tensor.FromFloat32(vv, []int{c.b, c.hkv, c.cacheT, c.dv}, c.dt)
	k := tensor.SliceAxis(kc, 2, 0, c.tk)
	v := tensor.SliceAxis(vc, 2, 0, c.tk)
	o := tensor.SDPAOptions{}
	var extra []*tensor.Array
	switch {
	case c.causal:
		o.MaskKind = tensor.MaskCausal
	case c.boolMask != nil:
		o.MaskKind = tensor.MaskArray
		o.Mask = tensor.FromBools(c.boolMask, []int{1, 1, c.tq, c.tk})
		extra = append(extra, o.Mask)
	case c.addMask != nil:
		o.MaskKind = tensor.MaskArray
		o.Mask = tensor.FromFloat32(c.addMask, []int{c.b, 1, 1, c.tk}, c.dt)
		c.addMask = fzRound(c.addMask, c.dt)
		extra = append(extra, o.Mask)
	}
	if c.sinks != nil {
		o.Sinks = tensor.FromFloat32(c.sinks, []int{c.hq}, tensor.Float32)
		extra = append(extra, o.Sinks)
	}
	got := tensor.ScaledDotProductAttention(q, k, v, o)
	g := got.Float32s()
	want := refSDPA(c, qv, kv, vv, 1/math.Sqrt(float64(c.d)))
	atol, rtol := 2e-6, 1e-5
	if c.dt != tensor.Float32 {
		atol, rtol = 4e-3, 1.0/128
	}
	fzClose(t, c.name, g, want, atol, rtol)
	for _, zt := range c.wantZeroRows {
		for bh := range c.b * c.hq {
			for i, x := range g[(bh*c.tq+zt)*c.dv:][:c.dv] {
				if x != 0 {
					t.Fatalf("%s: fully masked row %d head %d [%d] = %v, want 0", c.name, zt, bh, i, x)
				}
			}
		}
	}
	tensor.Free(append(extra, q, kc, vc, k, v, got)...)
}

func TestSDPA(t *testing.T) {
	// more workers than cores so that decode splits keys into chunks
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	bm := make([]bool, 3*9)
	for i := range bm {
		bm[i] = (i*7)%5 != 0
	}
	for j := range 9 {
		bm[1*9+j] = false // query row 1 sees nothing
	}
	am := fzRand(2*600, 51)
	for i := range am {
		am[i] *= 4
	}
	am[5] = float32(math.Inf(-1))
	cases := []sdpaCase{
		{name: "decode gqa split keys", b: 1, hq: 8, hkv: 2, tq: 1, tk: 1500, d: 64, cacheT: 2048, dt: tensor.Float32},
		{name: "decode mha", b: 2, hq: 4, hkv: 4, tq: 1, tk: 37, d: 16, dt: tensor.Float32},
		{name: "prefill causal", b: 1, hq: 4, hkv: 2, tq: 70, tk: 70, d: 32, dt: tensor.Float32, causal: true},
		{name: "chunked causal", b: 2, hq: 2, hkv: 1, tq: 5, tk: 133, d: 8, dv: 12, cacheT: 200, dt: tensor.Float32, causal: true},
		{name: "causal tq>tk", b: 1, hq: 2, hkv: 1, tq: 6, tk: 4, d: 8, dt: tensor.Float32, causal: true, wantZeroRows: []int{0, 1}},
		{name: "bool mask", b: 2, hq: 4, hkv: 1, tq: 3, tk: 9, d: 8, dt: tensor.Float32, boolMask: bm, wantZeroRows: []int{1}},
		{name: "additive mask", b: 2, hq: 2, hkv: 2, tq: 2, tk: 600, d: 16, dt: tensor.Float32, addMask: am},
		{name: "sinks", b: 1, hq: 4, hkv: 2, tq: 3, tk: 20, d: 16, dt: tensor.Float32, causal: true, sinks: []float32{0.5, -1, 3, 10}},
		{name: "sinks masked row", b: 1, hq: 2, hkv: 1, tq: 3, tk: 9, d: 8, dt: tensor.Float32, boolMask: bm, sinks: []float32{1, -2}, wantZeroRows: []int{1}},
		{name: "bf16 decode", b: 1, hq: 8, hkv: 1, tq: 1, tk: 700, d: 128, cacheT: 1024, dt: tensor.BFloat16},
		{name: "bf16 prefill", b: 1, hq: 2, hkv: 1, tq: 40, tk: 40, d: 64, dt: tensor.BFloat16, causal: true},
	}
	// with AVX-512 the blocks run on the matmul micro-kernel (blockGemm),
	// without it on the portable loops: both are held to the reference
	forEachKernel(t, func(t *testing.T) {
		for _, c := range cases {
			fzNoLeak(t, func() { runSDPACase(t, c) })
		}
	})
}

// TestSgemmStridedKernels: sgemm8x32B over a row-major window of a wider B
// gives sgemm8x32's bits over the packed panel of the same values, and
// sgemm4x32B gives rows 0..3 those bits while leaving rows 4..7 of C as
// they were (the attention kernels rely on both).
func TestSgemmStridedKernels(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512 on this CPU: the kernels under test are not used")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, kc := range []int{0, 1, 5, 64, 77} {
		const ldb, ldc = 96, 40
		a := randF32(r, kc*8+1)
		wide := randF32(r, kc*ldb+48)
		wideH := make([]uint16, len(wide)) // wide in bfloat16, and wide made those values
		for i, v := range wide {
			wideH[i] = tensor.F32ToBF16(v)
			wide[i] = tensor.BF16ToF32(wideH[i])
		}
		pan := make([]float32, kc*32+1)
		for k := range kc {
			copy(pan[k*32:k*32+32], wide[k*ldb+16:k*ldb+48])
		}
		c0 := randF32(r, 8*ldc)
		want := append([]float32(nil), c0...)
		sgemm8x32(kc, &a[0], &pan[0], &want[0], ldc)
		got8 := append([]float32(nil), c0...)
		sgemm8x32B(kc, &a[0], &wide[16], ldb, &got8[0], ldc)
		got4 := append([]float32(nil), c0...)
		sgemm4x32B(kc, &a[0], &wide[16], ldb, &got4[0], ldc)
		got8h := append([]float32(nil), c0...)
		sgemm8x32BH(kc, &a[0], &wideH[16], ldb, &got8h[0], ldc)
		got4h := append([]float32(nil), c0...)
		sgemm4x32BH(kc, &a[0], &wideH[16], ldb, &got4h[0], ldc)
		for i := range want {
			w := want[i]
			if i >= 4*ldc {
				w = c0[i] // rows 4..7 untouched by the 4-row kernel
			}
			if math.Float32bits(got8[i]) != math.Float32bits(want[i]) || math.Float32bits(got4[i]) != math.Float32bits(w) {
				t.Fatalf("kc=%d element %d (row %d): 8-row %g, 4-row %g, want %g / %g", kc, i, i/ldc, got8[i], got4[i], want[i], w)
			}
			if math.Float32bits(got8h[i]) != math.Float32bits(want[i]) || math.Float32bits(got4h[i]) != math.Float32bits(w) {
				t.Fatalf("kc=%d element %d (row %d): bfloat16 B 8-row %g, 4-row %g, want %g / %g", kc, i, i/ldc, got8h[i], got4h[i], want[i], w)
			}
		}
	}
}
