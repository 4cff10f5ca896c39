package cpu

import (
	"fmt"
	"math"

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
// codes read in place. Scores come from the integer key codes (per group:
// s·Σ q·code + m·Σ q), values are summed in the rotated domain as
// level·σ and the output is transformed back (signs·H/√d) once per query
// row. Scores and softmax are float32; a row with every key masked yields
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
		parallelFor(len(parts), 1, func(lo, hi int) {
			for it := lo; it < hi; it++ {
				h, sp := it/spans, it%spans
				r0, r1 := rowsOf(h)
				j0, j1 := spanKeys(sp)
				parts[it] = p.attend(h/(hkv*rowBlocks), h/rowBlocks%hkv, r0, r1, j0, j1)
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
				acc := p.attend(bi, kvh, r0, r1, j0, j1)
				for sp := 1; sp < spans; sp++ {
					j0, j1 := spanKeys(sp)
					pt := p.attend(bi, kvh, r0, r1, j0, j1)
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

// attend scores rows r0..r1 of (batch bi, KV head kvh) against keys j0..j1.
func (p *turboPlan) attend(bi, kvh, r0, r1, j0, j1 int) turboPart {
	nr, dk, dv, g := r1-r0, p.dk, p.dv, p.l.Group
	ng := dk / g
	pt := turboPart{m: make([]float32, nr), l: make([]float32, nr), acc: make([]float32, nr*dv)}
	for r := range pt.m {
		pt.m[r] = float32(math.Inf(-1))
	}
	// the rows' queries and their per-group sums (the bias term)
	qs := make([]float32, nr*dk)
	qsum := make([]float32, nr*ng)
	qpos := make([]int, nr) // query position in the keys' frame (causal)
	mrow := make([]int, nr) // offset of the row's mask
	for r := range nr {
		hqi, li := kvh*p.rep+(r0+r)/p.lq, (r0+r)%p.lq
		copy(qs[r*dk:(r+1)*dk], p.q[((bi*p.hq+hqi)*p.lq+li)*dk:])
		for gi := range ng {
			var s float32
			for _, a := range qs[r*dk+gi*g : r*dk+(gi+1)*g] {
				s += a
			}
			qsum[r*ng+gi] = s
		}
		qpos[r] = p.tk - p.lq + li
		mrow[r] = ((bi*p.hq+hqi)*p.lq + li) * p.tk
	}
	kc := make([]float32, dk)
	ks := make([]float32, 2*ng)
	vr := make([]float32, dv)
	nb := turboKeyBlock
	sc := make([]float32, nr*nb)
	kdata, vdata := p.k.buf.data, p.v.buf.data
	kbase := p.k.off + bi*p.k.strides[0] + kvh*p.k.strides[1]
	vbase := p.v.off + bi*p.v.strides[0] + kvh*p.v.strides[1]
	kb, vb := p.l.KeyBytes(), p.l.ValueBytes()
	neg := float32(math.Inf(-1))
	for jb, je := j0, j0; jb < j1; jb = je {
		je = min(jb+nb-(p.start+jb)%nb, j1) // blocks end at positions that are multiples of nb
		n := je - jb
		for j := jb; j < je; j++ {
			row := kdata[kbase+j*p.k.strides[2]:][:kb]
			turboKeyCodes(kc, ks, row, p.l.KeyBits, g)
			r := 0
			for ; r+4 <= nr; r += 4 { // four rows share each key load
				var s0, s1, s2, s3 float32
				for gi := range ng {
					kg := kc[gi*g : (gi+1)*g]
					o := gi * g
					d0, d1, d2, d3 := turboDot4(qs[r*dk+o:][:g], qs[(r+1)*dk+o:][:g], qs[(r+2)*dk+o:][:g], qs[(r+3)*dk+o:][:g], kg)
					sg, mg := ks[2*gi], ks[2*gi+1]
					s0 += sg*d0 + mg*qsum[r*ng+gi]
					s1 += sg*d1 + mg*qsum[(r+1)*ng+gi]
					s2 += sg*d2 + mg*qsum[(r+2)*ng+gi]
					s3 += sg*d3 + mg*qsum[(r+3)*ng+gi]
				}
				sc[r*nb+j-jb], sc[(r+1)*nb+j-jb], sc[(r+2)*nb+j-jb], sc[(r+3)*nb+j-jb] = s0, s1, s2, s3
			}
			for ; r < nr; r++ {
				var s float32
				qr := qs[r*dk : (r+1)*dk]
				for gi := range ng {
					s += ks[2*gi]*turboDot(qr[gi*g:(gi+1)*g], kc[gi*g:(gi+1)*g]) + ks[2*gi+1]*qsum[r*ng+gi]
				}
				sc[r*nb+j-jb] = s
			}
			if !p.causal && p.mask == nil {
				continue
			}
			for r := range nr {
				switch {
				case p.causal && j > qpos[r]:
					sc[r*nb+j-jb] = neg
				case p.mask != nil:
					mv := p.mask[mrow[r]+j]
					if p.boolMask {
						if mv == 0 {
							sc[r*nb+j-jb] = neg
						}
					} else {
						sc[r*nb+j-jb] += mv
					}
				}
			}
		}
		// fold the block into each row's running softmax
		for r := range nr {
			srow := sc[r*nb : r*nb+n]
			bmax := neg
			for _, s := range srow {
				bmax = max(bmax, s)
			}
			if math.IsInf(float64(bmax), -1) {
				for i := range srow {
					srow[i] = 0
				}
				continue
			}
			if bmax > pt.m[r] {
				if !math.IsInf(float64(pt.m[r]), -1) {
					c := float32(math.Exp(float64(pt.m[r] - bmax)))
					pt.l[r] *= c
					for i := range pt.acc[r*dv : (r+1)*dv] {
						pt.acc[r*dv+i] *= c
					}
				}
				pt.m[r] = bmax
			}
			var sum float32
			for i, s := range srow {
				e := float32(0)
				if !math.IsInf(float64(s), -1) {
					e = float32(math.Exp(float64(s - pt.m[r])))
				}
				srow[i] = e
				sum += e
			}
			pt.l[r] += sum
		}
		for j := jb; j < je; j++ {
			row := vdata[vbase+j*p.v.strides[2]:][:vb]
			turboValueRow(vr, row, p.l.ValueBits, g, p.l.Levels)
			r := 0
			for ; r+4 <= nr; r += 4 {
				turboAxpy4(sc[r*nb+j-jb], sc[(r+1)*nb+j-jb], sc[(r+2)*nb+j-jb], sc[(r+3)*nb+j-jb], vr,
					pt.acc[r*dv:(r+1)*dv], pt.acc[(r+1)*dv:(r+2)*dv], pt.acc[(r+2)*dv:(r+3)*dv], pt.acc[(r+3)*dv:(r+4)*dv])
			}
			for ; r < nr; r++ {
				if w := sc[r*nb+j-jb]; w != 0 {
					turboAxpy(w, vr, pt.acc[r*dv:(r+1)*dv])
				}
			}
		}
	}
	return pt
}

// turboAxpy adds a·x to y.
func turboAxpy(a float32, x, y []float32) {
	x = x[:len(y)]
	i := 0
	for ; i+4 <= len(y); i += 4 {
		y[i] += a * x[i]
		y[i+1] += a * x[i+1]
		y[i+2] += a * x[i+2]
		y[i+3] += a * x[i+3]
	}
	for ; i < len(y); i++ {
		y[i] += a * x[i]
	}
}

// turboDot4 is the dot products of four rows with k.
func turboDot4(a0, a1, a2, a3, k []float32) (s0, s1, s2, s3 float32) {
	n := len(k)
	a0, a1, a2, a3 = a0[:n], a1[:n], a2[:n], a3[:n]
	for i, x := range k {
		s0 += a0[i] * x
		s1 += a1[i] * x
		s2 += a2[i] * x
		s3 += a3[i] * x
	}
	return
}

// turboAxpy4 adds w0·x … w3·x to four rows.
func turboAxpy4(w0, w1, w2, w3 float32, x, y0, y1, y2, y3 []float32) {
	n := len(x)
	y0, y1, y2, y3 = y0[:n], y1[:n], y2[:n], y3[:n]
	for i, v := range x {
		y0[i] += w0 * v
		y1[i] += w1 * v
		y2[i] += w2 * v
		y3[i] += w3 * v
	}
}

// turboDot is Σ a·b, summed in turboDot4's order: a row scored alone
// gets the bits it gets scored in a group of four.
func turboDot(a, b []float32) float32 {
	var s float32
	b = b[:len(a)]
	for i, x := range b {
		s += a[i] * x
	}
	return s
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

// turboValueRow decodes a value row in the rotated domain: level·σ, by a
// per-group table of the scaled levels for widths under 5 bits.
func turboValueRow(vr []float32, row []byte, bits, g int, levels []float32) {
	d := len(vr)
	meta := row[d*bits/8:]
	var tab [256]float32
	var c [8]uint8
	for gi := range d / g {
		sigma := tensor.F16ToF32(uint16(meta[2*gi]) | uint16(meta[2*gi+1])<<8)
		out := vr[gi*g : (gi+1)*g]
		src := row[gi*g*bits/8:]
		switch bits {
		case 3:
			for k, l := range levels[:8] {
				tab[k] = l * sigma
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
