package cpu

import "github.com/mlxgo/mlxgo/tensor"

// QuantizedMatmulPaged multiplies by a paged pool's affine-quantized keys
// or values in place (tensor.PagedQuantizedMatmul): each KV head's matrix
// is a qmat whose rows are found through the block table, and the kernels
// take their runs of rows one block at a time. Only the AVX-512 kernels
// (qmvZ for scores, qmmNFast for values) walk paged rows; for any other
// product it returns nil and the caller gathers. Each output is the same
// bits as the product on the gathered matrix: a position's score is one
// kernel chain whatever rows share its call, and the value sum runs in
// the same fixed K segments, its accumulators carried across the block
// boundaries in memory.
func (be *Backend) QuantizedMatmulPaged(x, wPool, sPool, bPool *tensor.Array, table []int32, kvLen int, transpose bool, groupSize, bits int, shape []int) *tensor.Array {
	h, bs := wPool.Dim(1), wPool.Dim(2)
	base := qmat{sdt: sPool.DType(), rows: kvLen, cols: wPool.Dim(3) * 32 / bits, gs: groupSize, bits: bits}
	if !qmmPagedUsable(base, x.DType(), transpose) || sPool.DType() != bPool.DType() {
		return nil
	}
	q := loadQ(wPool, sPool, bPool, groupSize, bits)
	defer q.release()
	base.words, base.sc, base.bi = q.m.words, q.m.sc, q.m.bi
	inner, outer := base.dims(transpose)
	m := shape[2]
	out, oi := be.newArray(shape, x.DType())
	xc, owned := contig(x)
	if owned {
		defer xc.buf.drop()
	}
	es := x.DType().Size()
	xb := bytesOf(xc, x.Size(), es)
	for hd := range h {
		w := base
		w.pg = &qpage{table: table, bs: bs, heads: h, head: hd}
		qmmRun(oi.buf.data[hd*m*outer*es:(hd+1)*m*outer*es], xb[hd*m*inner*es:(hd+1)*m*inner*es], x.DType(), m, w, transpose)
	}
	return out
}

// qmmPagedUsable reports whether qmmRun can take w with its rows paged
// for x of dtype dt: the paths that walk rows in runs (qmvZ for x·Wᵀ,
// qmmNFast for x·W). Where qmmRun would pick qmvT for the contiguous
// matrix, the paged one is gathered instead, so both give the same bits.
func qmmPagedUsable(w qmat, dt tensor.DType, transpose bool) bool {
	if transpose {
		return qmvzUsable(w) && !qmvTFirst(w, dt)
	}
	return qmmNUsable(w)
}
