package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/mlxgo/mlxgo/tensor"
)

// turboKeyBlock is how many keys a work item scores before it folds them
// into its running softmax.
const turboKeyBlock = 256

// turboRowBlock is the most query rows (query heads of one KV head times
// query positions) one work item attends.
const turboRowBlock = 64

// turboKeySpan is the key range of one partial softmax: keys are cut at
// the positions (SDPAOptions.KeyStart + index) that are multiples of it,
// whatever the call's shape, and the spans' partial
// results are merged left to right, so that a query row's output depends
// only on its own query and the keys it sees — not on how many other rows
// (a prefill chunk's length) or keys (a longer chunk's masked ones) the
// call has, where its first key sits (a sliding window's), nor on
// whether the spans ran in parallel. Batched rows and chunked prefill then
// give the bits of a lone decode step. Within a span, keys are folded
// into the running softmax in blocks of turboKeyBlock, aligned likewise.
const turboKeySpan = 512

// SDPATurbo implements tensor.TurboAttention: attention over TurboQuant
// codes read in place. Each block of 256 keys is decoded once into
// float32 panels (keys as code·s + m, values in the rotated domain as
// level·σ; no copy of the whole cache), scores and the weighted value
// sums run on the dense matmul micro-kernel, and the output is
// transformed back (signs·H/√d) once per query row. Scores and softmax are float32; a row with every key masked yields
// zeros. Work is split over (batch, KV head, query rows) and, when that is
// too little for every core (decoding), over the key spans (turboKeySpan),
// whose partial softmaxes are merged as in flash attention — in the same
// order and arithmetic as when one work item runs them in turn, so each
// row's output is the same bits however the call is shaped or split.
func (be *Backend) SDPATurbo(q, keys, values *tensor.Array, l tensor.TurboLayout, o tensor.SDPAOptions) *tensor.Array {
	bad := func(format string, args ...any) {
		panic(&tensor.Error{Op: "SDPATurbo", Err: fmt.Errorf("%w: %s", tensor.ErrShape, fmt.Sprintf(format, args...))})
	}
	if q.NDim() != 4 || keys.NDim() != 4 || values.NDim() != 4 || keys.DType() != tensor.Uint8 || values.DType() != tensor.Uint8 {
		bad("q %v, keys %v %s, values %v %s", q.Shape(), keys.Shape(), keys.DType(), values.Shape(), values.DType())
	}
	b, hq, lq, dk := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	hkv, tk := keys.Dim(1), keys.Dim(2)
	dv := l.ValueDim
	if l.Group <= 0 || dk != l.KeyDim || dk%l.Group != 0 || dv%l.Group != 0 || dv&(dv-1) != 0 || keys.Dim(3) != l.KeyBytes() ||
		values.Dim(3) != l.ValueBytes() || keys.Dim(0) != b || values.Dim(0) != b || values.Dim(1) != hkv || values.Dim(2) != tk ||
		hkv == 0 || hq%hkv != 0 || len(l.Levels) != 1<<l.ValueBits || len(l.Signs) != dv {
		bad("q %v, keys %v, values %v for layout k%dv%d, dims %d/%d", q.Shape(), keys.Shape(), values.Shape(), l.KeyBits, l.ValueBits, l.KeyDim, l.ValueDim)
	}
	scale := o.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(dk)))
	}
	qf := q.Float32s()
	for i := range qf {
		qf[i] *= scale
	}
	var mask []float32
	var boolMask bool
	if o.MaskKind == tensor.MaskArray {
		out := tensor.WithScope(func() []*tensor.Array {
			m := o.Mask
			if m.DType() == tensor.Bool {
				m = tensor.AsType(m, tensor.Float32)
			}
			return []*tensor.Array{tensor.Contiguous(tensor.BroadcastTo(m, b, hq, lq, tk))}
		})[0]
		mask, boolMask = out.Float32s(), o.Mask.DType() == tensor.Bool
		out.Free()
	}
	ki, kown := fusedLastDense(keys)
	vi, vown := fusedLastDense(values)
	defer func() {
		if kown {
			ki.buf.drop()
		}
		if vown {
			vi.buf.drop()
		}
	}()
	rep := hq / hkv
	rows := rep * lq
	p := &turboPlan{l: l, q: qf, mask: mask, boolMask: boolMask, causal: o.MaskKind == tensor.MaskCausal,
		k: ki, v: vi, hq: hq, hkv: hkv, lq: lq, tk: tk, dk: dk, dv: dv, rep: rep, start: o.KeyStart}
	rowBlocks := (rows + turboRowBlock - 1) / turboRowBlock
	heads := b * hkv * rowBlocks
	// span s holds the keys of positions [(s0+s)·span, (s0+s+1)·span)
	s0 := o.KeyStart / turboKeySpan
	spans := max((o.KeyStart+tk+turboKeySpan-1)/turboKeySpan-s0, 1)
	spanKeys := func(sp int) (j0, j1 int) {
		return max((s0+sp)*turboKeySpan-o.KeyStart, 0), min((s0+sp+1)*turboKeySpan-o.KeyStart, tk)
	}
	res := make([]float32, b*hq*lq*dv)
	// finish writes a work item's merged rows, normalised and unrotated
	finish := func(h int, pt *turboPart) {
		bi, kvh, rb := h/(hkv*rowBlocks), h/rowBlocks%hkv, h%rowBlocks
		r0 := rb * turboRowBlock
		for r := range pt.m {
			if math.IsInf(float64(pt.m[r]), -1) {
				continue // every key masked: zeros
			}
			hqi, li := kvh*rep+(r0+r)/lq, (r0+r)%lq
			dst := res[((bi*hq+hqi)*lq+li)*dv:][:dv]
			inv := 1 / pt.l[r]
			for j, a := range pt.acc[r*dv : (r+1)*dv] {
				dst[j] = a * inv
			}
			turboUnrotate(dst, l.Signs)
		}
	}
	rowsOf := func(h int) (r0, r1 int) {
		rb := h % rowBlocks
		return rb * turboRowBlock, min((rb+1)*turboRowBlock, rows)
	}
	if w := workers(); heads < w && spans > 1 {
		// decoding: every (head, span) in parallel, merged after
		parts := make([]turboPart, heads*spans)
		// one backing array for every part (rows ≤ turboRowBlock: heads are few here)
		per := min(rows, turboRowBlock)
		back := make([]float32, len(parts)*per*(2+dv))
		for i := range parts {
			parts[i] = newTurboPart(back[i*per*(2+dv):][:per*(2+dv)], dv)
		}
		parallelFor(len(parts), 1, func(lo, hi int) {
			for it := lo; it < hi; it++ {
				h, sp := it/spans, it%spans
				r0, r1 := rowsOf(h)
				j0, j1 := spanKeys(sp)
				parts[it].reset(r1 - r0)
				p.attend(&parts[it], h/(hkv*rowBlocks), h/rowBlocks%hkv, r0, r1, j0, j1)
			}
		})
		parallelFor(heads, 1, func(lo, hi int) {
			for h := lo; h < hi; h++ {
				acc := &parts[h*spans]
				for sp := 1; sp < spans; sp++ {
					acc.merge(&parts[h*spans+sp], dv)
				}
				finish(h, acc)
			}
		})
	} else {
		parallelFor(heads, 1, func(lo, hi int) {
			for h := lo; h < hi; h++ {
				r0, r1 := rowsOf(h)
				bi, kvh := h/(hkv*rowBlocks), h/rowBlocks%hkv
				j0, j1 := spanKeys(0)
				back := make([]float32, 2*(r1-r0)*(2+dv))
				acc, pt := newTurboPart(back[:len(back)/2], dv), newTurboPart(back[len(back)/2:], dv)
				acc.reset(r1 - r0)
				p.attend(&acc, bi, kvh, r0, r1, j0, j1)
				for sp := 1; sp < spans; sp++ {
					j0, j1 := spanKeys(sp)
					pt.reset(r1 - r0)
					p.attend(&pt, bi, kvh, r0, r1, j0, j1)
					acc.merge(&pt, dv)
				}
				finish(h, &acc)
			}
		})
	}
	out := tensor.FromFloat32On(be, res, []int{b, hq, lq, dv}, tensor.Float32)
	if q.DType() == tensor.Float32 {
		return out
	}
	defer out.Free()
	return be.AsType(out, q.DType())
}

