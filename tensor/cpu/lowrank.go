package cpu

import (
	"runtime"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// Low-rank updates (LoRA residuals applied unmerged): out = y + (x·Aᵀ)·Bᵀ
// per row, each row with its own pair (tensor.LowRankGather) or all with
// one (tensor.LowRank), in one call with float32 in between.
//
// The arithmetic of a row is fixed by that row alone, so a row's result
// is bit for bit the same whatever other rows (and pairs) the call holds
// and however many workers run it:
//
//   - t = x·Aᵀ, t[q] for rank row q: over blocks of kc inputs in order,
//     each block one FMA chain in input order from zero (gemvT16, as the
//     dense matmul's gemvT computes a product), the block sums added to
//     t in turn;
//   - out[j] = round(chain): the chain starts from float32(y[j]) and
//     adds t[q]·B[j, q] by FMA for q ascending (gemvT16 again, its
//     accumulators loaded with y), rounded once to y's type.
//
// Work is split over rank groups of 16, input blocks (their sums are
// combined in block order afterwards) and output columns, never over a
// row's chain; rows are grouped by pair so that each pair's weights are
// read once for all its rows.

// lrScratch holds the kernels' float32 staging (x rows, products,
// partial sums, y rows); every user overwrites what it reads.
var lrScratch sizedScratch

// LowRank implements tensor.LowRanker.
func (be *Backend) LowRank(y, x *tensor.Array, pairs []tensor.LowRankPair, ids []int) *tensor.Array {
	ys := y.Shape()
	dt := y.DType()
	res, ri := be.newArray(ys, dt)
	n := len(ids)
	out, in := ys[len(ys)-1], x.Dim(-1)
	if n == 0 || out == 0 {
		return res
	}
	var owned []*impl
	defer func() {
		for _, c := range owned {
			c.buf.drop()
		}
	}()
	dense := func(a *tensor.Array) *impl {
		c, own := contig(a)
		if own {
			owned = append(owned, c)
		}
		return c
	}
	yi := dense(y)
	yfb := lrScratch.get(n * out)
	defer lrScratch.put(yfb)
	yf := *yfb
	toF32(yf, bytesOf(yi, n*out, dt.Size()), dt)
	var xi *impl
	var rows []int
	for p, pr := range pairs {
		rows = rows[:0]
		for i, id := range ids {
			if id == p {
				rows = append(rows, i)
			}
		}
		if len(rows) == 0 || in == 0 || pr.A.Dim(0) == 0 {
			continue
		}
		if xi == nil {
			xi = dense(x)
		}
		l := lrOperands{
			x: xi, xdt: x.DType(), in: in, out: out, r: pr.A.Dim(0),
			adt: pr.A.DType(), bdt: pr.B.DType(),
		}
		// A as a transposed view of a dense Aᵀ [in, r] is read as it is
		if ai := get(pr.A); haveLRBT16 && ai.strides[1] == l.r && (ai.strides[0] == 1 || l.r == 1) {
			l.a, l.aT = ai, true
		} else {
			l.a = dense(pr.A)
		}
		// B as a transposed view of a dense Bᵀ [r, out] is read as it is
		if bi := get(pr.B); haveLRBT16 && bi.strides[0] == 1 && (bi.strides[1] == out || l.r == 1) {
			l.b, l.bT = bi, true
		} else {
			l.b = dense(pr.B)
		}
		l.run(yf, rows)
	}
	fromF32(bytesOf(ri, n*out, dt.Size()), yf, dt)
	return res
}

// lrOperands is one pair's low-rank term over contiguous x [n, in], A
// [r, in] and B [out, r].
type lrOperands struct {
	x          *impl
	xdt        tensor.DType
	in, out, r int
	a, b       *impl
	adt, bdt   tensor.DType
	// bT: b is Bᵀ [r, out] dense (B's transposed view); aT: a is Aᵀ
	// [in, r] dense (A's transposed view)
	bT, aT bool
}

// lrRowChunk is the most rows one task of the x·Aᵀ phase takes.
const lrRowChunk = 64

// run adds the term to the given rows of yf ([n, out] float32).
func (l *lrOperands) run(yf []float32, rows []int) {
	m := len(rows)
	kp := (l.in + 15) &^ 15
	rp := (l.r + 15) &^ 15
	xes := l.xdt.Size()
	// x rows in float32, zero past in (gemvT16 reads whole chunks of 16)
	xsb := lrScratch.get(m * kp)
	defer lrScratch.put(xsb)
	xs := *xsb
	xd := l.x.buf.data
	for t, i := range rows {
		o := (l.x.off + i*l.in) * xes
		toF32(xs[t*kp:t*kp+l.in], xd[o:o+l.in*xes], l.xdt)
		clear(xs[t*kp+l.in : (t+1)*kp])
	}
	tb := lrScratch.get(m * rp)
	defer lrScratch.put(tb)
	t := *tb
	if hasAVX512 && packKind(l.adt) >= 0 && packKind(l.bdt) >= 0 {
		l.productA(t, xs, m, kp, rp)
		l.productB(yf, t, rows, rp)
		return
	}
	l.portable(yf, t, xs, rows, kp, rp)
}

// productA computes t [m, rp] = x·Aᵀ (zero past r).
func (l *lrOperands) productA(t, xs []float32, m, kp, rp int) {
	groups := rp / 16
	blocks := (l.in + kc - 1) / kc
	chunks := (m + lrRowChunk - 1) / lrRowChunk
	mc := min(m, lrRowChunk)
	stride := mc * 16
	tasks := chunks * groups * blocks
	pb := lrScratch.get(tasks * stride)
	defer lrScratch.put(pb)
	part := *pb
	kind, es := packKind(l.adt), l.adt.Size()
	ad := l.a.buf.data
	zero := uintptr(unsafe.Pointer(&gemvZeros[0]))
	// enough work per task to outweigh handing it out
	grain := max(1, (1<<16)/max(1, mc*16*min(kc, l.in)))
	parallelFor(tasks, grain, func(lo, hi int) {
		var wr [16]uintptr
		for task := lo; task < hi; task++ {
			c, g, blk := task/(groups*blocks), task/blocks%groups, task%blocks
			r0, p0 := c*lrRowChunk, blk*kc
			nr := min(lrRowChunk, m-r0)
			if l.aT {
				// Aᵀ's rows are the inputs, its columns the rank: the
				// block's chains run as lrBT16's over 16 rank columns,
				// four blocks at a time where four whole ones follow
				nv := min(16, l.r-g*16)
				col := unsafe.Pointer(&ad[(l.a.off+p0*l.r+g*16)*es])
				if blk+3 < blocks && task+3 < hi && p0+4*kc <= l.in {
					for k := range 4 {
						clear(part[(task+k)*stride : (task+k)*stride+nr*16])
					}
					lrBT4(&part[task*stride], 4*stride, &xs[r0*kp+p0], 4*kp, 4*kc, col, l.r*es, kc*l.r*es, kc, kind, nr, nv, 16*l.r*es)
					task += 3
					continue
				}
				acc := part[task*stride : task*stride+nr*16]
				clear(acc)
				lrBT16(&acc[0], &xs[r0*kp+p0], 4*kp, col, l.r*es, min(kc, l.in-p0), kind, nr, nv)
				continue
			}
			for i := range wr {
				wr[i] = zero
				if q := g*16 + i; q < l.r {
					wr[i] = uintptr(unsafe.Pointer(&ad[(l.a.off+q*l.in+p0)*es]))
				}
			}
			acc := part[task*stride : task*stride+nr*16]
			clear(acc)
			gemvT16(&acc[0], &xs[r0*kp+p0], 4*kp, &wr[0], min(kc, l.in-p0), kind, nr)
		}
		runtime.KeepAlive(ad)
	})
	// the block sums of each product, added in block order
	for c := range chunks {
		r0 := c * lrRowChunk
		nr := min(lrRowChunk, m-r0)
		for g := range groups {
			base := (c*groups + g) * blocks
			for i := range nr {
				dst := t[(r0+i)*rp+g*16 : (r0+i)*rp+g*16+16]
				copy(dst, part[base*stride+i*16:])
				for blk := 1; blk < blocks; blk++ {
					src := part[(base+blk)*stride+i*16:]
					for j := range dst {
						dst[j] += src[j]
					}
				}
				// past the rank: exact zeros (an infinite x would have
				// made NaN of the zero weights' products)
				if q := l.r - g*16; q < 16 {
					clear(dst[max(q, 0):])
				}
			}
		}
	}
}

// productB adds t·Bᵀ to the rows of yf: for each 16 output columns, the
// rows' accumulators are loaded with y and the chains run over the rank.
func (l *lrOperands) productB(yf, t []float32, rows []int, rp int) {
	m := len(rows)
	out, r := l.out, l.r
	kind, es := packKind(l.bdt), l.bdt.Size()
	bd := l.b.buf.data
	zeros := gemvZeros[:]
	if r*4 > len(zeros) {
		zeros = make([]byte, rp*4)
	}
	zero := uintptr(unsafe.Pointer(&zeros[0]))
	if l.bT {
		l.productBT(yf, t, rows, rp)
		return
	}
	groups := (out + 15) / 16
	grain := max(1, (1<<15)/max(1, m*16*r))
	parallelFor(groups, grain, func(lo, hi int) {
		var wr [16]uintptr
		accb := lrScratch.get(m * 16)
		defer lrScratch.put(accb)
		acc := *accb
		for g := lo; g < hi; g++ {
			j0 := g * 16
			nv := min(16, out-j0)
			for i := range wr {
				wr[i] = zero
				if i < nv {
					wr[i] = uintptr(unsafe.Pointer(&bd[(l.b.off+(j0+i)*r)*es]))
				}
			}
			for s, i := range rows {
				copy(acc[s*16:s*16+nv], yf[i*out+j0:i*out+j0+nv])
			}
			gemvT16(&acc[0], &t[0], 4*rp, &wr[0], r, kind, m)
			for s, i := range rows {
				copy(yf[i*out+j0:i*out+j0+nv], acc[s*16:s*16+nv])
			}
		}
		runtime.KeepAlive(bd)
		runtime.KeepAlive(zeros)
	})
}

// productBT is productB for a transposed-view B (Bᵀ [r, out] dense):
// whole runs of 64 output columns go through lrBT4 (their four groups'
// chains interleaved), the columns past the last such run through
// lrBT16, every chain the same either way.
func (l *lrOperands) productBT(yf, t []float32, rows []int, rp int) {
	m := len(rows)
	out, r := l.out, l.r
	kind, es := packKind(l.bdt), l.bdt.Size()
	bd := l.b.buf.data
	quads := out / 64
	units := quads + (out-quads*64+15)/16
	grain := max(1, (1<<15)/max(1, m*64*r))
	parallelFor(units, grain, func(lo, hi int) {
		accb := lrScratch.get(m * 64)
		defer lrScratch.put(accb)
		acc := *accb
		for u := lo; u < hi; u++ {
			if u < quads {
				// acc holds the four groups' chains one after another,
				// each [m, 16]
				j0 := u * 64
				for s, i := range rows {
					for c := range 4 {
						copy(acc[(c*m+s)*16:(c*m+s)*16+16], yf[i*out+j0+c*16:])
					}
				}
				lrBT4(&acc[0], m*64, &t[0], 4*rp, 0, unsafe.Pointer(&bd[(l.b.off+j0)*es]), out*es, 16*es, r, kind, m, 16, 2*64*es)
				for s, i := range rows {
					for c := range 4 {
						copy(yf[i*out+j0+c*16:i*out+j0+c*16+16], acc[(c*m+s)*16:])
					}
				}
				continue
			}
			j0 := quads*64 + (u-quads)*16
			nv := min(16, out-j0)
			for s, i := range rows {
				copy(acc[s*16:s*16+nv], yf[i*out+j0:i*out+j0+nv])
			}
			lrBT16(&acc[0], &t[0], 4*rp, unsafe.Pointer(&bd[(l.b.off+j0)*es]), out*es, r, kind, m, nv)
			for s, i := range rows {
				copy(yf[i*out+j0:i*out+j0+nv], acc[s*16:s*16+nv])
			}
		}
		runtime.KeepAlive(bd)
	})
}

// portable is run without AVX-512 (or for operand types gemvT16 does not
// read): the same order of operations, one multiply and one add at a
// time.
func (l *lrOperands) portable(yf, t, xs []float32, rows []int, kp, rp int) {
	m := len(rows)
	av := mview{l.a.buf.data, l.adt, l.a.off, l.in, 1}
	if l.aT {
		av.rs, av.cs = 1, l.r
	}
	bv := mview{l.b.buf.data, l.bdt, l.b.off, l.r, 1}
	if l.bT {
		bv.rs, bv.cs = 1, l.out
	}
	arow := make([]float32, l.in)
	for q := range l.r {
		av.run(arow, q, 0, false)
		for s := range m {
			x := xs[s*kp : s*kp+l.in]
			var sum float32
			for p0 := 0; p0 < l.in; p0 += kc {
				var blk float32
				for p := p0; p < min(l.in, p0+kc); p++ {
					blk += x[p] * arow[p]
				}
				if p0 == 0 {
					sum = blk
				} else {
					sum += blk
				}
			}
			t[s*rp+q] = sum
		}
	}
	brow := make([]float32, l.r)
	for j := range l.out {
		bv.run(brow, j, 0, false)
		for s, i := range rows {
			acc := yf[i*l.out+j]
			for q, w := range brow {
				acc += t[s*rp+q] * w
			}
			yf[i*l.out+j] = acc
		}
	}
}
