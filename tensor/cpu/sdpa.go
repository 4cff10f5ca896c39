package cpu

import (
	"math"
	"sync"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// Attention. Rows of queries that share a K/V head are processed together
// (blocks of sdpaQRows) against blocks of sdpaKeys keys widened to float32
// once, with an online softmax carrying each row's running max and sum.
//
// A row's result does not depend on the other rows of the call (how many
// queries it holds, decode or prefill), nor on the worker count: keys are
// cut into chunks of sdpaChunk at absolute positions (chunk c holds keys
// at positions [c·sdpaChunk, (c+1)·sdpaChunk), key j being at position
// SDPAOptions.KeyStart+j, so a sliding window's keys are cut where a full
// cache's would be), each chunk's partial softmax (max, sum,
// unnormalised output) runs from scratch over its key blocks in order, and
// the partials are folded in chunk order (sdpaFold) — whether the chunks
// ran one after another in one work item or side by side as separate
// items. Within a chunk a row's scores, exponentials and weighted sums
// are its own; keys a row may not see (past its causal position, or
// masked with false or −∞) contribute exact zeros, so a query computed
// alone over its L keys and the same query inside a T-query block over
// more keys give the same bits. (Masks with finite negative values are
// added as they are: keys beyond a row's own are then not absent.)

const (
	sdpaQRows = 32  // query rows per block
	sdpaKeys  = 64  // keys per block
	sdpaChunk = 512 // keys per chunk (a multiple of sdpaKeys)
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

// sdpaKV addresses the key (or value) rows of one attention call as runs
// of segLen consecutive positions: row j of batch entry b and kv head h is
// element segs[b][j/segLen] + h·hs + (j mod segLen)·rs of data. Contiguous
// K/V are one run per batch entry; paged K/V one per pool block. Both go
// through the same code.
type sdpaKV struct {
	data   []byte
	dt     tensor.DType
	hs, rs int
	segLen int
	segs   [][]int
}

// row returns the element offset of key j of (b, h).
func (kv *sdpaKV) row(b, h, j int) int {
	s := j / kv.segLen
	return kv.segs[b][s] + h*kv.hs + (j-s*kv.segLen)*kv.rs
}

// denseKV addresses a [B, H, T, D] array (its last dim dense).
func denseKV(im *impl, dt tensor.DType, b, t int) sdpaKV {
	kv := sdpaKV{data: im.buf.data, dt: dt, hs: im.strides[1], rs: im.strides[2], segLen: max(t, 1), segs: make([][]int, b)}
	for i := range kv.segs {
		kv.segs[i] = []int{im.off + i*im.strides[0]}
	}
	return kv
}

// pagedKV addresses keys 0..n-1 of batch entry 0 held in the blocks of a
// pool [NumBlocks, H, BlockSize, D] listed by table.
func pagedKV(im *impl, dt tensor.DType, table []int32, bs, n int) sdpaKV {
	segs := make([]int, (n+bs-1)/bs)
	for i := range segs {
		segs[i] = im.off + int(table[i])*im.strides[0]
	}
	return sdpaKV{data: im.buf.data, dt: dt, hs: im.strides[1], rs: im.strides[2], segLen: bs, segs: [][]int{segs}}
}

// sdpaPlan holds the layout of one attention call.
type sdpaPlan struct {
	b, hq, hkv, g, tq, tk, d, dv int
	scale                        float32
	causal                       bool
	q                            *impl
	qdt                          tensor.DType
	k, v                         sdpaKV
	mask                         *impl // broadcast to [B, Hq, Tq, Tk], or nil
	maskDT                       tensor.DType
	sinks                        []float32
	qBlocks, chunks              int
	// pad is the position of key 0 within its chunk (KeyStart mod
	// sdpaChunk): chunk and block boundaries fall at key indices j with
	// j+pad a multiple of their size
	pad int
	// split: chunks are separate work items, each leaving its partial in
	// m, l, acc (per chunk, per row); otherwise each item folds its
	// chunks in turn into one partial per row
	split     bool
	m, l, acc []float32
}

// rowsPerHead is the number of query rows sharing one K/V head.
func (p *sdpaPlan) rowsPerHead() int { return p.g * p.tq }

// rowHead splits a row index r (t-major: r = t·G + g) of a K/V head into
// its query head and time step.
func (p *sdpaPlan) rowHead(kvh, r int) (hq, t int) { return kvh*p.g + r%p.g, r / p.g }

// SDPA computes attention with float32 scores and softmax. Work is split
// over (batch, kv head, query block) and, when that is too little to keep
// every core busy (decoding one token), also over the key chunks. A row
// with every key masked (and no sink) yields zeros.
func (be *Backend) SDPA(q, k, v *tensor.Array, o tensor.SDPAOptions) *tensor.Array {
	ks := k.Shape()
	ki, kown := fusedLastDense(k)
	vi, vown := fusedLastDense(v)
	defer func() {
		if kown {
			ki.buf.drop()
		}
		if vown {
			vi.buf.drop()
		}
	}()
	b, tk := ks[0], ks[2]
	return be.sdpa(q, denseKV(ki, k.DType(), b, tk), denseKV(vi, v.DType(), b, tk), ks[1], tk, v.Shape()[3], o)
}

// SDPAPaged is SDPA over keys and values held in the blocks of a pool
// (see tensor.ScaledDotProductAttentionPaged): the same kernel with the
// key rows addressed through the block table, so the result is that of
// SDPA over the gathered arrays, bit for bit.
func (be *Backend) SDPAPaged(q, kPool, vPool *tensor.Array, table []int32, kvLen int, o tensor.SDPAOptions) *tensor.Array {
	ki, kown := fusedLastDense(kPool)
	vi, vown := fusedLastDense(vPool)
	defer func() {
		if kown {
			ki.buf.drop()
		}
		if vown {
			vi.buf.drop()
		}
	}()
	bs := kPool.Dim(2)
	return be.sdpa(q, pagedKV(ki, kPool.DType(), table, bs, kvLen), pagedKV(vi, vPool.DType(), table, bs, kvLen),
		kPool.Dim(1), kvLen, vPool.Dim(3), o)
}

// sdpa runs attention of q against tk keys of hkv heads addressed by k and
// v (value rows of dv elements).
func (be *Backend) sdpa(q *tensor.Array, k, v sdpaKV, hkv, tk, dv int, o tensor.SDPAOptions) *tensor.Array {
	qs := q.Shape()
	p := &sdpaPlan{b: qs[0], hq: qs[1], tq: qs[2], d: qs[3], hkv: hkv, tk: tk, dv: dv, k: k, v: v}
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
	var qown bool
	p.q, qown = fusedLastDense(q)
	if qown {
		defer p.q.buf.drop()
	}
	p.qdt = q.DType()
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
	p.pad = max(o.KeyStart, 0) % sdpaChunk
	p.chunks = max(1, (p.pad+p.tk+sdpaChunk-1)/sdpaChunk)
	p.split = items < 2*workers() && p.chunks > 1
	totalRows := p.b * p.hkv * rows
	parts := 1
	if p.split {
		parts = p.chunks
	}
	// the partials come from a pooled buffer, zeroed as fresh slices would
	// be (decode calls this for every layer of every step, and a few KiB
	// allocated per call cost more than the small attention itself)
	nm := parts * totalRows
	pb := sdpaPartials.get(2*nm + nm*p.dv)
	defer sdpaPartials.put(pb)
	clear(*pb)
	p.m, p.l, p.acc = (*pb)[:nm:nm], (*pb)[nm:2*nm:2*nm], (*pb)[2*nm:]

	parallelFor(items*parts, 1, func(lo, hi int) {
		s := getSDPAScratch(p)
		defer sdpaPool.Put(s)
		if sdpaBlockPrefetch && lo < hi { // no item before it asked for it
			p.prefetch(lo, parts)
		}
		for it := lo; it < hi; it++ {
			if it+1 < hi {
				p.prefetch(it+1, parts)
			}
			p.item(s, it, parts)
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
	// one chunk's partial results per row, folded into the item's
	cm, cl, cacc []float32
	// blockGemm's packed panels: queries (8-row), keys (32-column),
	// values (rows), probabilities (8-row), and the rows' output tile
	qa, kp, vp, pa, at []float32
	e                  []float32 // one row's probabilities
}

// sdpaPartials recycles the per-call partial results (m, l, acc).
var sdpaPartials sizedScratch

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
	s := &sdpaScratch{
		d:    p.d,
		dv:   p.dv,
		q:    make([]float32, sdpaQRows*p.d),
		k:    make([]float32, sdpaKeys*p.d),
		v:    make([]float32, sdpaKeys*p.dv),
		s:    make([]float32, sdpaKeys),
		mrow: make([]int, sdpaQRows),
		pos:  make([]int, sdpaQRows),
		cm:   make([]float32, sdpaQRows),
		cl:   make([]float32, sdpaQRows),
		cacc: make([]float32, sdpaQRows*p.dv),
	}
	if hasAVX512 {
		dvp := (p.dv + 31) &^ 31
		s.s = make([]float32, sdpaQRows*sdpaKeys)
		s.qa = make([]float32, sdpaQRows*p.d)
		s.kp = make([]float32, sdpaKeys*p.d)
		s.vp = make([]float32, sdpaKeys*dvp)
		s.pa = make([]float32, sdpaQRows*sdpaKeys)
		s.e = make([]float32, sdpaKeys)
		s.at = make([]float32, sdpaQRows*dvp)
	}
	return s
}

// item runs one work item: a block of query rows of one (batch, kv head)
// against one key chunk (split: item it of parts per block) or all of
// them in turn.
func (p *sdpaPlan) item(s *sdpaScratch, it, parts int) {
	kc := it % parts
	it /= parts
	qb := it % p.qBlocks
	it /= p.qBlocks
	kvh := it % p.hkv
	b := it / p.hkv
	rows := p.rowsPerHead()
	r0 := qb * sdpaQRows
	nr := min(sdpaQRows, rows-r0)
	totalRows := p.b * p.hkv * rows
	gbase := (b*p.hkv+kvh)*rows + r0 // global row of r0

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
	}
	if p.split {
		g0 := kc*totalRows + gbase
		p.chunk(s, b, kvh, nr, kc, maxPos, p.m[g0:g0+nr], p.l[g0:g0+nr], p.acc[g0*p.dv:(g0+nr)*p.dv])
		return
	}
	m, l := p.m[gbase:gbase+nr], p.l[gbase:gbase+nr]
	acc := p.acc[gbase*p.dv : (gbase+nr)*p.dv]
	for i := range m {
		m[i], l[i] = sdpaNegInf, 0
	}
	for c := range p.chunks {
		if p.causal && c*sdpaChunk-p.pad > maxPos {
			break // every row's keys end before this chunk
		}
		cm, cl, cacc := s.cm[:nr], s.cl[:nr], s.cacc[:nr*p.dv]
		p.chunk(s, b, kvh, nr, c, maxPos, cm, cl, cacc)
		for i := range nr {
			sdpaFold(&m[i], &l[i], acc[i*p.dv:(i+1)*p.dv], cm[i], cl[i], cacc[i*p.dv:(i+1)*p.dv])
		}
	}
}

// prefetch asks for the keys and values work item it reads to be brought
// into cache (a hint, while the item before it computes: a batched decode
// reads each row's cache once per layer, from memory).
func (p *sdpaPlan) prefetch(it, parts int) {
	if !hasAVX512 {
		return
	}
	kc := it % parts
	it /= parts * p.qBlocks
	kvh, b := it%p.hkv, it/p.hkv
	j0, j1 := 0, p.tk
	if p.split {
		j0, j1 = max(0, kc*sdpaChunk-p.pad), min(p.tk, (kc+1)*sdpaChunk-p.pad)
	}
	prefetchRows(&p.k, b, kvh, j0, j1, p.d)
	prefetchRows(&p.v, b, kvh, j0, j1, p.dv)
}

// sdpaBlockPrefetch has blockGemm ask for each block's values and the
// next block's keys as the block starts, on top of the item before's
// request for the whole item (a burst that alone did not speed a batched
// step up), and a worker's first item asked for as it starts
// (BenchmarkSDPADecodeDRAM measures them: benchmarks turn it off).
var sdpaBlockPrefetch = true

// prefetchRows asks for rows j0..j1 of (b, h) of kv, width elements each,
// to be brought into L2 (prefetchL2), one run per segment.
func prefetchRows(kv *sdpaKV, b, h, j0, j1, width int) {
	es := kv.dt.Size()
	for j := j0; j < j1; {
		seg := j / kv.segLen
		n := min(j1, (seg+1)*kv.segLen) - j
		o := kv.row(b, h, j)
		if kv.rs > 0 && n > 0 {
			prefetchL2(&kv.data[o*es], ((n-1)*kv.rs+width)*es)
		}
		j += n
	}
}

// blockLen is the number of keys of the block starting at key jb, before
// j1: blocks end where the key's position within its chunk (j+pad) is a
// multiple of sdpaKeys, so the first one may be short.
func (p *sdpaPlan) blockLen(jb, j1 int) int {
	end := ((jb+p.pad)/sdpaKeys+1)*sdpaKeys - p.pad
	return min(end, j1) - jb
}

// sdpaFold merges a chunk's partial (max m, sum l, output a) into a row's
// running one (M, L, acc), in the one order every path uses.
func sdpaFold(M, L *float32, acc []float32, m, l float32, a []float32) {
	if m == sdpaNegInf {
		return // the chunk had no key for this row
	}
	if *M == sdpaNegInf {
		*M, *L = m, l
		copy(acc, a)
		return
	}
	nm := max(*M, m)
	f0, f1 := sdpaExp(*M-nm), sdpaExp(m-nm)
	*L = *L*f0 + l*f1
	a = a[:len(acc)]
	for i := range acc {
		acc[i] = acc[i]*f0 + a[i]*f1
	}
	*M = nm
}

// chunk computes the partial softmax of the item's nr rows over key chunk
// c into m, l and acc (nr rows of dv), from scratch.
func (p *sdpaPlan) chunk(s *sdpaScratch, b, kvh, nr, c, maxPos int, m, l, acc []float32) {
	for i := range nr {
		m[i], l[i] = sdpaNegInf, 0
	}
	j0 := max(0, c*sdpaChunk-p.pad)
	j1 := min(p.tk, (c+1)*sdpaChunk-p.pad)
	if p.causal {
		j1 = min(j1, maxPos+1)
	}
	if s.qa != nil {
		p.blockGemm(s, b, kvh, nr, j0, j1, m, l, acc)
		return
	}
	clear(acc)
	for jb, nk := j0, 0; jb < j1; jb += nk {
		nk = p.blockLen(jb, j1)
		for j := range nk {
			fusedLoad(s.k[j*p.d:(j+1)*p.d], p.k.data, p.k.row(b, kvh, jb+j), p.k.dt)
			fusedLoad(s.v[j*p.dv:(j+1)*p.dv], p.v.data, p.v.row(b, kvh, jb+j), p.v.dt)
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
			ar := acc[i*p.dv : (i+1)*p.dv]
			mi := raiseMax(&m[i], &l[i], bm, ar)
			var li float32
			for j, x := range sc {
				if x == sdpaNegInf {
					continue
				}
				e := sdpaExp(x - mi)
				li += e
				sdpaAxpy(e, s.v[j*p.dv:(j+1)*p.dv], ar)
			}
			l[i] += li
		}
	}
}

// blockGemm is the rest of chunk on the AVX-512 matmul micro-kernels: per
// block of keys, the scores of all nr rows are one small product Q·Kᵀ and
// the probability-weighted values one P·V (float32 products and sums, as
// the portable loops, in another order; each row's values are its own, and
// a row gets the same bits in a 4-row kernel as in an 8-row one). Score
// columns past the block are computed from stale panel entries and never
// read; the P·V sums run over the block's own keys only, the probabilities
// of keys a row may not see being exact zeros.
func (p *sdpaPlan) blockGemm(s *sdpaScratch, b, kvh, nr, j0, j1 int, m, l, acc []float32) {
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
	for jb, nk := j0, 0; jb < j1; jb += nk {
		nk = p.blockLen(jb, j1)
		nkp := (nk + 31) &^ 31
		// this block's values are read after its keys are packed and scored,
		// the next block's keys after that: both come in meanwhile
		if sdpaBlockPrefetch {
			prefetchRows(&p.v, b, kvh, jb, jb+nk, p.dv)
			if n2 := jb + nk; n2 < j1 {
				prefetchRows(&p.k, b, kvh, n2, n2+p.blockLen(n2, j1), p.d)
			}
		}
		// keys as 32-column panels of Kᵀ, values as rows of dvp
		p.packKeys(s.kp, s.k[:d], b, kvh, jb, nk)
		// bfloat16 values in one run of rows are read in place, widened
		// as the kernel loads them; others are widened into vp first
		vh := p.v.dt == tensor.BFloat16 && dv == dvp && jb/p.v.segLen == (jb+nk-1)/p.v.segLen
		var vrow []uint16
		if vh {
			o := p.v.row(b, kvh, jb)
			vrow = u16s(p.v.data[2*o:])
		} else {
			p.loadValues(s.vp, b, kvh, jb, nk, dvp)
		}
		sc := s.s[:nrp*nkp]
		clear(sc)
		var live uint32 // rows with a key in this block
		for r := 0; r < nr; r += 8 {
			for c := 0; c < nkp; c += 32 {
				sgemmRows(nr-r, d, &s.qa[r*d], &s.kp[c*d], 32, &sc[r*nkp+c], nkp)
			}
		}
		for i := range nr {
			row := sc[i*nkp : i*nkp+nk]
			pan := s.pa[i/8*8*nkp:]
			bm := p.maskScores(s, i, jb, row)
			if bm == sdpaNegInf {
				for j := range nk {
					pan[j*8+i%8] = 0
				}
				continue
			}
			live |= 1 << i
			mi := raiseMax(&m[i], &l[i], bm, at[i*dvp:i*dvp+dv])
			e := s.e[:nk]
			ewExpOnly(e, row, mi) // a key masked to −∞ gets exactly 0
			for j, x := range e {
				pan[j*8+i%8] = x
			}
		}
		// each live row adds its block's probabilities, summed from 0 in
		// key order, to its running sum: eight rows at once down a panel
		for r := 0; r < nr; r += 8 {
			var sums [8]float32
			pan := s.pa[r*nkp:]
			if hasAVX512 {
				sdpaPanelSums(&pan[0], nk, &sums)
			} else {
				for j := range nk {
					for i := range 8 {
						sums[i] += pan[j*8+i]
					}
				}
			}
			for i := r; i < min(r+8, nr); i++ {
				if live&(1<<i) != 0 {
					l[i] += sums[i-r]
				}
			}
		}
		for r := 0; r < nr; r += 8 {
			for c := 0; c < dvp; c += 32 {
				if vh {
					sgemmRowsBH(nr-r, nk, &s.pa[r*nkp], &vrow[c], p.v.rs, &at[r*dvp+c], dvp)
				} else {
					sgemmRows(nr-r, nk, &s.pa[r*nkp], &s.vp[c], dvp, &at[r*dvp+c], dvp)
				}
			}
		}
	}
	for i := range nr {
		copy(acc[i*dv:(i+1)*dv], at[i*dvp:i*dvp+dv])
	}
}

// sgemmRows runs the 4-row kernel when a panel has at most 4 live rows
// and the 8-row one otherwise (the same bits per row either way).
func sgemmRows(n, kc int, a, b *float32, ldb int, c *float32, ldc int) {
	if n <= 4 {
		sgemm4x32B(kc, a, b, ldb, c, ldc)
		return
	}
	sgemm8x32B(kc, a, b, ldb, c, ldc)
}

// sgemmRowsBH is sgemmRows with B in bfloat16 (the same bits as on B
// widened).
func sgemmRowsBH(n, kc int, a *float32, b *uint16, ldb int, c *float32, ldc int) {
	if n <= 4 {
		sgemm4x32BH(kc, a, b, ldb, c, ldc)
		return
	}
	sgemm8x32BH(kc, a, b, ldb, c, ldc)
}

// loadValues widens the value rows of keys jb..jb+nk-1 of (b, kvh) into
// vp, rows dvp floats apart: a run of dense rows within one segment in one
// conversion, otherwise row by row.
func (p *sdpaPlan) loadValues(vp []float32, b, kvh, jb, nk, dvp int) {
	dv := p.dv
	for j := 0; j < nk; {
		o := p.v.row(b, kvh, jb+j)
		if dv == dvp && p.v.rs == dv {
			seg := (jb + j) / p.v.segLen
			run := min(nk-j, (seg+1)*p.v.segLen-(jb+j))
			fusedLoad(vp[j*dv:(j+run)*dv], p.v.data, o, p.v.dt)
			j += run
			continue
		}
		fusedLoad(vp[j*dvp:j*dvp+dv], p.v.data, o, p.v.dt)
		j++
	}
}

// packKeys writes keys jb..jb+nk-1 of (b, kvh) into kp as 32-column
// panels of Kᵀ (panel c holds, for each t < d, keys 32c..32c+31): runs of
// 16 keys at one stride (within a segment) are transposed 16×16 in
// registers, the rest copied one by one through kr (d floats of
// scratch). The values are the keys' exactly, whichever way they are
// moved.
func (p *sdpaPlan) packKeys(kp, kr []float32, b, kvh, jb, nk int) {
	d := p.d
	kind, es := packKind(p.k.dt), p.k.dt.Size()
	j := 0
	if hasAVX512 && kind >= 0 && d >= 16 {
		for ; j+16 <= nk; j += 16 {
			first, last := jb+j, jb+j+15
			if first/p.k.segLen != last/p.k.segLen || p.k.rs <= 0 {
				break // a run across segments: one by one from here
			}
			pan := kp[j/32*32*d+j%32:]
			o := p.k.row(b, kvh, first)
			packT16(&pan[0], 4*32, unsafe.Pointer(&p.k.data[o*es]), p.k.rs*es, d/16, kind)
			for t := d &^ 15; t < d; t++ {
				for jj := range 16 {
					pan[t*32+jj] = keyAt(&p.k, b, kvh, first+jj, t)
				}
			}
		}
	}
	for ; j < nk; j++ {
		fusedLoad(kr, p.k.data, p.k.row(b, kvh, jb+j), p.k.dt)
		pan := kp[j/32*32*d:]
		for t, x := range kr {
			pan[t*32+j%32] = x
		}
	}
}

// keyAt reads element t of key j of (b, h) as float32.
func keyAt(kv *sdpaKV, b, h, j, t int) float32 {
	var x [1]float32
	fusedLoad(x[:], kv.data, kv.row(b, h, j)+t, kv.dt)
	return x[0]
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
	return sdpaMax(sc)
}

// sdpaMax is the largest of sc (−∞ when empty), in four independent
// chains: max orders −0 below +0 and lets NaN win, so any grouping gives
// the same result.
func sdpaMax(sc []float32) float32 {
	if hasAVX512 && len(sc) > 0 {
		if m, ok := sdpaMaxAVX512(&sc[0], len(sc)); ok {
			return m
		}
	}
	m0, m1, m2, m3 := sdpaNegInf, sdpaNegInf, sdpaNegInf, sdpaNegInf
	j := 0
	for ; j+4 <= len(sc); j += 4 {
		m0, m1, m2, m3 = max(m0, sc[j]), max(m1, sc[j+1]), max(m2, sc[j+2]), max(m3, sc[j+3])
	}
	for ; j < len(sc); j++ {
		m0 = max(m0, sc[j])
	}
	return max(max(m0, m1), max(m2, m3))
}

// raiseMax lifts a row's running max *m to the block max bm when that is
// larger, rescaling its running sum *l and its output acc to match, and
// returns the row's max.
func raiseMax(m, l *float32, bm float32, acc []float32) float32 {
	if bm > *m {
		if *m != sdpaNegInf {
			c := sdpaExp(*m - bm)
			*l *= c
			sdpaScale(c, acc)
		}
		*m = bm
	}
	return *m
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
		if st == 1 {
			// the same additions, the widening a block at a time (vectorized)
			var buf [256]float32
			for j0 := 0; j0 < len(sc); j0 += len(buf) {
				n := min(len(buf), len(sc)-j0)
				loadF16(buf[:n], h[off+j0:off+j0+n])
				for j, v := range buf[:n] {
					sc[j0+j] += v
				}
			}
			return
		}
		for j := range sc {
			sc[j] += tensor.F16ToF32(h[off+j*st])
		}
	default:
		for j := range sc {
			sc[j] += float32(indexValue(data, off+j*st, p.maskDT))
		}
	}
}

// sdpaFinish folds the key-chunk partials of every row (split plans),
// folds in the sink logit and normalises into the output.
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
			m, l := p.m[gr], p.l[gr]
			copy(res, p.acc[gr*p.dv:(gr+1)*p.dv])
			if p.split {
				m, l = sdpaNegInf, 0
				for c := range p.chunks {
					i := c*totalRows + gr
					sdpaFold(&m, &l, res, p.m[i], p.l[i], p.acc[i*p.dv:(i+1)*p.dv])
				}
			}
			if m == sdpaNegInf {
				clear(res)
				l = 0
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
