package cpu

import (
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// Quantized matmul: the weight stays packed; each worker unpacks one group
// at a time and uses it at once, so a decode step reads every weight byte
// exactly once.

// qmat is one quantized matrix of rows × cols values (cols along the packed
// axis), with its scales and biases as raw elements of sdt.
type qmat struct {
	words      []uint32
	sc, bi     []byte
	sdt        tensor.DType
	rows, cols int
	gs, bits   int
	// pg, when set, places the rows in the blocks of a paged KV pool
	// (words, sc and bi are then the whole pool's).
	pg *qpage
	// owner is the buffer words live in when that is the weight's own
	// storage (not a temporary copy): derived layouts are kept with it.
	owner *buffer
}

// qpage maps the rows of one KV head's matrix to a paged pool: row r
// (a position) is slot r mod bs of block table[r/bs], and the pool holds
// heads matrices of bs rows per block.
type qpage struct {
	table       []int32
	bs          int
	heads, head int
}

// phys returns the storage row of row r.
func (m *qmat) phys(r int) int {
	if m.pg == nil {
		return r
	}
	p := m.pg
	return (int(p.table[r/p.bs])*p.heads+p.head)*p.bs + r%p.bs
}

// run returns how many rows from r on are stored one after another (all
// of them for a plain matrix, the rest of r's block for a paged one).
func (m *qmat) run(r int) int {
	if m.pg == nil {
		return m.rows - r
	}
	return m.pg.bs - r%m.pg.bs
}

// wordsPerRow and groups describe one row of m.
func (m *qmat) wordsPerRow() int { return m.cols * m.bits / 32 }
func (m *qmat) groups() int      { return m.cols / m.gs }

// dims returns the inner (summed) and outer lengths of a product with m:
// x @ mᵀ sums over m's columns, x @ m over its rows.
func (m *qmat) dims(transpose bool) (inner, outer int) {
	if transpose {
		return m.cols, m.rows
	}
	return m.rows, m.cols
}

// rowScales converts the scales and biases of rows [lo, hi) to float32.
func (m *qmat) rowScales(s, b []float32, lo, hi int) {
	ng, es := m.groups(), m.sdt.Size()
	lo, hi = m.phys(lo), m.phys(lo)+hi-lo // one run (see run)
	toF32(s[:(hi-lo)*ng], m.sc[lo*ng*es:hi*ng*es], m.sdt)
	toF32(b[:(hi-lo)*ng], m.bi[lo*ng*es:hi*ng*es], m.sdt)
}

// prefetchScales hints rows [lo, hi)'s scales and biases into L2, so that
// a later rowScales of them need not wait on memory (plain matrices only).
func (m *qmat) prefetchScales(lo, hi int) {
	if m.pg != nil || hi <= lo {
		return
	}
	n := m.groups() * m.sdt.Size()
	prefetchL2(&m.sc[lo*n], (hi-lo)*n)
	prefetchL2(&m.bi[lo*n], (hi-lo)*n)
}

// sub returns matrix e of a stack of matrices laid out back to back.
func (m qmat) sub(e int) qmat {
	ng, wpr, es := m.groups(), m.wordsPerRow(), m.sdt.Size()
	m.words = m.words[e*m.rows*wpr : (e+1)*m.rows*wpr]
	m.sc = m.sc[e*m.rows*ng*es : (e+1)*m.rows*ng*es]
	m.bi = m.bi[e*m.rows*ng*es : (e+1)*m.rows*ng*es]
	return m
}

// qOperands holds the dense storage behind a quantized matmul's weight.
type qOperands struct {
	m     qmat // all matrices stacked (rows = rows of one matrix)
	owned []*impl
}

func loadQ(wq, scales, biases *tensor.Array, groupSize, bits int) *qOperands {
	o := &qOperands{}
	var owner *buffer
	dense := func(a *tensor.Array) []byte {
		c, owned := contig(a)
		if owned {
			o.owned = append(o.owned, c)
		} else if a == wq {
			owner = c.buf
		}
		return bytesOf(c, a.Size(), a.DType().Size())
	}
	ws := wq.Shape()
	o.m = qmat{
		words: u32s(dense(wq)),
		sc:    dense(scales),
		bi:    dense(biases),
		sdt:   scales.DType(),
		rows:  ws[len(ws)-2],
		cols:  ws[len(ws)-1] * 32 / bits,
		gs:    groupSize,
		bits:  bits,
	}
	o.m.owner = owner
	return o
}

func (o *qOperands) release() {
	for _, c := range o.owned {
		c.buf.drop()
	}
}

// QuantizedMatmul computes x @ dequant(w)ᵀ (transpose) or x @ dequant(w),
// broadcasting batch dims of x against the weight's leading dims.
func (be *Backend) QuantizedMatmul(x, wq, scales, biases *tensor.Array, transpose bool, groupSize, bits int, shape []int) *tensor.Array {
	q := loadQ(wq, scales, biases, groupSize, bits)
	defer q.release()
	inner, outer := q.m.dims(transpose)
	out, oi := be.newArray(shape, x.DType())
	if out.Size() == 0 {
		return out
	}
	xc, owned := contig(x)
	if owned {
		defer xc.buf.drop()
	}
	xb := bytesOf(xc, x.Size(), x.DType().Size())
	if wq.NDim() == 2 {
		rows := x.Size() / inner
		qmmRun(oi.buf.data, xb, x.DType(), rows, q.m, transpose)
		return out
	}
	// batched weights: out batch index → x matrix and w matrix by broadcasting
	batch := shape[:len(shape)-2]
	m := shape[len(shape)-2]
	var xBatch []int
	if x.NDim() >= 2 {
		xBatch = x.Shape()[:x.NDim()-2]
	}
	wBatch := wq.Shape()[:wq.NDim()-2]
	nb := numel(batch)
	es := x.DType().Size() // x and the output share the dtype
	for bi := range nb {
		xi := bcastIndex(bi, batch, xBatch)
		wi := bcastIndex(bi, batch, wBatch)
		qmmRun(oi.buf.data[bi*m*outer*es:(bi+1)*m*outer*es], xb[xi*m*inner*es:(xi+1)*m*inner*es],
			x.DType(), m, q.m.sub(wi), transpose)
	}
	return out
}

// bcastIndex maps flat index i of shape to the flat index of the
// right-aligned, broadcast-compatible src shape.
func bcastIndex(i int, shape, src []int) int {
	idx, mul := 0, 1
	for d := len(shape) - 1; d >= 0; d-- {
		c := i % shape[d]
		i /= shape[d]
		sd := d - (len(shape) - len(src))
		if sd < 0 {
			continue
		}
		if src[sd] != 1 {
			idx += c * mul
		}
		mul *= src[sd]
	}
	return idx
}

// GatherQMM multiplies each index entry's x matrix (lhs) by its expert's
// weight (rhs).
func (be *Backend) GatherQMM(x, wq, scales, biases, lhsIndices, rhsIndices *tensor.Array, transpose bool, groupSize, bits int, shape []int) *tensor.Array {
	q := loadQ(wq, scales, biases, groupSize, bits)
	defer q.release()
	inner, outer := q.m.dims(transpose)
	out, oi := be.newArray(shape, x.DType())
	if out.Size() == 0 {
		return out
	}
	idxShape := shape[:len(shape)-2]
	m := shape[len(shape)-2]
	nExperts := wq.Size() / max(q.m.rows*q.m.wordsPerRow(), 1)
	xMats := x.Size() / max(m*inner, 1)
	rhs := be.indexValues(rhsIndices, idxShape)
	var lhs []int64
	if lhsIndices != nil {
		lhs = be.indexValues(lhsIndices, idxShape)
	}
	xc, owned := contig(x)
	if owned {
		defer xc.buf.drop()
	}
	es := x.DType().Size()
	xb := bytesOf(xc, x.Size(), es)
	xBatch := x.Shape()[:x.NDim()-2]
	for i := range rhs {
		e := int(rhs[i])
		var xi int
		if lhs != nil {
			xi = int(lhs[i])
		} else {
			xi = bcastIndex(i, idxShape, xBatch)
		}
		if e < 0 || e >= nExperts || xi < 0 || xi >= xMats {
			panic(&tensor.Error{Op: "GatherQMM", Err: tensor.ErrArgument})
		}
		qmmRun(oi.buf.data[i*m*outer*es:(i+1)*m*outer*es], xb[xi*m*inner*es:(xi+1)*m*inner*es],
			x.DType(), m, q.m.sub(e), transpose)
	}
	return out
}

// indexValues reads integer indices broadcast to shape.
func (be *Backend) indexValues(idx *tensor.Array, shape []int) []int64 {
	v := be.BroadcastTo(idx, shape)
	defer v.Free()
	return v.Int64s()
}

// qmmStage recycles qmmRun's float32 staging (x widened, the output
// before narrowing): a decode step makes several hundred such calls, and
// fresh zeroed slices of up to rows × vocabulary floats were a visible
// share of a batched step.
var qmmStage sizedScratch

// qmmRun computes one product of rows x rows (dense, dtype dt) into dst
// (dense, dtype dt). A paged w (w.pg set) must be one that qmmPagedUsable
// accepts.
func qmmRun(dst, xb []byte, dt tensor.DType, rows int, w qmat, transpose bool) {
	inner, outer := w.dims(transpose)
	xp := qmmStage.get(rows * inner)
	defer qmmStage.put(xp)
	x := *xp
	stageRows(rows, inner, func(r0, r1 int) {
		toF32(x[r0*inner:r1*inner], xb[r0*inner*dt.Size():r1*inner*dt.Size()], dt)
	})
	var out []float32
	if dt == tensor.Float32 {
		out = f32s(dst)[:rows*outer]
	} else {
		op := qmmStage.get(rows * outer)
		defer qmmStage.put(op)
		out = *op
	}
	// each path computes a row the same way whatever rows it is given with
	// (the kernel is chosen by the weight and dtype, never by the row count)
	var raw []uint16 // x as the bfloat16 kernels read it
	if dt == tensor.BFloat16 {
		raw = u16s(xb)[:rows*inner]
	}
	switch {
	case transpose && q8Usable(w):
		q8Run(out, x, rows, w)
	case transpose && qmvTFirst(w, dt):
		qmvT(out, x, raw, rows, w)
	case transpose && qmvzUsable(w):
		qmvZ(out, x, rows, w)
	case transpose && qmvUsable(w, dt):
		qmvT(out, x, raw, rows, w)
	case transpose && qmvaUsable(w) && (w.bits == 8 || !hasAVX512):
		qmvA(out, x, rows, w)
	case transpose:
		clear(out) // the staging buffer is stale; the paths above write every output
		qmmT(out, x, rows, w)
	case qmmNUsable(w):
		clear(out)
		qmmNFast(out, x, rows, w)
	default:
		clear(out)
		qmmN(out, x, rows, w)
	}
	switch dt {
	case tensor.BFloat16:
		stageRows(rows, outer, func(r0, r1 int) {
			storeBF16(u16s(dst)[r0*outer:r1*outer], out[r0*outer:r1*outer])
		})
	case tensor.Float16:
		stageRows(rows, outer, func(r0, r1 int) {
			fromF32(dst[r0*outer*dt.Size():r1*outer*dt.Size()], out[r0*outer:r1*outer], dt)
		})
	}
}

// stageRowsMin is the fewest values a product's input or output
// conversion splits over the workers (below it one goroutine converts:
// a hand-off costs more than it saves); a variable so that tests can split
// small products.
var stageRowsMin = 1 << 16

// stageRows runs f over [0, rows) rows of width values each, split over the
// workers in whole rows once rows·width reaches stageRowsMin. Each row's
// conversion is elementwise, so the bits do not depend on the split.
func stageRows(rows, width int, f func(r0, r1 int)) {
	if rows*width < stageRowsMin {
		f(0, rows)
		return
	}
	parallelFor(rows, max(1, stageRowsMin/2/max(width, 1)), f)
}

// qmvTFirst reports whether x·Wᵀ goes to the AVX512_BF16 kernel (qmvT)
// ahead of qmvZ: for 4-bit weights, bfloat16 and float16 x and K above
// 512 (model weights; a quantized KV cache's head dims stay on qmvZ, paged
// or not). There qmvT read a single row's weights at 1.5–1.8× qmvZ's rate
// for bfloat16 (QMatmulSmallM, AMD EPYC: 34–38 against 20–24 GB/s) and
// 1.7–1.9× for float16 (its hi+lo split, GB/cpu-s), and at 8 rows, with
// the two-row kernels and chunked long rows, 1.25–1.45× for float16.
// 8-bit weights stay on qmvZ: qmvT runs them as two nibble halves (twice
// the dot work per byte), and on AMD EPYC (Zen 5, one core, weights from
// memory) qmvZ read them at 1.1–1.6× qmvT's rate for one x row (24–32
// against 15–22 GB/s across runs) and 1.05–1.4× for eight.
func qmvTFirst(w qmat, dt tensor.DType) bool {
	return qmvTFirstOn && w.bits == 4 && (dt == tensor.BFloat16 || dt == tensor.Float16) && w.cols > 512 && qmvUsable(w, dt)
}

// qmvTFirstOn lets tests and benchmarks put qmvZ first again.
var qmvTFirstOn = true

// qmmT computes out[m, n] = Σ_k x[m, k]·W[n, k] for the N×K matrix w.
func qmmT(out, x []float32, rows int, w qmat) {
	if w.bits == 4 && hasAVX512 {
		qmmT4(out, x, rows, w)
		return
	}
	n, k, gs, ng, wpr := w.rows, w.cols, w.gs, w.groups(), w.wordsPerRow()
	parallelFor(n, 8, func(lo, hi int) {
		codes := make([]uint8, k)
		deq := make([]float32, k)
		sv := make([]float32, ng)
		bv := make([]float32, ng)
		for r := lo; r < hi; r++ {
			unpackCodes(codes, w.words[r*wpr:(r+1)*wpr], w.bits)
			w.rowScales(sv, bv, r, r+1)
			for g := range ng {
				s, b := sv[g], bv[g]
				for j := g * gs; j < (g+1)*gs; j++ {
					deq[j] = float32(codes[j])*s + b
				}
			}
			for m := range rows {
				out[m*n+r] = dot32(x[m*k:(m+1)*k], deq)
			}
		}
	})
}

// dot32 is a float32 dot product with four partial sums.
func dot32(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// permute32 reorders each run of 32 values as the 16 even-indexed ones then
// the 16 odd-indexed ones: the order of the low and high nibbles of 16
// bytes of 4-bit codes.
func permute32(dst, src []float32) {
	for c := 0; c+32 <= len(src); c += 32 {
		s, d := src[c:c+32], dst[c:c+32]
		for j := range 16 {
			d[j] = s[2*j]
			d[16+j] = s[2*j+1]
		}
	}
}

// nibbleIota is 0, 1, …, 15: qdot4 builds each group's table from it.
var nibbleIota = [16]float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// qmmT4 is qmmT for 4-bit codes with the AVX-512 kernels: single rows go
// through qdot4 (a per-group table of the 16 dequantized values), four
// weight rows at a time for a lone x row through qdot4x4; blocks of 8 rows
// through qgemm4x8, which dequantizes each chunk once for all 8. All three
// give a row the same bits (the same accumulators, order and final sum).
func qmmT4(out, x []float32, rows int, w qmat) {
	n, k, gs, ng := w.rows, w.cols, w.gs, w.groups()
	cpg := gs / 32
	bpr := k / 2 // bytes per packed row
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.words))), len(w.words)*4)
	blocks := rows / 8
	single := rows - blocks*8
	if rows < 4 {
		blocks, single = 0, rows
	}
	// x in kernel layouts: 8-row interleaved blocks, then single rows
	nChunks := k / 32
	xblk := make([]float32, blocks*nChunks*8*32)
	perm := make([]float32, k)
	for bl := range blocks {
		for r := range 8 {
			permute32(perm, x[(bl*8+r)*k:(bl*8+r+1)*k])
			for c := range nChunks {
				copy(xblk[((bl*nChunks+c)*8+r)*32:][:32], perm[c*32:c*32+32])
			}
		}
	}
	first := blocks * 8
	xs1 := make([]float32, single*k)
	for r := range single {
		permute32(xs1[r*k:(r+1)*k], x[(first+r)*k:(first+r+1)*k])
	}
	const rowBlock = 64
	parallelFor(n, 16, func(lo, hi int) {
		sv := make([]float32, rowBlock*ng)
		bv := make([]float32, rowBlock*ng)
		for r0 := lo; r0 < hi; r0 += rowBlock {
			r1 := min(r0+rowBlock, hi)
			w.rowScales(sv, bv, r0, r1)
			r := r0
			if blocks == 0 && single == 1 {
				// decode: four weight rows per pass over x
				for ; r+4 <= r1; r += 4 {
					qdot4x4(&wb[r*bpr], bpr, &xs1[0], &sv[(r-r0)*ng], &bv[(r-r0)*ng], &nibbleIota[0], ng, cpg, &out[r])
				}
			}
			for ; r < r1; r++ {
				wrow := &wb[r*bpr]
				s, b := &sv[(r-r0)*ng], &bv[(r-r0)*ng]
				for bl := range blocks {
					qgemm4x8(wrow, &xblk[bl*nChunks*256], s, b, ng, cpg, &out[bl*8*n+r], n)
				}
				for m := range single {
					out[(first+m)*n+r] = qdot4(wrow, &xs1[m*k], s, b, &nibbleIota[0], ng, cpg)
				}
			}
		}
	})
}

