package backendtest

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// ---- RMSNorm / LayerNorm ----

func normCases() []testCase {
	var cs []testCase
	for _, dt := range floatTypes {
		for _, withW := range []bool{true, false} {
			for _, lay := range []layout{dense, transposed} {
				shape := []int{2, 3, 64}
				cs = append(cs, testCase{fmt.Sprintf("RMSNorm/%s/weight=%v/%s", dt, withW, lay), func(c *checker) {
					x, xv := c.in(shape, dt, uni(-3, 3), lay)
					var w *tensor.Array
					wv := make([]float64, 64)
					for i := range wv {
						wv[i] = 1
					}
					if withW {
						w, wv = c.in([]int{64}, dt, uni(-2, 2), dense)
					}
					const eps = 1e-5
					want := make([]float64, len(xv))
					lanes(shape, 2, func(idx []int) {
						ms := 0.0
						for _, i := range idx {
							ms += xv[i] * xv[i]
						}
						r := 1 / math.Sqrt(ms/float64(len(idx))+eps)
						for k, i := range idx {
							want[i] = xv[i] * r * wv[k]
						}
					})
					tl := tolFor(dt, true)
					tl.rtol *= 2 // MLX rounds x·r to the dtype before the weight
					c.check("RMSNorm", c.T(tensor.RMSNorm(x, w, eps)), shape, dt, want, tl)
				}})
			}
		}
		for _, params := range []string{"w+b", "w", "none"} {
			shape := []int{4, 48}
			cs = append(cs, testCase{fmt.Sprintf("LayerNorm/%s/%s", dt, params), func(c *checker) {
				x, xv := c.in(shape, dt, uni(-3, 5), transposed)
				var w, b *tensor.Array
				wv, bv := make([]float64, 48), make([]float64, 48)
				for i := range wv {
					wv[i] = 1
				}
				if params != "none" {
					w, wv = c.in([]int{48}, dt, uni(-2, 2), dense)
				}
				if params == "w+b" {
					b, bv = c.in([]int{48}, dt, uni(-1, 1), dense)
				}
				const eps = 1e-5
				want := make([]float64, len(xv))
				lanes(shape, 1, func(idx []int) {
					mu := 0.0
					for _, i := range idx {
						mu += xv[i]
					}
					mu /= float64(len(idx))
					v := 0.0
					for _, i := range idx {
						v += (xv[i] - mu) * (xv[i] - mu)
					}
					r := 1 / math.Sqrt(v/float64(len(idx))+eps)
					for k, i := range idx {
						want[i] = (xv[i]-mu)*r*wv[k] + bv[k]
					}
				})
				tl := tolFor(dt, true)
				tl.rtol *= 2
				tl.atol = max(tl.atol, 4*unitRoundoff(dt))
				c.check("LayerNorm", c.T(tensor.LayerNorm(x, w, b, eps)), shape, dt, want, tl)
			}})
		}
	}
	cs = append(cs, testCase{"RMSNorm/large-row", func(c *checker) {
		shape := []int{2, 4096}
		x, xv := c.in(shape, tensor.Float32, uni(-100, 100), dense)
		want := make([]float64, len(xv))
		lanes(shape, 1, func(idx []int) {
			ms := 0.0
			for _, i := range idx {
				ms += xv[i] * xv[i]
			}
			r := 1 / math.Sqrt(ms/float64(len(idx))+1e-6)
			for _, i := range idx {
				want[i] = xv[i] * r
			}
		})
		c.check("RMSNorm", c.T(tensor.RMSNorm(x, nil, 1e-6)), shape, tensor.Float32, want, tol{1e-4, 1e-5})
	}})
	return cs
}

// ---- RoPE ----

type ropeCase struct {
	shape       []int
	dims        int
	traditional bool
	base, scale float32
	offset      int
	offsets     []int // OffsetArr values (nil: none)
	freqs       bool
}

