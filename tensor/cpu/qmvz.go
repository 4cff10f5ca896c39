package cpu

import (
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// 4- and 8-bit quantized matmul x·Wᵀ on AVX-512: qmvA's scheme (one
// kernel for every row count; each block decoded, scaled and dotted with
// every x row of a pass; a fixed pair of chains per row, qmvzChains) on 16 float32 lanes,
// blocks of 64 codes and passes of up to 8 rows (qmvZ4, qmvZ8; qmvZ4p,
// qmvZ8p for groups of 32, two groups per block). x is used as float32
// (exactly its bfloat16, float16 or float32 value), so every product is
// exact inside its FMA, as in qmvA (TestQMVZExact).
//
// On AVX-512 machines it serves float32 and float16 x, bfloat16 x at K of
// 512 or less (a quantized KV cache's head dims, paged or not), and every
// dtype where the AVX512_BF16 matvec (qmvT, which bfloat16 x at larger K
// takes first: see qmvTFirst) is missing, in place of the older float32
// kernels (qmmT4), whenever K is whole 64-code blocks: per row and block
// it issues one FMA-port operation per 16 codes of each row, with no
// per-row conversions, and reads each weight byte once per pass whatever
// the pass's row count.

//go:generate go run gen_qmvz.go

// qmvzMaxRows is the most x rows one pass carries: the kernels take weight
// rows two at a time, each x row accumulating into Z8+i for the first and
// Z16+i for the second.
const qmvzMaxRows = 8

// qmvzPrefetchBytes is about how far ahead of its reads a worker
// prefetches weights when a call is not chunked in K: the smallest whole
// number of weight-row pairs at least this long, so that the address a
// row prefetches is the same offset in a row two, four, … rows on, which
// this worker reads next (both rows of a pair then prefetch their
// successors). At 2 KiB ahead a single x row read its weights from memory
// at 19 GB/s on one AMD EPYC (Zen 5) core, at 16 KiB 25.5–28.5
// (BenchmarkQMatmulSmallM, z rows, 8-bit).
const qmvzPrefetchBytes = 16 << 10

// qmvzChains is how many accumulators each (x row, weight row) chain
// keeps in the kernels (gen_qmvz.go's chains): vector v of a 64-code block
// (codes 16v..16v+15) accumulates into v mod qmvzChains, and the
// accumulators are added in order before the lanes are summed.
const qmvzChains = 2

// qmvzOn lets tests switch the AVX-512 kernels off (to reach qmvT and
// qmmT4 on machines that have them).
var qmvzOn = true

// qmvzUsable reports whether qmvZ can compute x·Wᵀ for w: AVX-512, 4- or
// 8-bit codes, group size 32, 64 or 128, K whole 64-code blocks.
func qmvzUsable(w qmat) bool {
	return qmvzOn && hasAVX512 && (w.bits == 4 || w.bits == 8) && (w.gs == 32 || w.gs == 64 || w.gs == 128) &&
		w.cols%w.gs == 0 && w.cols%64 == 0 && w.cols > 0
}

// qmvzKern is the signature of the AVX-512 kernels.
type qmvzKern = func(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)

// qmvzKernels are the kernels by code width (4, 8 bits) and groups per
// iteration (1, 2); a variable so that tests can put a model of them in.
var qmvzKernels = [2][2]qmvzKern{{qmvZ4, qmvZ4p}, {qmvZ8, qmvZ8p}}

// qmvzKernelsB are the 8-bit kernels that read bfloat16 scales and biases
// in place (by groups per iteration), used where a row's groups are whole
// vectors of 16 (qmvZ); a variable like qmvzKernels.
var qmvzKernelsB = [2]qmvzKern{qmvZ8B, qmvZ8pB}

// qmvZ computes out[m, n] = Σ_k x[m, k]·W[n, k]; qmvzUsable(w) must hold.
func qmvZ(out, x []float32, rows int, w qmat) {
	if rows == 0 || w.rows == 0 {
		return
	}
	n, k, gs, ng := w.rows, w.cols, w.gs, w.groups()
	bpr := k * w.bits / 8
	nbv := (ng + 15) / 16
	ngp := 16 * nbv
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.words))), len(w.words)*4)
	// an iteration is a group of gs/64 blocks, or for gs 32 one block of
	// two groups
	gpi, cpi := 1, gs/64
	if gs == 32 {
		gpi, cpi = 2, 1
	}
	kern := qmvzKernels[w.bits/8][gpi-1]
	// bfloat16 scales and biases read in place by the B kernels: 8-bit
	// codes, groups in whole vectors of 16 (no padding to read past)
	inPlace := qmvScalesInPlaceOn && w.bits == 8 && w.sdt == tensor.BFloat16 && ng%16 == 0
	if inPlace {
		kern = qmvzKernelsB[gpi-1]
	}
	nit := ng / gpi
	passes := (rows + qmvzMaxRows - 1) / qmvzMaxRows
	nxMax := (rows + passes - 1) / passes
	ldx := xStride(k, nxMax)
	buf := qmvaPool.get(rows*ldx + rows*ngp)
	defer qmvaPool.put(buf)
	xl, gx := (*buf)[:rows*ldx], (*buf)[rows*ldx:]
	for m := range rows {
		prepQMVZ(xl[m*ldx:m*ldx+k], gx[m*ngp:(m+1)*ngp], x[m*k:(m+1)*k], gs, w.bits)
	}
	// K chunks of whole iterations, so that a pass's x chunk stays in L1
	ci := max(1, qmvaChunkBytes*2/(4*gs*gpi*nxMax))
	chunked := ci < nit
	pfd := 2 * bpr
	if !chunked {
		ci = nit
		pfd *= (qmvzPrefetchBytes + pfd - 1) / pfd
	}
	parallelFor(n, qmvaRowBlock, func(r0, r1 int) {
		sb := qmvaPool.get(qmvaRowBlock*(2*ng+ngp) + qmvaRowBlock*qmvzMaxRows*16*qmvzChains)
		defer qmvaPool.put(sb)
		f := *sb
		sv := f[:qmvaRowBlock*ng]
		bt := f[qmvaRowBlock*ng : 2*qmvaRowBlock*ng]
		bp := f[2*qmvaRowBlock*ng : qmvaRowBlock*(2*ng+ngp)]
		acc := f[qmvaRowBlock*(2*ng+ngp):]
		for b0, b1 := r0, r0; b0 < r1; b0 = b1 {
			b1 = min(b0+qmvaRowBlock, r1, b0+w.run(b0)) // one stored run
			sp, lds := unsafe.Pointer(&sv[0]), 4*ng
			bb, ldb := unsafe.Pointer(&bp[0]), 4*ngp
			if inPlace {
				sp, lds = unsafe.Pointer(&w.sc[2*w.phys(b0)*ng]), 2*ng
				bb, ldb = unsafe.Pointer(&w.bi[2*w.phys(b0)*ng]), 2*ng
				// the next rows' scales and biases come in while these run
				w.prefetchScales(b1, min(b1+qmvaRowBlock, r1))
			} else {
				w.rowScales(sv, bt, b0, b1)
				for r := range b1 - b0 {
					p := bp[r*ngp : (r+1)*ngp]
					copy(p, bt[r*ng:(r+1)*ng])
					clear(p[ng:])
				}
			}
			for p, m0 := 0, 0; p < passes; p++ {
				nx := (rows - m0 + passes - p - 1) / (passes - p) // the rest spread evenly
				for i0 := 0; i0 < nit; i0 += ci {
					i1 := min(nit, i0+ci)
					flags := 0
					if i0 == 0 {
						flags |= 1
					}
					if i1 == nit {
						flags |= 2
					}
					c0 := i0 * gpi * gs // first code of the chunk
					kern(&wb[w.phys(b0)*bpr+c0*w.bits/8], bpr, &xl[m0*ldx+c0], 4*ldx, i1-i0, cpi,
						(*float32)(unsafe.Add(sp, lds/ng*i0*gpi)), lds, (*float32)(bb), ldb, nbv, &gx[m0*ngp], 4*ngp,
						&acc[0], &out[m0*n+b0], 4*n, b1-b0, pfd, flags, nx)
				}
				m0 += nx
			}
		}
	})
}

// prepQMVZ is prepQMVA for the AVX-512 kernels: for 4-bit codes each run
// of 32 values becomes its 16 even-indexed values then its 16 odd-indexed
// ones; 8-bit codes keep x's order; the group sums as in prepQMVA.
func prepQMVZ(xl, gx, x []float32, gs, bits int) {
	if bits == 4 {
		permute32(xl, x)
	} else {
		copy(xl, x)
	}
	groupSums(gx, x, gs)
}