// qmmN computes out[m, j] += Σ_k x[m, k]·W[k, j] for the K×N matrix w
// (packed along N) in portable Go: the path for other bit widths, odd
// column counts and machines without AVX-512 (qmmNFast otherwise).
// Workers own column ranges of whole groups.
func qmmN(out, x []float32, rows int, w qmat) {
	kin, n, gs, ng, wpr := w.rows, w.cols, w.gs, w.groups(), w.wordsPerRow()
	wpg := gs * w.bits / 32
	parallelFor(ng, max(1, 256/gs), func(g0, g1 int) {
		width := (g1 - g0) * gs
		codes := make([]uint8, width)
		deq := make([]float32, width)
		sv := make([]float32, ng)
		bv := make([]float32, ng)
		for kk := range kin {
			unpackCodes(codes, w.words[kk*wpr+g0*wpg:kk*wpr+g1*wpg], w.bits)
			w.rowScales(sv, bv, kk, kk+1)
			for g := g0; g < g1; g++ {
				s, b := sv[g], bv[g]
				base := (g - g0) * gs
				for j := base; j < base+gs; j++ {
					deq[j] = float32(codes[j])*s + b
				}
			}
			for m := range rows {
				a := x[m*kin+kk]
				o := out[m*n+g0*gs : m*n+g1*gs]
				for j, v := range deq {
					o[j] += a * v
				}
			}
		}
	})
}