func (r ropeCase) String() string {
	s := fmt.Sprintf("%v/dims%d", r.shape, r.dims)
	if r.traditional {
		s += "/traditional"
	}
	if r.freqs {
		s += "/freqs"
	} else {
		s += fmt.Sprintf("/base%g", r.base)
	}
	if r.scale != 1 {
		s += fmt.Sprintf("/scale%g", r.scale)
	}
	if r.offsets != nil {
		s += fmt.Sprintf("/offsets%v", r.offsets)
	} else {
		s += fmt.Sprintf("/offset%d", r.offset)
	}
	return s
}

// ropeRef returns the rotated values and, per element, the magnitude of
// the inputs it combines (the scale of the rounding error of a backend
// that, like MLX's fallback, rounds cos and sin to the input's dtype).
func ropeRef(xv []float64, shape []int, rc ropeCase, freqs []float64) (out, mag []float64) {
	out = append([]float64(nil), xv...)
	mag = make([]float64, len(xv))
	for i, x := range xv {
		mag[i] = math.Abs(x)
	}
	nd := len(shape)
	t, d := shape[nd-2], shape[nd-1]
	half := rc.dims / 2
	rows := numel(shape) / d
	perBatch := rows / shape[0]
	for r := 0; r < rows; r++ {
		pos := r % t
		b := r / perBatch
		off := rc.offset
		if rc.offsets != nil {
			if len(rc.offsets) == 1 {
				off = rc.offsets[0]
			} else {
				off = rc.offsets[b]
			}
		}
		p := float64(off + pos)
		row := xv[r*d : (r+1)*d]
		for i := 0; i < half; i++ {
			var theta float64
			if freqs != nil {
				theta = float64(rc.scale) / freqs[i]
			} else {
				theta = float64(rc.scale) * math.Pow(float64(rc.base), -2*float64(i)/float64(rc.dims))
			}
			ang := p * theta
			cs, sn := math.Cos(ang), math.Sin(ang)
			i1, i2 := i, i+half
			if rc.traditional {
				i1, i2 = 2*i, 2*i+1
			}
			x1, x2 := row[i1], row[i2]
			out[r*d+i1] = x1*cs - x2*sn
			out[r*d+i2] = x1*sn + x2*cs
			mag[r*d+i1] = math.Abs(x1) + math.Abs(x2)
			mag[r*d+i2] = mag[r*d+i1]
		}
	}
	return out, mag
}

// checkRoPE allows the float32 angle error at positions up to ~100 and,
// for 16-bit inputs, cos and sin rounded to the dtype.
func (c *checker) checkRoPE(got *tensor.Array, shape []int, dt tensor.DType, want, mag []float64) {
	c.t.Helper()
	u := unitRoundoff(dt)
	k := 3 * u
	if dt == tensor.Float32 {
		k = 1e-4
	}
	c.checkScaled("RoPE", got, shape, dt, want, mag, 2*u, k)
}