// turboPlan is one SDPATurbo call's inputs.
type turboPlan struct {
	l                tensor.TurboLayout
	q                []float32 // [B, Hq, L, Dk], scaled
	mask             []float32 // [B, Hq, L, T] or nil
	boolMask, causal bool
	k, v             *impl
	hq, hkv, lq, tk  int
	dk, dv, rep      int
	start            int // position of key 0 (SDPAOptions.KeyStart)
}

// turboPart is a work item's running softmax over its keys: per row the
// max score, the sum of exp(score − max) and the weighted value sum.
type turboPart struct {
	m, l []float32
	acc  []float32 // rows × Dv
}

// newTurboPart lays a part of up to len(back)/(2+dv) rows over back.
func newTurboPart(back []float32, dv int) turboPart {
	n := len(back) / (2 + dv)
	return turboPart{m: back[:n], l: back[n : 2*n], acc: back[2*n : n*(2+dv)]}
}

// reset empties the part for nr rows: no key seen yet.
func (pt *turboPart) reset(nr int) {
	dv := len(pt.acc) / len(pt.m)
	pt.m, pt.l, pt.acc = pt.m[:nr], pt.l[:nr], pt.acc[:nr*dv]
	for r := range pt.m {
		pt.m[r], pt.l[r] = float32(math.Inf(-1)), 0
	}
	clear(pt.acc)
}

