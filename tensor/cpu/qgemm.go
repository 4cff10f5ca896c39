package cpu

import (
	"math"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// Prefill-time (many x rows) 4- and 8-bit quantized matmul on
// AVX512_BF16.
//
// Per 32 weight rows (output columns) the codes are unpacked once into a
// panel of bfloat16 values, exact (codes are integers below 256), laid
// out per k pair as 32 dwords, dword i holding (q[i, 2p], q[i, 2p+1]); a
// 6×32 register tile then runs VDPBF16PS over the panel, each x row's
// bfloat16 pair (x[2p], x[2p+1]) broadcast to all lanes, so 12
// instructions do 384 multiply-adds per k pair. The panel is unpacked and
// run in chunks of qgKC codes that stay in L1 while every tile of x rows
// passes over them (partial sums kept in a per-panel float32 block). Each
// group's dots are summed on their own and folded in as acc += s·dot +
// b·Σx (Σx per x row and group computed once per call), so the scales and
// biases cost two FMAs per group per accumulator.
//
// Precision: a code (≤ 8 significant bits) times a bfloat16 x value is
// exact in float32, so for bfloat16 x the only error is float32
// accumulation of Σ|s·q·x| and Σ|b·x| — the same as a float32 dot. A
// float16 x is split into hi = bf16(x) and lo = bf16(x − hi), both exact
// (hi + lo = x: 11 significant bits fit in two 8-bit halves), and both run
// through the panel, so float16 keeps the same bound at twice the work.
// float32 x keeps qmmT. VDPBF16PS flushes bfloat16 subnormals (|x| <
// 2⁻¹²⁶) to zero. TestQGemmExact holds the kernel to this bound against
// float64.

const (
	qgMR = 6  // x rows per tile
	qgNR = 32 // weight rows (output columns) per panel
	// qgKC is the depth of a panel chunk: 256 codes make 16 KiB of
	// bfloat16 pairs, which stay in L1 while every x tile runs over them
	// (from L2 the kernel runs at about half speed).
	qgKC = 256
)

// qgemmUsable reports whether qgemmT computes this product: batches past
// the matvec's, 4- or 8-bit codes, MLX group sizes, bfloat16 or float16 x.
func qgemmUsable(rows int, w qmat, dt tensor.DType) bool {
	return hasAVX512 && hasBF16 && rows > qmvMaxRows && (w.bits == 4 || w.bits == 8) &&
		(w.gs == 32 || w.gs == 64 || w.gs == 128) && w.cols%w.gs == 0 &&
		(dt == tensor.BFloat16 || dt == tensor.Float16)
}

// qgPool recycles the per-worker panels (up to a few hundred KiB each):
// prefill calls this for every Linear layer.
var qgPool scratchPool[uint32]

// qgemmT is qmmT (out[m, n] = Σ_k x[m, k]·W[n, k]) on the bfloat16
// panels. x holds the rows as float32 (exactly their dtype's values); raw
// is x as bfloat16 when that is its dtype, else nil (float16: split).
func qgemmT(out, x []float32, raw []uint16, rows int, w qmat) {
	n, k, gs, ng := w.rows, w.cols, w.gs, w.groups()
	mp := (rows + qgMR - 1) / qgMR * qgMR
	// x as bfloat16 rows (padded to whole tiles with zeros); for float16 x
	// the residual rows follow at xlo
	split := raw == nil
	nx := mp * k
	if split {
		nx *= 2
	}
	xb := make([]uint16, nx)
	if !split {
		copy(xb, raw[:rows*k])
	} else {
		for i, v := range x[:rows*k] {
			h := tensor.F32ToBF16(v)
			xb[i] = h
			xb[mp*k+i] = tensor.F32ToBF16(v - math.Float32frombits(uint32(h)<<16))
		}
	}
	xlo := 0
	if split {
		xlo = 2 * mp * k
	}
	// Σx per row and group (of the exact x)
	xs := make([]float32, mp*ng)
	for m := range rows {
		xr := x[m*k : (m+1)*k]
		for g := range ng {
			var s float32
			for _, v := range xr[g*gs : (g+1)*gs] {
				s += v
			}
			xs[m*ng+g] = s
		}
	}
	bpr := k * w.bits / 8
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.words))), len(w.words)*4)
	var idx [16]int32
	for i := range idx {
		idx[i] = int32(i * bpr)
	}
	panels := (n + qgNR - 1) / qgNR
	parallelFor(panels, 1, func(lo, hi int) {
		pb := qgPool.get(qgKC/2*qgNR + 4*qgNR*ng + mp*qgNR)
		defer qgPool.put(pb)
		pan := (*pb)[:qgKC/2*qgNR]
		f := unsafe.Slice((*float32)(unsafe.Pointer(&(*pb)[qgKC/2*qgNR])), 4*qgNR*ng+mp*qgNR)
		sb := f[:2*qgNR*ng]
		sv, bv := f[2*qgNR*ng:3*qgNR*ng], f[3*qgNR*ng:4*qgNR*ng]
		acc := f[4*qgNR*ng:]
		for p := lo; p < hi; p++ {
			n0 := p * qgNR
			nv := min(qgNR, n-n0)
			w.rowScales(sv, bv, n0, n0+nv)
			clear(sb)
			for i := range nv {
				for g := range ng {
					sb[g*2*qgNR+i] = sv[i*ng+g]
					sb[g*2*qgNR+qgNR+i] = bv[i*ng+g]
				}
			}
			for k0 := 0; k0 < k; k0 += qgKC {
				kc := min(qgKC, k-k0)
				g0, cng := k0/gs, kc/gs
				for h := range 2 {
					rh := min(max(nv-16*h, 0), 16)
					base := &wb[n0*bpr+k0*w.bits/8]
					if rh > 0 {
						base = &wb[(n0+16*h)*bpr+k0*w.bits/8]
					}
					qgemmUnpack(&pan[16*h], base, kc*w.bits/32, &idx[0], 1<<rh-1, w.bits)
				}
				first := 1
				if k0 == 0 {
					first = 0
				}
				for m0 := 0; m0 < mp; m0 += qgMR {
					qgemmKern(&pan[0], &xb[m0*k+k0], 2*k, xlo, &sb[g0*2*qgNR], &xs[m0*ng+g0], 4*ng, cng, gs/2,
						&acc[m0*qgNR], 4*qgNR, first)
				}
			}
			for m := range rows {
				copy(out[m*n+n0:m*n+n0+nv], acc[m*qgNR:m*qgNR+nv])
			}
		}
	})
}

// storeBF16 rounds src into u (bfloat16, as tensor.F32ToBF16), 16 at a
// time with AVX-512: a prefill product's outputs are millions of values.
func storeBF16(u []uint16, src []float32) {
	u = u[:len(src)]
	i := 0
	if hasAVX512 && len(src) >= 16 {
		i = len(src) &^ 15
		cvtF32ToBF16(&u[0], &src[0], i)
	}
	for ; i < len(src); i++ {
		u[i] = tensor.F32ToBF16(src[i])
	}
}