func ropeCases() []testCase {
	var cs []testCase
	list := []ropeCase{
		{[]int{2, 3, 5, 16}, 16, false, 10000, 1, 0, nil, false},
		{[]int{2, 3, 5, 16}, 16, true, 10000, 1, 7, nil, false},
		{[]int{1, 2, 4, 32}, 16, false, 10000, 1, 3, nil, false},
		{[]int{1, 2, 4, 32}, 16, true, 500000, 1, 3, nil, false},
		{[]int{2, 6, 8}, 8, false, 10000, 0.5, 11, nil, false},
		{[]int{3, 2, 4, 16}, 16, false, 10000, 1, 0, []int{0, 5, 17}, false},
		{[]int{3, 2, 4, 16}, 12, true, 10000, 1, 0, []int{4, 0, 9}, false},
		{[]int{2, 1, 3, 16}, 16, false, 10000, 1, 99, []int{2}, false},
		{[]int{1, 2, 6, 16}, 16, false, 0, 1, 4, nil, true},
		{[]int{1, 2, 6, 16}, 8, true, 0, 2, 4, nil, true},
		{[]int{2, 2, 1, 64}, 64, false, 10000, 1, 0, []int{30, 41}, false},
	}
	for _, rc := range list {
		for _, dt := range floatTypes {
			cs = append(cs, testCase{fmt.Sprintf("%s/%s", dt, rc), func(c *checker) {
				x, xv := c.in(rc.shape, dt, uni(-2, 2), dense)
				o := tensor.RoPEOptions{Dims: rc.dims, Traditional: rc.traditional, Base: rc.base, Scale: rc.scale, Offset: rc.offset}
				var fv []float64
				if rc.freqs {
					var f *tensor.Array
					f, fv = c.in([]int{rc.dims / 2}, tensor.Float32, uni(1, 300), dense)
					o.Freqs = f
				}
				if rc.offsets != nil {
					iv := make([]float64, len(rc.offsets))
					for i, v := range rc.offsets {
						iv[i] = float64(v)
					}
					o.OffsetArr = c.arr(iv, []int{len(iv)}, tensor.Int32)
				}
				want, mag := ropeRef(xv, rc.shape, rc, fv)
				c.checkRoPE(c.T(tensor.RoPE(x, o)), rc.shape, dt, want, mag)
			}})
		}
	}
	cs = append(cs,
		testCase{"float32/scalar-OffsetArr", func(c *checker) {
			rc := ropeCase{[]int{2, 2, 3, 8}, 8, false, 10000, 1, 0, []int{6}, false}
			x, xv := c.in(rc.shape, tensor.Float32, uni(-2, 2), dense)
			off := c.arr([]float64{6}, []int{}, tensor.Int32)
			want, mag := ropeRef(xv, rc.shape, rc, nil)
			c.checkRoPE(c.T(tensor.RoPE(x, tensor.RoPEOptions{Dims: 8, Base: 10000, Scale: 1, OffsetArr: off})), rc.shape, tensor.Float32, want, mag)
		}},
		testCase{"float32/transposed-input", func(c *checker) {
			// [B, T, H, D] viewed as [B, H, T, D], as attention layers do
			rc := ropeCase{[]int{1, 3, 5, 16}, 16, false, 10000, 1, 2, nil, false}
			base, bv := c.in([]int{1, 5, 3, 16}, tensor.Float32, uni(-2, 2), dense)
			x := c.T(tensor.SwapAxes(base, 1, 2))
			xv := transposeRef(bv, []int{1, 5, 3, 16}, []int{0, 2, 1, 3})
			want, mag := ropeRef(xv, rc.shape, rc, nil)
			c.checkRoPE(c.T(tensor.RoPE(x, tensor.RoPEOptions{Dims: 16, Base: 10000, Scale: 1, Offset: 2})), rc.shape, tensor.Float32, want, mag)
		}},
	)
	return cs
}

// ---- scaled dot-product attention ----

type sdpaCase struct {
	b, hq, hkv, tq, tk, d, dv int
	mask                      string // none, causal, bool, additive, bool-fullrow
	maskShape                 []int
	sinks                     bool
	scale                     float32
}

func (s sdpaCase) String() string {
	r := fmt.Sprintf("B%d/H%d:%d/T%d:%d/D%d:%d/%s", s.b, s.hq, s.hkv, s.tq, s.tk, s.d, s.dv, s.mask)
	if s.maskShape != nil {
		r += fmt.Sprint(s.maskShape)
	}
	if s.sinks {
		r += "/sinks"
	}
	if s.scale != 0 {
		r += fmt.Sprintf("/scale%g", s.scale)
	}
	return r
}