// merge folds the partial softmax of the next key span into pt (flash
// attention's rescaling); rows of b with every key masked leave pt as is.
func (pt *turboPart) merge(b *turboPart, dv int) {
	for r, mb := range b.m {
		if math.IsInf(float64(mb), -1) {
			continue
		}
		ma := pt.m[r]
		acc, add := pt.acc[r*dv:(r+1)*dv], b.acc[r*dv:(r+1)*dv]
		if math.IsInf(float64(ma), -1) {
			pt.m[r], pt.l[r] = mb, b.l[r]
			copy(acc, add)
			continue
		}
		mx := max(ma, mb)
		ca, cb := float32(math.Exp(float64(ma-mx))), float32(math.Exp(float64(mb-mx)))
		pt.m[r], pt.l[r] = mx, ca*pt.l[r]+cb*b.l[r]
		for j, x := range add {
			acc[j] = ca*acc[j] + cb*x
		}
	}
}

// turboScratch is one attend call's panels, pooled across calls.
type turboScratch struct {
	qa, kp, vp, sc, pa, at, kc, ks, sm []float32
	qpos, mrow                         []int
}

var turboScratchPool sync.Pool

func growF32(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// scratch returns pooled panels for nrp (a multiple of 8) query rows.
func (p *turboPlan) scratch(nrp int) *turboScratch {
	s, _ := turboScratchPool.Get().(*turboScratch)
	if s == nil {
		s = &turboScratch{}
	}
	dvp := (p.dv + 31) &^ 31
	s.qa = growF32(s.qa, nrp*p.dk)
	s.kp = growF32(s.kp, turboKeyBlock*p.dk)
	s.vp = growF32(s.vp, turboKeyBlock*dvp)
	s.sc = growF32(s.sc, nrp*turboKeyBlock)
	s.pa = growF32(s.pa, nrp*turboKeyBlock)
	s.at = growF32(s.at, nrp*dvp)
	s.kc = growF32(s.kc, p.dk)
	s.ks = growF32(s.ks, 2*(p.dk/p.l.Group))
	s.sm = growF32(s.sm, 16*(p.dk/p.l.Group))
	if cap(s.qpos) < nrp {
		s.qpos, s.mrow = make([]int, nrp), make([]int, nrp)
	}
	s.qpos, s.mrow = s.qpos[:nrp], s.mrow[:nrp]
	return s
}

// attend scores rows r0..r1 of (batch bi, KV head kvh) against keys j0..j1.
// Each block of keys is decoded once into float32 panels — keys as
// code·s + m, values in the rotated domain as level·σ — and both products
// (queries × keys, probabilities × values) run on the dense matmul
// micro-kernel, whose every output element is one FMA chain over its
// inner dimension: a row's result does not depend on the other rows of
// the panel, and keys past a row's position (or padding) add exact zeros.
func (p *turboPlan) attend(pt *turboPart, bi, kvh, r0, r1, j0, j1 int) {
	nr, dk, dv, g := r1-r0, p.dk, p.dv, p.l.Group
	nrp, dvp := (nr+7)&^7, (dv+31)&^31
	s := p.scratch(nrp)
	defer turboScratchPool.Put(s)
	// queries in 8-row panels: panel r holds, for each t < dk, rows 8r..8r+7
	qa := s.qa
	clear(qa)
	for r := range nr {
		hqi, li := kvh*p.rep+(r0+r)/p.lq, (r0+r)%p.lq
		pan := qa[r/8*8*dk+r%8:]
		for t, x := range p.q[((bi*p.hq+hqi)*p.lq+li)*dk:][:dk] {
			pan[t*8] = x
		}
		s.qpos[r] = p.tk - p.lq + li // query position in the keys' frame (causal)
		s.mrow[r] = ((bi*p.hq+hqi)*p.lq + li) * p.tk
	}
	at := s.at
	clear(at)
	nb := turboKeyBlock
	kdata, vdata := p.k.buf.data, p.v.buf.data
	kbase := p.k.off + bi*p.k.strides[0] + kvh*p.k.strides[1]
	vbase := p.v.off + bi*p.v.strides[0] + kvh*p.v.strides[1]
	kb, vb := p.l.KeyBytes(), p.l.ValueBytes()
	neg := float32(math.Inf(-1))
	for jb, je := j0, j0; jb < j1; jb = je {
		je = min(jb+nb-(p.start+jb)%nb, j1) // blocks end at positions that are multiples of nb
		n := je - jb
		nkp := (n + 31) &^ 31
		// keys as 32-column panels of Kᵀ, values as 32-column panels of V
		kp, vp := s.kp[:nkp*dk], s.vp[:nkp*dvp]
		if n < nkp {
			clear(kp)
			clear(vp)
		}
		n8 := 0 // keys dequantized eight at a time
		if hasAVX2 && p.l.KeyBits == 8 {
			n8 = n &^ 7
			ks := p.k.strides[2]
			for j8 := 0; j8 < n8; j8 += 8 {
				for i := range 8 {
					meta := kdata[kbase+(jb+j8+i)*ks+dk:]
					for gi := range dk / g {
						s.sm[16*gi+i] = tensor.F16ToF32(uint16(meta[4*gi]) | uint16(meta[4*gi+1])<<8)
						s.sm[16*gi+8+i] = tensor.F16ToF32(uint16(meta[4*gi+2]) | uint16(meta[4*gi+3])<<8)
					}
				}
				turboKeys8Y(&kp[j8/32*32*dk+j8%32], &kdata[kbase+(jb+j8)*ks], ks, &s.sm[0], dk)
			}
		}
		for j := range n {
			krow := kdata[kbase+(jb+j)*p.k.strides[2]:][:kb]
			pan := kp[j/32*32*dk+j%32:]
			if j < n8 {
				// done above
			} else if p.l.KeyBits == 8 { // the default scheme's keys: codes are the bytes
				meta := krow[dk:]
				for gi := range dk / g {
					sg := tensor.F16ToF32(uint16(meta[4*gi]) | uint16(meta[4*gi+1])<<8)
					mg := tensor.F16ToF32(uint16(meta[4*gi+2]) | uint16(meta[4*gi+3])<<8)
					codes, out := krow[gi*g:(gi+1)*g], pan[gi*g*32:]
					for t, c := range codes {
						// rounded apart (no fused multiply-add), as turboKeys8Y does
						out[t*32] = float32(float32(int8(c))*sg) + mg
					}
				}
			} else if p.l.KeyBits == 4 { // two unsigned codes a byte, low nibble first
				meta := krow[dk/2:]
				for gi := range dk / g {
					sg := tensor.F16ToF32(uint16(meta[4*gi]) | uint16(meta[4*gi+1])<<8)
					mg := tensor.F16ToF32(uint16(meta[4*gi+2]) | uint16(meta[4*gi+3])<<8)
					codes, out := krow[gi*g/2:(gi+1)*g/2], pan[gi*g*32:]
					for t, c := range codes {
						out[2*t*32] = float32(c&15)*sg + mg
						out[(2*t+1)*32] = float32(c>>4)*sg + mg
					}
				}
			} else {
				turboKeyCodes(s.kc, s.ks, krow, p.l.KeyBits, g)
				for gi := range dk / g {
					sg, mg := s.ks[2*gi], s.ks[2*gi+1]
					for t := gi * g; t < (gi+1)*g; t++ {
						pan[t*32] = s.kc[t]*sg + mg
					}
				}
			}
			// group gi of the value (32 wide, as a panel) is panel gi's row j
			turboValueRow(vp[j*32:], nkp*32, vdata[vbase+(jb+j)*p.v.strides[2]:][:vb], dv, p.l.ValueBits, g, p.l.Levels)
		}
		sc := s.sc[:nrp*nkp]
		clear(sc)
		for r := 0; r < nrp; r += 8 {
			for c := 0; c < nkp; c += 32 {
				microKernel(dk, qa[r*dk:], kp[c*dk:], sc[r*nkp+c:], nkp)
			}
		}
		pa := s.pa[:nrp*nkp]
		clear(pa)
		for r := range nr {
			srow := sc[r*nkp : r*nkp+n]
			if p.causal || p.mask != nil {
				for j := range srow {
					switch {
					case p.causal && jb+j > s.qpos[r]:
						srow[j] = neg
					case p.mask != nil:
						mv := p.mask[s.mrow[r]+jb+j]
						if p.boolMask {
							if mv == 0 {
								srow[j] = neg
							}
						} else {
							srow[j] += mv
						}
					}
				}
			}
			bmax := neg
			for _, x := range srow {
				bmax = max(bmax, x)
			}
			if math.IsInf(float64(bmax), -1) {
				continue
			}
			arow := at[r*dvp : r*dvp+dv]
			if bmax > pt.m[r] {
				if !math.IsInf(float64(pt.m[r]), -1) {
					c := float32(math.Exp(float64(pt.m[r] - bmax)))
					pt.l[r] *= c
					for i := range arow {
						arow[i] *= c
					}
				}
				pt.m[r] = bmax
			}
			var sum float32
			pan := pa[r/8*8*nkp+r%8:]
			for j, x := range srow {
				if math.IsInf(float64(x), -1) {
					continue
				}
				e := float32(math.Exp(float64(x - pt.m[r])))
				pan[j*8] = e
				sum += e
			}
			pt.l[r] += sum
		}
		for r := 0; r < nrp; r += 8 {
			for c := 0; c < dvp; c += 32 {
				microKernel(nkp, pa[r*nkp:], vp[c*nkp:], at[r*dvp+c:], dvp)
			}
		}
	}
	for r := range nr {
		copy(pt.acc[r*dv:(r+1)*dv], at[r*dvp:r*dvp+dv])
	}
}

// turboUnpack8 reads the 8 b-bit codes held in the b bytes at src.
func turboUnpack8(dst *[8]uint8, src []byte, b int) {
	var w uint64
	for i := range b {
		w |= uint64(src[i]) << (8 * i)
	}
	mask := uint64(1)<<b - 1
	for k := range 8 {
		dst[k] = uint8(w >> (k * b) & mask)
	}
}

// turboKeyCodes reads a key row's codes (as float32 integers) into kc and
// its per-group scale and bias into ks (pairs).
func turboKeyCodes(kc, ks []float32, row []byte, bits, g int) {
	d := len(kc)
	switch bits {
	case 8:
		for i := range kc {
			kc[i] = float32(int8(row[i]))
		}
	case 4:
		for i := 0; i+2 <= d; i += 2 {
			c := row[i/2]
			kc[i], kc[i+1] = float32(c&15), float32(c>>4)
		}
	case 2:
		for i := 0; i+4 <= d; i += 4 {
			c := row[i/4]
			kc[i], kc[i+1], kc[i+2], kc[i+3] = float32(c&3), float32(c>>2&3), float32(c>>4&3), float32(c>>6)
		}
	default:
		var c [8]uint8
		for i := 0; i < d; i += 8 {
			turboUnpack8(&c, row[i/8*bits:], bits)
			for k, v := range c {
				kc[i+k] = float32(v)
			}
		}
	}
	meta := row[d*bits/8:]
	for gi := range d / g {
		ks[2*gi] = tensor.F16ToF32(uint16(meta[4*gi]) | uint16(meta[4*gi+1])<<8)
		ks[2*gi+1] = tensor.F16ToF32(uint16(meta[4*gi+2]) | uint16(meta[4*gi+3])<<8)
	}
}

// turboValueRow decodes a value row of d values in the rotated domain:
// level·σ, by a per-group table of the scaled levels for widths under 5
// bits. Group gi goes to dst[gi·stride:][:g].
func turboValueRow(dst []float32, stride int, row []byte, d, bits, g int, levels []float32) {
	meta := row[d*bits/8:]
	var tab [16]float32 // the scaled levels of widths under 5 bits
	var c [8]uint8
	for gi := range d / g {
		sigma := tensor.F16ToF32(uint16(meta[2*gi]) | uint16(meta[2*gi+1])<<8)
		out := dst[gi*stride:][:g]
		src := row[gi*g*bits/8:]
		switch bits {
		case 3:
			for k, l := range levels[:8] {
				tab[k] = l * sigma
			}
			if hasAVX2 && len(out)%8 == 0 && len(src) > len(out)*3/8 {
				turboValues3Y(&out[0], &src[0], &tab[0], len(out))
				continue
			}
			for i := 0; i+8 <= len(out); i += 8 {
				b := src[i/8*3:]
				w := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
				o := out[i : i+8]
				o[0], o[1], o[2], o[3] = tab[w&7], tab[w>>3&7], tab[w>>6&7], tab[w>>9&7]
				o[4], o[5], o[6], o[7] = tab[w>>12&7], tab[w>>15&7], tab[w>>18&7], tab[w>>21&7]
			}
		case 2:
			for k, l := range levels[:4] {
				tab[k] = l * sigma
			}
			for i := 0; i+4 <= len(out); i += 4 {
				w := src[i/4]
				out[i], out[i+1], out[i+2], out[i+3] = tab[w&3], tab[w>>2&3], tab[w>>4&3], tab[w>>6]
			}
		case 4:
			for k, l := range levels[:16] {
				tab[k] = l * sigma
			}
			for i := 0; i+2 <= len(out); i += 2 {
				w := src[i/2]
				out[i], out[i+1] = tab[w&15], tab[w>>4]
			}
		default:
			for i := 0; i < len(out); i += 8 {
				if bits == 8 {
					copy(c[:], src[i:i+8])
				} else {
					turboUnpack8(&c, src[i/8*bits:], bits)
				}
				for k, v := range c {
					out[i+k] = levels[v] * sigma
				}
			}
		}
	}
}

// turboUnrotate maps a rotated row back: signs·H(y)/√d, H the
// Walsh–Hadamard butterfly.
func turboUnrotate(y, signs []float32) {
	d := len(y)
	for h := 1; h < d; h *= 2 {
		for i := 0; i < d; i += 2 * h {
			for j := i; j < i+h; j++ {
				a, b := y[j], y[j+h]
				y[j], y[j+h] = a+b, a-b
			}
		}
	}
	r := float32(1 / math.Sqrt(float64(d)))
	for i := range y {
		y[i] *= r * signs[i]
	}
}
