package cpu

import (
	"math"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// 4- and 8-bit quantized matmul x·Wᵀ on AVX512_BF16, for any number of x
// rows: decode (one row), batched decode (a few) and prefill (many) run
// the same kernels, so each row's result is the same bits whatever rows
// it is computed with (8-bit rows run as 4-bit rows of nibble pairs, see
// qmvT).
//
// Σ_k x_k·(s_g·q_k + b_g) is computed as Σ_g s_g·(Σ_{k∈g} q_k·x_k) +
// Σ_g b_g·X_g, X_g the group sums of x (computed once per call). The codes
// q are looked up as exact bfloat16 values straight from the packed words
// and dotted with x on VDPBF16PS; the scales are applied per 128-code
// block and lane, the biases per row through X. Workers own contiguous
// ranges of weight rows, read each block of them from memory once and run
// it against the x rows in passes of 8, 4, 2 and 1 rows (qmvRows*); the
// weights are read as one sequential stream per worker, prefetched ahead
// (qmvPrefetchBytes).
//
// Precision: a code (at most 8 significant bits) times a bfloat16 x value
// is exact in float32, so for bfloat16 x the only error is float32
// accumulation of Σ|s·q·x| and Σ|b·x|. A float16 x is split into hi =
// bf16(x) and lo = bf16(x − hi), both exact (hi + lo = x: 11 significant
// bits fit in two 8-bit halves), and both run through the dot, so float16
// keeps the same bound at twice the dot work; float32 x keeps the float32
// kernels (see qmvUsable). VDPBF16PS treats subnormal inputs as zero (|x|
// < 2⁻¹²⁶ only). TestQMVExact and TestQGemmExact hold the kernels to these
// bounds against float64.
//
// This replaces a separate prefill kernel (VDPBF16PS over code panels
// tiled 6 rows × 32 columns) that summed in another order: with it, a
// T-token prefill rounded differently from T single steps.

//go:generate go run gen_qmvr.go

// qmvPrefetchBytes is about how far ahead of its reads the kernel
// prefetches weights (rounded to whole rows): enough to cover DRAM latency
// at full bandwidth.
const qmvPrefetchBytes = 16 << 10

// qmvRowBlock is how many weight rows the matvec runs against every pass
// of x rows before moving on (they stay in cache meanwhile), and the
// smallest share of rows a worker takes.
const qmvRowBlock = 64

// qmvScalesInPlaceOn lets tests and benchmarks stage every block's scales
// as float32 again (the B kernels off).
var qmvScalesInPlaceOn = true

// qmvPairsOn sends passes of 4 x rows through the two-row kernels
// (qmvRows2X: weight rows in pairs); off, every pass takes the one-row
// kernels (passes of up to 8) — the same bits either way. Measured
// (BenchmarkQMatmulSmallM, CPU time, five alternated rounds): 8 x rows as
// two passes of 4 in pairs run 1.0–1.3× (K = 2048) and 1.1–1.6× (K =
// 8192) one pass of 8 one-row; a single x row runs 0.65–0.7× as fast in
// pairs and two rows gain nothing, so passes of 1 and 2 stay one-row.
var qmvPairsOn = true

// qmvPassRows is the x rows of the next pass when left remain: 8, 4, 2 or
// 1 (at most 4 with the two-row kernels).
func qmvPassRows(left int) int {
	nx := 8
	if qmvPairsOn {
		nx = 4
	}
	for nx > left {
		nx /= 2
	}
	return nx
}

// qmvChunkXBytes bounds the x bytes a pass of x rows reads per weight row
// (the x rows' share of L1 while a block of weight rows streams past
// them): longer rows run in chunks of half as many bytes (qmvChunk).
// Measured (BenchmarkQMatmulSmallM, K = 8192): whole rows of 8 and 4 x
// rows spill L1 and run at 0.6–0.78 of chunked ones; at K = 2048 (8 rows,
// 32 KiB of x) chunking does not pay.
var qmvChunkXBytes = 32 << 10

// The kernels' flags: qmvAccLoad starts a chunk from the stored
// accumulators, qmvAccFinish marks a row's last chunk (tail, bias terms,
// outputs); a whole row is one chunk with qmvAccFinish alone.
const (
	qmvAccLoad   = 1
	qmvAccFinish = 2
)

// qmvChunk returns how many 128-code blocks of a row of nb blocks one
// kernel call runs against a pass of nx x rows (two layouts each when
// lo): all of them while the pass's x fits qmvChunkXBytes, else an even
// count (chunks keep the kernels' alternation of even and odd blocks).
func qmvChunk(nx, nb int, lo bool) int {
	per := nx * 256 // x bytes per block
	if lo {
		per *= 2
	}
	if per*nb <= qmvChunkXBytes {
		return nb
	}
	return max(qmvChunkXBytes/2/per&^1, 2)
}

// qmvLaneGroup is, per group size, the group (relative to the block's
// first) that each float32 lane of a 128-code block's partial sums covers:
// lane l holds codes 8l..8l+7.
var qmvLaneGroup = func() (t [3][16]int32) {
	for i, gs := range []int{32, 64, 128} {
		for l := range 16 {
			t[i][l] = int32(8 * l / gs)
		}
	}
	return
}()

// qmvLaneWord is qmvLaneGroup for the B kernels' VPERMW: per group size,
// word 2l+1 of lane l indexes the block's bfloat16 scale of lane l's group
// (word 2l is zeroed by the kernel's mask).
var qmvLaneWord = func() (t [3][32]uint16) {
	for i := range t {
		for l := range 16 {
			t[i][2*l+1] = uint16(qmvLaneGroup[i][l])
		}
	}
	return
}()

// qmvPool recycles the matvec's per-call scratch (x layouts, converted
// scales): a decode step makes hundreds of these calls, and fresh
// allocations would cost more than the small products themselves.
var qmvPool scratchPool[float32] // every user overwrites what it reads

// qmvDeintIdx holds, for VPERMI2W, the word indices (4w+j) mod 64 that
// gather nibble position j's x values (qmvDeinterleave).
var qmvDeintIdx = func() (t [4][32]uint16) {
	for j := range 4 {
		for w := range 32 {
			t[j][w] = uint16((4*w + j) % 64)
		}
	}
	return
}()

// qmvUsable reports whether qmvT can compute this product with x of dtype
// dt. float32 x keeps the float32 kernels: a hi+lo split loses more than
// MLX-level float32 accuracy allows, and a three-way split would be no
// faster than qdot4x4.
func qmvUsable(w qmat, dt tensor.DType) bool {
	return hasAVX512 && hasBF16 && (w.bits == 4 || w.bits == 8) && w.cols >= 32 &&
		(w.gs == 32 || w.gs == 64 || w.gs == 128) && w.cols%w.gs == 0 &&
		(dt == tensor.BFloat16 || dt == tensor.Float16)
}

// qmvT is qmmT (out[m, n] = Σ_k x[m, k]·W[n, k]) for 4- or 8-bit codes.
//
// An 8-bit code q = l + 16·h is the nibble pair (l, h) in memory order, so
// an 8-bit row of k codes is a 4-bit row of 2k codes against
// xk = (x_0, 16·x_0, x_1, 16·x_1, …) (exact: a power-of-two scaling) with
// groups of 2·gs codes; for gs = 128 the kernel's groups of 256 are split
// in two, each half with the group's scale and bias and its own x sum.
//
// raw is x as bfloat16 when that is its dtype (nil otherwise).
func qmvT(out, x []float32, raw []uint16, rows int, w qmat) {
	n, k, gs, ng := w.rows, w.cols, w.gs, w.groups()
	bpr := k * w.bits / 8
	kk, kgs := k, gs // the kernel's view: 4-bit codes per row and per group
	if w.bits == 8 {
		kk, kgs = 2*k, min(2*gs, 128)
	}
	split := w.bits == 8 && gs == 128 // two kernel groups per group
	kng := kk / kgs
	nb := (kk + 127) / 128
	nblk, tailw := kk/128, (kk%128)/4
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.words))), len(w.words)*4)
	// per row: the layout (128 bfloat16 per block), for float16 x the
	// residual layout after all rows' main ones, and the group sums
	ldx := 128 * nb
	nhi := rows * ldx
	nlo := 0
	if raw == nil {
		nlo = nhi
	}
	nu := (nhi + nlo + 1) / 2 // floats holding the layouts
	buf := qmvPool.get(nu + rows*kng)
	defer qmvPool.put(buf)
	f := *buf
	u := unsafe.Slice((*uint16)(unsafe.Pointer(&f[0])), 2*nu)
	hi, lo := u[:nhi], u[nhi:nhi+nlo]
	gsum := f[nu : nu+rows*kng]
	var lod atomic.Bool
	stageRows(rows, k, func(r0, r1 int) {
		if qmvPrepRows(hi, lo, gsum, x, raw, r0, r1, k, kk, kgs, kng, ldx, w.bits) {
			lod.Store(true)
		}
	})
	anyLo := lod.Load()
	// a row without residuals gives the same bits through XL (its
	// residuals are zeros, adding exact zeros to its chains)
	kern, kern2, loOff := qmvRowsX, qmvRows2X, 0
	kernB, kern2B := qmvRowsXB, qmvRows2XB
	if anyLo {
		kern, kern2, loOff = qmvRowsXL, qmvRows2XL, 2*nhi
		kernB, kern2B = qmvRowsXLB, qmvRows2XLB
	}
	sidx := &qmvLaneGroup[bits.TrailingZeros(uint(kgs))-5]
	widx := (*int32)(unsafe.Pointer(&qmvLaneWord[bits.TrailingZeros(uint(kgs))-5][0]))
	sblk := 128 / kgs * 4
	// bfloat16 scales whose kernel groups are the weight's own are read in
	// place by the B kernels, for every block of rows whose last block's
	// 64-byte scale read stays inside the scales' memory (qmvScalesInPlace)
	inPlace := qmvScalesInPlaceOn && w.sdt == tensor.BFloat16 && kng == ng
	pfd := max(qmvPrefetchBytes/bpr, 1) * bpr
	parallelFor(n, qmvRowBlock, func(r0, r1 int) {
		// scales and biases as float32 (per kernel group), padded for the
		// kernel's whole-vector reads past a row's last group
		sb := qmvPool.get(2*(qmvRowBlock*kng+16) + 2*qmvRowBlock*ng)
		defer qmvPool.put(sb)
		ab := qmvPool.get(qmvRowBlock * 8 * 32) // chunk accumulators (qmvChunk)
		defer qmvPool.put(ab)
		sv, bv := (*sb)[:qmvRowBlock*kng+16], (*sb)[qmvRowBlock*kng+16:2*(qmvRowBlock*kng+16)]
		for b0 := r0; b0 < r1; b0 += qmvRowBlock {
			b1 := min(b0+qmvRowBlock, r1)
			direct := inPlace && 2*b1*ng+64 <= cap(w.sc) && 2*b1*ng+64 <= cap(w.bi)
			switch {
			case direct: // the kernels read them where they are
			case split:
				s1 := (*sb)[2*(qmvRowBlock*kng+16):][:qmvRowBlock*ng]
				bb := (*sb)[2*(qmvRowBlock*kng+16)+qmvRowBlock*ng:][:qmvRowBlock*ng]
				w.rowScales(s1, bb, b0, b1)
				for i := range (b1 - b0) * ng {
					sv[2*i], sv[2*i+1] = s1[i], s1[i]
					bv[2*i], bv[2*i+1] = bb[i], bb[i]
				}
			default:
				w.rowScales(sv, bv, b0, b1)
			}
			// the next block's scales and biases come in while these rows run
			w.prefetchScales(b1, min(b1+qmvRowBlock, r1))
			for m0 := 0; m0 < rows; {
				nx := qmvPassRows(rows - m0)
				// the weight rows in pairs through the two-row kernel (x rows
				// read once for both), an odd last row through the one-row one
				even := 0
				if nx == 4 && qmvPairsOn {
					even = (b1 - b0) &^ 1
				}
				cb := qmvChunk(nx, nb, anyLo)
				spb := 128 / kgs // scales per block
				run := func(w0, w1 int, two bool) {
					// chunks of cb blocks (the last one takes the rest and the
					// tail), accumulators carried in acc; each chunk prefetches
					// the next one of the same rows, the last one the first
					// chunk of the next block of rows
					for c0 := 0; c0 < nblk || c0 == 0; c0 += cb {
						nc, flags, skip, pf := cb, 0, bpr-64*cb, 64*cb
						if c0 > 0 {
							flags |= qmvAccLoad
						}
						if c0+cb >= nblk {
							nc, flags, skip, pf = nblk-c0, flags|qmvAccFinish, 64*c0, (b1-b0)*bpr-64*c0
						}
						if cb >= nblk {
							pf = pfd
						}
						wp, xp, sp := &wb[w0*bpr+64*c0], &hi[m0*ldx+128*c0], &sv[(w0-b0)*kng+spb*c0]
						bp, op := &bv[(w0-b0)*kng], &out[m0*n+w0]
						if direct {
							sp = (*float32)(unsafe.Pointer(&w.sc[2*(w0*ng+spb*c0)]))
							bp = (*float32)(unsafe.Pointer(&w.bi[2*w0*ng]))
							if two {
								kern2B(wp, xp, loOff, 2*ldx, nc, tailw, sp, kng, sblk/2, widx, bp, &gsum[m0*kng], 4*kng,
									op, 4*n, w1-w0, pf, nx, &(*ab)[0], flags, skip, bpr)
							} else {
								kernB(wp, xp, loOff, 2*ldx, nc, tailw, sp, kng, sblk/2, widx, bp, &gsum[m0*kng], 4*kng,
									op, 4*n, w1-w0, pf, nx, &(*ab)[0], flags, skip)
							}
						} else if two {
							kern2(wp, xp, loOff, 2*ldx, nc, tailw, sp, kng, sblk, &sidx[0], bp, &gsum[m0*kng], 4*kng,
								op, 4*n, w1-w0, pf, nx, &(*ab)[0], flags, skip, bpr)
						} else {
							kern(wp, xp, loOff, 2*ldx, nc, tailw, sp, kng, sblk, &sidx[0], bp, &gsum[m0*kng], 4*kng,
								op, 4*n, w1-w0, pf, nx, &(*ab)[0], flags, skip)
						}
					}
				}
				if even > 0 {
					run(b0, b0+even, true)
				}
				if b0+even < b1 {
					run(b0+even, b1, false)
				}
				m0 += nx
			}
		}
	})
}