// checkSDPA draws the sinks s asks for (after the other inputs, so each
// case keeps its random stream), runs SDPA with o and compares the result
// with sdpaRef over the same inputs, mask (keep, add) and scale.
func (c *checker) checkSDPA(s sdpaCase, dt tensor.DType, q, k, v *tensor.Array, o tensor.SDPAOptions, qv, kv, vv []float64,
	keep func(b, h, i, j int) bool, add func(b, h, i, j int) float64, scale float64) {
	c.t.Helper()
	var sv []float64
	if s.sinks {
		o.Sinks, sv = c.in([]int{s.hq}, dt, uni(-1, 2), dense)
	}
	want := sdpaRef(s, qv, kv, vv, keep, add, sv, scale)
	tl := tolFor(dt, true)
	tl.atol = max(tl.atol, 2*unitRoundoff(dt))
	c.check("SDPA", c.T(tensor.ScaledDotProductAttention(q, k, v, o)), []int{s.b, s.hq, s.tq, s.dv}, dt, want, tl)
}

// sdpaRef computes attention row by row in float64; keep(b,h,i,j) and
// add(b,h,i,j) describe the mask, sinks may be nil.
func sdpaRef(s sdpaCase, q, k, v []float64, keep func(b, h, i, j int) bool, add func(b, h, i, j int) float64, sinks []float64, scale float64) []float64 {
	out := make([]float64, s.b*s.hq*s.tq*s.dv)
	group := s.hq / s.hkv
	scores := make([]float64, s.tk)
	for b := 0; b < s.b; b++ {
		for h := 0; h < s.hq; h++ {
			kh := h / group
			for i := 0; i < s.tq; i++ {
				m := math.Inf(-1)
				for j := 0; j < s.tk; j++ {
					if !keep(b, h, i, j) {
						scores[j] = math.Inf(-1)
						continue
					}
					dot := 0.0
					for e := 0; e < s.d; e++ {
						dot += q[((b*s.hq+h)*s.tq+i)*s.d+e] * k[((b*s.hkv+kh)*s.tk+j)*s.d+e]
					}
					scores[j] = dot*scale + add(b, h, i, j)
					m = math.Max(m, scores[j])
				}
				if sinks != nil {
					m = math.Max(m, sinks[h])
				}
				o := out[((b*s.hq+h)*s.tq+i)*s.dv:][:s.dv]
				if math.IsInf(m, -1) {
					continue // every key masked: zeros
				}
				den := 0.0
				if sinks != nil {
					den = math.Exp(sinks[h] - m)
				}
				for j := 0; j < s.tk; j++ {
					if !math.IsInf(scores[j], -1) {
						den += math.Exp(scores[j] - m)
					}
				}
				for j := 0; j < s.tk; j++ {
					if math.IsInf(scores[j], -1) {
						continue
					}
					p := math.Exp(scores[j]-m) / den
					for e := 0; e < s.dv; e++ {
						o[e] += p * v[((b*s.hkv+kh)*s.tk+j)*s.dv+e]
					}
				}
			}
		}
	}
	return out
}

