package cpu

import (
	"math"
	"math/bits"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// Decode-time (few x rows) 4- and 8-bit quantized matvec on AVX512_BF16
// (8-bit rows run as 4-bit rows of nibble pairs, see qmvT).
//
// For bfloat16 x (qmv4bf16) the product Σ_k x_k·(s_g·q_k + b_g) is
// computed as
// Σ_g s_g·(Σ_{k∈g} (128+q_k)·x_k) + Σ_g (b_g·X_g − 128·s_g·X_g), X_g the
// group sums of x (computed once per call). 128 + q is a bfloat16 made
// from the packed nibble by two integer ops (mask, or 0x4300), so the
// first sum runs on VDPBF16PS straight from the packed words with no
// per-weight conversion or table lookup; the rest is a short dot over
// groups per row. The weights are read as one sequential stream per
// worker, prefetched ahead (qmvPrefetchBytes).
//
// Precision: 128 + q (≤ 143) and a bfloat16 x both have 8-bit
// significands, so every product is exact in float32 and the only error
// is float32 accumulation, over terms up to ~18× larger than s·q·x (the
// offset) — a few float32 ulps of Σ|s·(128+q)·x|, ~10⁻⁶ relative, far
// below a bfloat16 result's 2⁻⁹.
//
// float16 results are 4× finer than bfloat16 ones, so for float16 x
// (qmv4bf16x) the codes are looked up exactly (q itself, VPERMW on a
// 16-entry table: two more shuffles per 128 weights) and x is split into
// hi = bf16(x) and lo = bf16(x − hi), both through VDPBF16PS: hi + lo
// carries 16 significant bits, all of a float16's 11, so the only error is
// float32 accumulation of Σ|s·q·x|. float32 x stays on the float32
// kernels (see qmvUsable). VDPBF16PS treats subnormal inputs as zero
// (|x| < 2⁻¹²⁶ only). TestQMVExact holds the kernels to these bounds
// against float64.

// qmvMaxRows is the largest x row count the matvec path takes; bigger
// batches amortize unpacking the codes once (qgemmT) instead.
const qmvMaxRows = 7

// qmvPrefetchBytes is about how far ahead of its reads the kernel
// prefetches weights (rounded to whole rows): enough to cover DRAM latency
// at full bandwidth.
const qmvPrefetchBytes = 16 << 10

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

// qmvX is one x row in the kernel's layout.
type qmvX struct {
	hi, lo []uint16  // per 128-code block: 4 runs of 32 (codes 4w+j, j = 0..3)
	gsum   []float32 // per group Σ x
	gxo    []float32 // per group −128·Σ x, cancelling the kernel's offset
}

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

// prepQMV lays x out for the kernels. xk (k values, raw holds them as
// bfloat16 when x's dtype is bfloat16, else nil) is x as the kernel
// multiplies it, one value per 4-bit code: per 128-code block four runs of
// 32 values, run j holding xk[4w+j] (the codes in nibble j of each packed
// word), zero-padded to whole blocks; lo is nil when every value is
// exactly a bfloat16. The kernel's groups are gs codes; gsum holds the
// sums of x over each (vpg vectors of 16 values of x per group) and, for
// the offset kernel (raw set), gxo = −128·Σ xk per group.
//
// The layouts live in buf (from qmvPool, returned to the pool by the
// caller).
func prepQMV(x, xk []float32, raw []uint16, k, gs, vpg int) (qmvX, *[]float32) {
	nb := (k + 127) / 128
	full := k / 128
	ng := k / gs
	buf := qmvPool.get(2*64*nb + 2*ng) // hi and lo (bf16), gsum, gxo
	f := *buf
	all := unsafe.Slice((*uint16)(unsafe.Pointer(&f[0])), 2*128*nb)
	hi := all[:128*nb]
	var lo []uint16
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
	gsum := f[128*nb : 128*nb+ng]
	qmvGroupSums(&gsum[0], &x[0], ng, vpg)
	gxo := f[128*nb+ng : 128*nb+2*ng]
	if raw != nil {
		deint(hi, raw)
		// cancels the offset kernel's 128·Σxk excess (zeros for the exact
		// kernel)
		qmvGroupSums(&gxo[0], &xk[0], ng, gs/16)
		for g, v := range gxo {
			gxo[g] = -128 * v
		}
	} else {
		clear(gxo) // the exact kernel still adds Σ s·gxo
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
		if needLo {
			lo = all[128*nb:]
			deint(lo, l)
		}
	}
	return qmvX{hi: hi, lo: lo, gsum: gsum, gxo: gxo}, buf
}

// qmvUsable reports whether qmvT can compute this product with x of dtype
// dt. float32 x keeps the float32 kernels: a hi+lo split loses more than
// MLX-level float32 accuracy allows, and a three-way split would be no
// faster than qdot4x4.
func qmvUsable(rows int, w qmat, dt tensor.DType) bool {
	return hasAVX512 && hasBF16 && (w.bits == 4 || w.bits == 8) && rows <= qmvMaxRows && w.cols >= 32 &&
		(w.gs == 32 || w.gs == 64 || w.gs == 128) &&
		(dt == tensor.BFloat16 || dt == tensor.Float16)
}

// qmvT is qmmT (out[m, n] = Σ_k x[m, k]·W[n, k]) for a few x rows and
// 4- or 8-bit codes. Workers own contiguous row ranges and walk them in
// blocks of 64 rows, each read from memory once and reused from cache for
// every x row.
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
	nblk, tailw := kk/128, (kk%128)/4
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.words))), len(w.words)*4)
	xs := make([]qmvX, rows)
	var xk []float32
	var rk []uint16
	if w.bits == 8 {
		xk = make([]float32, kk)
		if raw != nil {
			rk = make([]uint16, kk)
		}
	}
	for m := range xs {
		xm := x[m*k : (m+1)*k]
		var rm []uint16
		if raw != nil {
			rm = raw[m*k : (m+1)*k]
		}
		xkm, rkm := xm, rm
		if w.bits == 8 {
			for i, v := range xm {
				xk[2*i], xk[2*i+1] = v, 16*v
			}
			for i, h := range rm {
				rk[2*i], rk[2*i+1] = h, tensor.F32ToBF16(16*math.Float32frombits(uint32(h)<<16))
			}
			xkm, rkm = xk, rk
		}
		var buf *[]float32
		xs[m], buf = prepQMV(xm, xkm, rkm, kk, kgs, kgs*k/kk/16)
		defer qmvPool.put(buf)
	}
	sidx := &qmvLaneGroup[bits.TrailingZeros(uint(kgs))-5]
	sblk := 128 / kgs * 4
	pfd := max(qmvPrefetchBytes/bpr, 1) * bpr
	kern := qmv4bf16x
	if raw != nil {
		kern = qmv4bf16
	}
	const rowBlock = 64
	parallelFor(n, rowBlock, func(lo, hi int) {
		// scales and biases as float32 (per kernel group), padded for the
		// kernel's whole-vector reads past a row's last group
		buf := qmvPool.get(2*(rowBlock*kng+16) + 2*rowBlock*ng)
		defer qmvPool.put(buf)
		sv, bv := (*buf)[:rowBlock*kng+16], (*buf)[rowBlock*kng+16:2*(rowBlock*kng+16)]
		for r0 := lo; r0 < hi; r0 += rowBlock {
			r1 := min(r0+rowBlock, hi)
			if split {
				s1 := (*buf)[2*(rowBlock*kng+16):][:rowBlock*ng]
				b1 := (*buf)[2*(rowBlock*kng+16)+rowBlock*ng:][:rowBlock*ng]
				w.rowScales(s1, b1, r0, r1)
				for i := range (r1 - r0) * ng {
					sv[2*i], sv[2*i+1] = s1[i], s1[i]
					bv[2*i], bv[2*i+1] = b1[i], b1[i]
				}
			} else {
				w.rowScales(sv, bv, r0, r1)
			}
			for m := range rows {
				x := &xs[m]
				var xlo *uint16
				if x.lo != nil {
					xlo = &x.lo[0]
				}
				kern(&wb[r0*bpr], &x.hi[0], xlo, nblk, tailw, &sv[0], kng, sblk,
					&sidx[0], &bv[0], &x.gsum[0], &x.gxo[0], &out[m*n+r0], r1-r0, pfd)
			}
		}
	})
}