// qmvPrepRows lays x rows [r0, r1) out for qmvT's kernels (prepQMV per
// row, 8-bit weights' rows widened to nibble pairs first) and reports
// whether any row has non-zero residuals.
func qmvPrepRows(hi, lo []uint16, gsum, x []float32, raw []uint16, r0, r1, k, kk, kgs, kng, ldx, bits int) bool {
	var xk []float32
	var rk []uint16
	if bits == 8 {
		xk = make([]float32, kk)
		if raw != nil {
			rk = make([]uint16, kk)
		}
	}
	anyLo := false
	for m := r0; m < r1; m++ {
		xm := x[m*k : (m+1)*k]
		var rm []uint16
		if raw != nil {
			rm = raw[m*k : (m+1)*k]
		}
		xkm, rkm := xm, rm
		if bits == 8 {
			for i, v := range xm {
				xk[2*i], xk[2*i+1] = v, 16*v
			}
			for i, h := range rm {
				rk[2*i], rk[2*i+1] = h, tensor.F32ToBF16(16*math.Float32frombits(uint32(h)<<16))
			}
			xkm, rkm = xk, rk
		}
		var lom []uint16
		if raw == nil {
			lom = lo[m*ldx : (m+1)*ldx]
		}
		if prepQMV(hi[m*ldx:(m+1)*ldx], lom, gsum[m*kng:(m+1)*kng], xm, xkm, rkm, kk, kgs, kgs*k/kk/16) {
			anyLo = true
		}
	}
	return anyLo
}