func sdpaCases() []testCase {
	var cs []testCase
	list := []sdpaCase{
		{1, 2, 2, 4, 4, 16, 16, "none", nil, false, 0},
		{2, 4, 2, 3, 7, 16, 8, "none", nil, false, 0},
		{2, 4, 1, 1, 9, 32, 32, "none", nil, false, 0},
		{1, 4, 2, 5, 5, 16, 16, "causal", nil, false, 0},
		{2, 4, 2, 3, 7, 16, 16, "causal", nil, false, 0},
		{1, 2, 1, 6, 4, 8, 8, "causal", nil, false, 0},
		{2, 4, 2, 3, 7, 16, 16, "bool", []int{2, 1, 3, 7}, false, 0},
		{2, 4, 2, 3, 7, 16, 16, "bool", []int{3, 7}, false, 0.3},
		{2, 4, 4, 3, 7, 16, 16, "additive", []int{2, 4, 3, 7}, false, 0},
		{1, 2, 2, 2, 5, 8, 8, "additive", []int{1, 5}, false, 0},
		{1, 4, 2, 3, 6, 16, 16, "bool-fullrow", []int{1, 1, 3, 6}, false, 0},
		{2, 4, 2, 3, 7, 16, 16, "none", nil, true, 0},
		{1, 4, 2, 4, 4, 16, 16, "causal", nil, true, 0.5},
		{1, 8, 2, 1, 40, 64, 64, "none", nil, false, 0},
	}
	for _, s := range list {
		for _, dt := range floatTypes {
			cs = append(cs, testCase{fmt.Sprintf("%s/%s", dt, s), func(c *checker) {
				q, qv := c.in([]int{s.b, s.hq, s.tq, s.d}, dt, uni(-1, 1), dense)
				if dt == tensor.Float16 {
					// q as a [B, T, H, D] buffer viewed as [B, H, T, D]
					qb, qbv := c.in([]int{s.b, s.tq, s.hq, s.d}, dt, uni(-1, 1), dense)
					q = c.T(tensor.SwapAxes(qb, 1, 2))
					qv = transposeRef(qbv, []int{s.b, s.tq, s.hq, s.d}, []int{0, 2, 1, 3})
				}
				// k arrives as a transposed view ([B, T, H, D] stored), as in the layers
				kb, kbv := c.in([]int{s.b, s.tk, s.hkv, s.d}, dt, uni(-1, 1), dense)
				k := c.T(tensor.SwapAxes(kb, 1, 2))
				kv := transposeRef(kbv, []int{s.b, s.tk, s.hkv, s.d}, []int{0, 2, 1, 3})
				v, vv := c.in([]int{s.b, s.hkv, s.tk, s.dv}, dt, uni(-1, 1), dense)
				o := tensor.SDPAOptions{Scale: s.scale}
				scale := float64(s.scale)
				if s.scale == 0 {
					scale = 1 / math.Sqrt(float64(s.d))
				}
				keep := func(b, h, i, j int) bool { return true }
				add := func(b, h, i, j int) float64 { return 0 }
				switch s.mask {
				case "causal":
					o.MaskKind = tensor.MaskCausal
					keep = func(b, h, i, j int) bool { return j <= i+s.tk-s.tq }
				case "bool", "bool-fullrow":
					g := pick(0, 1, 1)
					m, mv := c.in(s.maskShape, tensor.Bool, g, dense)
					if s.mask == "bool-fullrow" {
						// row 1 masks everything; the others keep key 0
						for i := range mv {
							idx := unravel(i, s.maskShape)
							qi, kj := idx[len(idx)-2], idx[len(idx)-1]
							if qi == 1 {
								mv[i] = 0
							} else if kj == 0 {
								mv[i] = 1
							}
						}
						m = c.arr(mv, s.maskShape, tensor.Bool)
					}
					o.MaskKind, o.Mask = tensor.MaskArray, m
					keep = func(b, h, i, j int) bool { return mv[bcastIndex([]int{b, h, i, j}, s.maskShape)] != 0 }
				case "additive":
					m, mv := c.in(s.maskShape, dt, uni(-3, 1), dense)
					// a few -inf entries, never a whole row
					for i := range mv {
						if i%3 == 1 {
							mv[i] = math.Inf(-1)
						}
					}
					m = c.arr(mv, s.maskShape, dt)
					o.MaskKind, o.Mask = tensor.MaskArray, m
					keep = func(b, h, i, j int) bool { return !math.IsInf(mv[bcastIndex([]int{b, h, i, j}, s.maskShape)], -1) }
					add = func(b, h, i, j int) float64 { return mv[bcastIndex([]int{b, h, i, j}, s.maskShape)] }
				}
				c.checkSDPA(s, dt, q, k, v, o, qv, kv, vv, keep, add, scale)
			}})
		}
	}
	return cs
}
