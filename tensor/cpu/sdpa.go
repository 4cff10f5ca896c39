package cpu

import (
	"math"
	"sync"

	"github.com/mlxgo/mlxgo/tensor"
)

// Block sizes of the attention kernel: rows of queries that share a K/V
// head are processed together against blocks of keys widened to float32
// once, with an online softmax carrying the running max and sum.
const (
	sdpaQRows = 32 // query rows per block
	sdpaKeys  = 64 // keys per block
)

// sdpaAxpy adds a·x to y.
func sdpaAxpy(a float32, x, y []float32) {
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

// sdpaScale multiplies y by a.
func sdpaScale(a float32, y []float32) {
	for i := range y {
		y[i] *= a
	}
}

var sdpaNegInf = float32(math.Inf(-1))

func sdpaExp(x float32) float32 { return float32(math.Exp(float64(x))) }

// sdpaPlan holds the layout of one attention call.
type sdpaPlan struct {
	b, hq, hkv, g, tq, tk, d, dv int
	scale                        float32
	causal                       bool
	q, k, v                      *impl
	qdt, kdt, vdt                tensor.DType
	mask                         *impl // broadcast to [B, Hq, Tq, Tk], or nil
	maskDT                       tensor.DType
	sinks                        []float32
	qBlocks, kChunks, chunkLen   int
	// partial results per key chunk: running max, sum and unnormalised output
	m, l, acc []float32
}

// rowsPerHead is the number of query rows sharing one K/V head.
func (p *sdpaPlan) rowsPerHead() int { return p.g * p.tq }

// rowHead splits a row index r (t-major: r = t·G + g) of a K/V head into
// its query head and time step.
func (p *sdpaPlan) rowHead(kvh, r int) (hq, t int) { return kvh*p.g + r%p.g, r / p.g }

// SDPA computes attention with float32 scores and softmax. Work is split
// over (batch, kv head, query block) and, when that is too little to keep
// every core busy (decoding one token), also over chunks of keys whose
// partial softmax results are merged at the end. A row with every key
// masked (and no sink) yields zeros.
func (be *Backend) SDPA(q, k, v *tensor.Array, o tensor.SDPAOptions) *tensor.Array {
	qs, ks, vs := q.Shape(), k.Shape(), v.Shape()
	p := &sdpaPlan{b: qs[0], hq: qs[1], tq: qs[2], d: qs[3], hkv: ks[1], tk: ks[2], dv: vs[3]}
	p.g = p.hq / p.hkv
	p.scale = o.Scale
	if p.scale == 0 {
		p.scale = float32(1 / math.Sqrt(float64(p.d)))
	}
	p.causal = o.MaskKind == tensor.MaskCausal
	out, om := be.newArray([]int{p.b, p.hq, p.tq, p.dv}, q.DType())
	if out.Size() == 0 {
		return out
	}
	var owned [3]bool
	p.q, owned[0] = fusedLastDense(q)
	p.k, owned[1] = fusedLastDense(k)
	p.v, owned[2] = fusedLastDense(v)
	defer func() {
		for i, im := range []*impl{p.q, p.k, p.v} {
			if owned[i] {
				im.buf.drop()
			}
		}
	}()
	p.qdt, p.kdt, p.vdt = q.DType(), k.DType(), v.DType()
	if o.MaskKind == tensor.MaskArray && o.Mask != nil {
		mv := be.BroadcastTo(o.Mask, []int{p.b, p.hq, p.tq, p.tk})
		defer mv.Free()
		p.mask, p.maskDT = get(mv), o.Mask.DType()
	}
	if o.Sinks != nil {
		p.sinks = make([]float32, p.hq)
		si, sown := contig(o.Sinks)
		fusedLoad(p.sinks, si.buf.data, si.off, o.Sinks.DType())
		if sown {
			si.buf.drop()
		}
	}

	rows := p.rowsPerHead()
	p.qBlocks = (rows + sdpaQRows - 1) / sdpaQRows
	items := p.b * p.hkv * p.qBlocks
	p.kChunks = 1
	if w := workers(); items < 2*w && p.tk > 512 {
		p.kChunks = min((2*w+items-1)/items, (p.tk+255)/256)
	}
	p.chunkLen = (p.tk + p.kChunks - 1) / p.kChunks
	p.chunkLen = (p.chunkLen + sdpaKeys - 1) / sdpaKeys * sdpaKeys
	p.kChunks = max(1, (p.tk+p.chunkLen-1)/p.chunkLen)

	totalRows := p.b * p.hkv * rows
	p.m = make([]float32, p.kChunks*totalRows)
	p.l = make([]float32, p.kChunks*totalRows)
	p.acc = make([]float32, p.kChunks*totalRows*p.dv)

	parallelFor(items*p.kChunks, 1, func(lo, hi int) {
		s := getSDPAScratch(p)
		defer sdpaPool.Put(s)
		for it := lo; it < hi; it++ {
			p.block(s, it)
		}
	})
	be.sdpaFinish(p, om, q.DType())
	return out
}

// sdpaScratch is one worker's float32 staging area. Every part is
// written before it is read, so a pooled one needs no clearing.
type sdpaScratch struct {
	d, dv      int // the head dims it is sized for
	q, k, v, s []float32
	mrow       []int // mask row offsets
	pos        []int // absolute query positions (causal)
	// blockGemm's packed panels: queries (8-row), keys and values
	// (32-column), probabilities (8-row), and the rows' output tile
	qa, kp, vp, pa, at []float32
}

// sdpaPool recycles the workers' scratch (a few hundred KiB each at head
// dim 256): decode calls SDPA for every layer of every step.
var sdpaPool sync.Pool

// getSDPAScratch returns a scratch from sdpaPool sized for p (and for the
// kernel path in use), or a new one.
func getSDPAScratch(p *sdpaPlan) *sdpaScratch {
	if s, ok := sdpaPool.Get().(*sdpaScratch); ok && s.d == p.d && s.dv == p.dv && (s.qa != nil) == hasAVX512 {
		return s
	}
	return newSDPAScratch(p)
}

func newSDPAScratch(p *sdpaPlan) *sdpaScratch {
	if hasAVX512 {
		dvp := (p.dv + 31) &^ 31
		return &sdpaScratch{
			d:    p.d,
			dv:   p.dv,
			q:    make([]float32, sdpaQRows*p.d),
			k:    make([]float32, sdpaKeys*p.d),
			v:    make([]float32, sdpaKeys*p.dv),
			s:    make([]float32, sdpaQRows*sdpaKeys),
			mrow: make([]int, sdpaQRows),
			pos:  make([]int, sdpaQRows),
			qa:   make([]float32, sdpaQRows*p.d),
			kp:   make([]float32, sdpaKeys*p.d),
			vp:   make([]float32, sdpaKeys*dvp),
			pa:   make([]float32, sdpaQRows*sdpaKeys),
			at:   make([]float32, sdpaQRows*dvp),
		}
	}
	return &sdpaScratch{
		d:    p.d,
		dv:   p.dv,
		q:    make([]float32, sdpaQRows*p.d),
		k:    make([]float32, sdpaKeys*p.d),
		v:    make([]float32, sdpaKeys*p.dv),
		s:    make([]float32, sdpaKeys),
		mrow: make([]int, sdpaQRows),
		pos:  make([]int, sdpaQRows),
	}
}

// block runs one work item: a block of query rows of one (batch, kv head)
// against one chunk of keys, leaving unnormalised partial results.
func (p *sdpaPlan) block(s *sdpaScratch, it int) {
	kc := it % p.kChunks
	it /= p.kChunks
	qb := it % p.qBlocks
	it /= p.qBlocks
	kvh := it % p.hkv
	b := it / p.hkv
	rows := p.rowsPerHead()
	r0 := qb * sdpaQRows
	nr := min(sdpaQRows, rows-r0)
	totalRows := p.b * p.hkv * rows
	gbase := (b*p.hkv+kvh)*rows + r0 // global row of r0
	part := kc * totalRows

	maxPos := 0
	for i := range nr {
		hq, t := p.rowHead(kvh, r0+i)
		qo := p.q.off + b*p.q.strides[0] + hq*p.q.strides[1] + t*p.q.strides[2]
		qr := s.q[i*p.d : (i+1)*p.d]
		fusedLoad(qr, p.q.buf.data, qo, p.qdt)
		sdpaScale(p.scale, qr)
		s.pos[i] = p.tk - p.tq + t
		maxPos = max(maxPos, s.pos[i])
		if p.mask != nil {
			s.mrow[i] = p.mask.off + b*p.mask.strides[0] + hq*p.mask.strides[1] + t*p.mask.strides[2]
		}
		p.m[part+gbase+i] = sdpaNegInf
		p.l[part+gbase+i] = 0
		clear(p.acc[(part+gbase+i)*p.dv : (part+gbase+i+1)*p.dv])
	}
	j0 := kc * p.chunkLen
	j1 := min(p.tk, j0+p.chunkLen)
	if p.causal {
		j1 = min(j1, maxPos+1)
	}
	kbase := p.k.off + b*p.k.strides[0] + kvh*p.k.strides[1]
	vbase := p.v.off + b*p.v.strides[0] + kvh*p.v.strides[1]
	if s.qa != nil {
		p.blockGemm(s, nr, part+gbase, j0, j1, kbase, vbase)
		return
	}
	for jb := j0; jb < j1; jb += sdpaKeys {
		nk := min(sdpaKeys, j1-jb)
		for j := range nk {
			fusedLoad(s.k[j*p.d:(j+1)*p.d], p.k.buf.data, kbase+(jb+j)*p.k.strides[2], p.kdt)
			fusedLoad(s.v[j*p.dv:(j+1)*p.dv], p.v.buf.data, vbase+(jb+j)*p.v.strides[2], p.vdt)
		}
		for i := range nr {
			sc := s.s[:nk]
			qr := s.q[i*p.d : (i+1)*p.d]
			for j := range nk {
				sc[j] = dot32(qr, s.k[j*p.d:(j+1)*p.d])
			}
			bm := p.maskScores(s, i, jb, sc)
			if bm == sdpaNegInf {
				continue
			}
			gi := part + gbase + i
			acc := p.acc[gi*p.dv : (gi+1)*p.dv]
			m := p.raiseMax(gi, bm, acc)
			var l float32
			for j, x := range sc {
				if x == sdpaNegInf {
					continue
				}
				e := sdpaExp(x - m)
				l += e
				sdpaAxpy(e, s.v[j*p.dv:(j+1)*p.dv], acc)
			}
			p.l[gi] += l
		}
	}
}

// blockGemm is the rest of block on the AVX-512 matmul micro-kernel: per
// block of keys, the scores of all nr rows are one small product Q·Kᵀ and
// the probability-weighted values one P·V (float32 products and sums, as
// the portable loops, in another order). Rows past nr and keys past the
// block are zero padding whose probabilities are zero. gi0 is the first
// row's index in p.m, p.l and p.acc.
func (p *sdpaPlan) blockGemm(s *sdpaScratch, nr, gi0, j0, j1, kbase, vbase int) {
	d, dv := p.d, p.dv
	dvp := (dv + 31) &^ 31
	nrp := (nr + 7) &^ 7
	// queries in 8-row panels: panel r holds, for each t < d, rows 8r..8r+7
	clear(s.qa[:nrp*d])
	for i := range nr {
		pan := s.qa[i/8*8*d:]
		for t, x := range s.q[i*d : (i+1)*d] {
			pan[t*8+i%8] = x
		}
	}
	at := s.at[:nrp*dvp]
	clear(at)
	for jb := j0; jb < j1; jb += sdpaKeys {
		nk := min(sdpaKeys, j1-jb)
		nkp := (nk + 31) &^ 31
		// keys as 32-column panels of Kᵀ, values as 32-column panels of V
		clear(s.kp[:nkp*d])
		clear(s.vp[:nkp*dvp])
		for j := range nk {
			kr := s.k[:d]
			fusedLoad(kr, p.k.buf.data, kbase+(jb+j)*p.k.strides[2], p.kdt)
			pan := s.kp[j/32*32*d:]
			for t, x := range kr {
				pan[t*32+j%32] = x
			}
			vr := s.v[:dv]
			fusedLoad(vr, p.v.buf.data, vbase+(jb+j)*p.v.strides[2], p.vdt)
			for c0 := 0; c0 < dv; c0 += 32 {
				copy(s.vp[c0/32*nkp*32+j*32:][:min(32, dv-c0)], vr[c0:])
			}
		}
		sc := s.s[:nrp*nkp]
		clear(sc)
		for r := 0; r < nrp; r += 8 {
			for c := 0; c < nkp; c += 32 {
				sgemm8x32(d, &s.qa[r*d], &s.kp[c*d], &sc[r*nkp+c], nkp)
			}
		}
		clear(s.pa[:nrp*nkp])
		for i := range nr {
			row := sc[i*nkp : i*nkp+nk]
			bm := p.maskScores(s, i, jb, row)
			if bm == sdpaNegInf {
				continue
			}
			gi := gi0 + i
			m := p.raiseMax(gi, bm, at[i*dvp:i*dvp+dv])
			var l float32
			pan := s.pa[i/8*8*nkp:]
			for j, x := range row {
				if x == sdpaNegInf {
					continue
				}
				e := sdpaExp(x - m)
				l += e
				pan[j*8+i%8] = e
			}
			p.l[gi] += l
		}
		for r := 0; r < nrp; r += 8 {
			for c := 0; c < dvp; c += 32 {
				sgemm8x32(nkp, &s.pa[r*nkp], &s.vp[c*nkp], &at[r*dvp+c], dvp)
			}
		}
	}
	for i := range nr {
		copy(p.acc[(gi0+i)*dv:(gi0+i+1)*dv], at[i*dvp:i*dvp+dv])
	}
}

// maskScores masks row i's scores sc of the key block starting at key jb
// (causal positions past the row's, then the array mask) and returns
// their max.
func (p *sdpaPlan) maskScores(s *sdpaScratch, i, jb int, sc []float32) float32 {
	if p.causal {
		for j := max(0, s.pos[i]+1-jb); j < len(sc); j++ {
			sc[j] = sdpaNegInf
		}
	}
	if p.mask != nil {
		p.applyMask(sc, s.mrow[i]+jb*p.mask.strides[3])
	}
	bm := sdpaNegInf
	for _, x := range sc {
		bm = max(bm, x)
	}
	return bm
}

// raiseMax lifts row gi's running max to the block max bm when that is
// larger, rescaling the row's running sum and its output acc to match, and
// returns the row's max.
func (p *sdpaPlan) raiseMax(gi int, bm float32, acc []float32) float32 {
	if m := p.m[gi]; bm > m {
		if m != sdpaNegInf {
			c := sdpaExp(m - bm)
			p.l[gi] *= c
			sdpaScale(c, acc)
		}
		p.m[gi] = bm
	}
	return p.m[gi]
}

// applyMask applies the array mask to a row of scores: bool masks drop
// keys whose entry is false, other masks are added.
func (p *sdpaPlan) applyMask(sc []float32, off int) {
	data, st := p.mask.buf.data, p.mask.strides[3]
	switch p.maskDT {
	case tensor.Bool:
		for j := range sc {
			if data[off+j*st] == 0 {
				sc[j] = sdpaNegInf
			}
		}
	case tensor.Float32:
		f := f32s(data)
		for j := range sc {
			sc[j] += f[off+j*st]
		}
	case tensor.BFloat16:
		h := u16s(data)
		for j := range sc {
			sc[j] += tensor.BF16ToF32(h[off+j*st])
		}
	case tensor.Float16:
		h := u16s(data)
		for j := range sc {
			sc[j] += tensor.F16ToF32(h[off+j*st])
		}
	default:
		for j := range sc {
			sc[j] += float32(indexValue(data, off+j*st, p.maskDT))
		}
	}
}

// sdpaFinish merges the key-chunk partials of every row, folds in the
// sink logit and normalises into the output.
func (be *Backend) sdpaFinish(p *sdpaPlan, om *impl, dt tensor.DType) {
	rows := p.rowsPerHead()
	totalRows := p.b * p.hkv * rows
	parallelFor(totalRows, 64, func(lo, hi int) {
		res := make([]float32, p.dv)
		for gr := lo; gr < hi; gr++ {
			bk := gr / rows
			r := gr % rows
			b, kvh := bk/p.hkv, bk%p.hkv
			hq, t := p.rowHead(kvh, r)
			m := sdpaNegInf
			for c := range p.kChunks {
				m = max(m, p.m[c*totalRows+gr])
			}
			clear(res)
			var l float32
			if m != sdpaNegInf {
				for c := range p.kChunks {
					i := c*totalRows + gr
					if p.m[i] == sdpaNegInf {
						continue
					}
					f := sdpaExp(p.m[i] - m)
					l += p.l[i] * f
					sdpaAxpy(f, p.acc[i*p.dv:(i+1)*p.dv], res)
				}
			}
			if p.sinks != nil {
				sk := p.sinks[hq]
				if sk > m {
					if m != sdpaNegInf {
						f := sdpaExp(m - sk)
						l *= f
						sdpaScale(f, res)
					}
					m = sk
				}
				l += sdpaExp(sk - m)
			}
			if l > 0 {
				sdpaScale(1/l, res)
			}
			fusedStore(om.buf.data, om.off+((b*p.hq+hq)*p.tq+t)*p.dv, res, dt)
		}
	})
}