// prepQMV lays one x row out for the kernels and fills its group sums.
// xk (k values; raw holds them as bfloat16 when x's dtype is bfloat16,
// else nil) is x as the kernel multiplies it, one value per 4-bit code:
// per 128-code block four runs of 32 values, run j holding xk[4w+j] (the
// codes in nibble j of each packed word), zero-padded to whole blocks. For
// raw x, hi is xk itself; otherwise hi = bf16(xk) and lo = bf16(xk − hi)
// (lo must be given then). The kernel's groups are gs codes; gsum holds
// the sums of x over each (vpg vectors of 16 values of x per group). It
// reports whether any residual is non-zero.
func prepQMV(hi, lo []uint16, gsum, x, xk []float32, raw []uint16, k, gs, vpg int) bool {
	nb := (k + 127) / 128
	full := k / 128
	ng := k / gs
	deint := func(dst, src []uint16) {
		if full > 0 {
			qmvDeinterleave(&dst[0], &src[0], full, &qmvDeintIdx[0][0])
		}
		if full < nb {
			var pad [128]uint16
			copy(pad[:], src[full*128:k])
			qmvDeinterleave(&dst[full*128], &pad[0], 1, &qmvDeintIdx[0][0])
		}
	}
	qmvGroupSums(&gsum[0], &x[0], ng, vpg)
	if raw != nil {
		deint(hi, raw)
		return false
	}
	h := make([]uint16, k)
	l := make([]uint16, k)
	needLo := false
	for i, v := range xk[:k] {
		b := tensor.F32ToBF16(v)
		h[i] = b
		if r := v - math.Float32frombits(uint32(b)<<16); r != 0 {
			l[i] = tensor.F32ToBF16(r)
			needLo = true
		}
	}
	deint(hi, h)
	deint(lo, l) // zeros where x is exactly bfloat16
	return needLo
}
