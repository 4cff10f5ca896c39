package cpu

import (
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// MLX's affine quantization, byte for byte as its CPU backend computes it.
//
// Each group of groupSize consecutive values along the last axis becomes
// w ≈ scale·q + bias with q in [0, 2^bits-1]. The codes of a row form one
// little-endian bit stream: code j occupies bits [j·bits, (j+1)·bits) of the
// row, so 3-, 5- and 6-bit codes straddle bytes and words. A group always
// fills whole uint32 words (groupSize·bits is a multiple of 32).

// quantEps is the smallest scale MLX allows (a float32 constant there too).
const quantEps = float32(1e-7)

// rint rounds half to even, as C's rint does in the default rounding mode.
func rint(x float32) float32 { return float32(math.RoundToEven(float64(x))) }

// toF32 converts n elements of dtype dt at b (dense) into dst.
func toF32(dst []float32, b []byte, dt tensor.DType) {
	switch dt {
	case tensor.Float32:
		copy(dst, f32s(b))
	case tensor.BFloat16:
		u := u16s(b)[:len(dst)]
		switch {
		case hasAVX512:
			cvtBF16ToF32(dst, u)
			return
		case hasAVX2:
			cvtBF16ToF32Y(dst, u)
			return
		}
		for i, h := range u {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
	case tensor.Float16:
		loadF16(dst, u16s(b)) // bit for bit, NaN payloads included
	}
}

// fromF32 stores src into dense storage of dtype dt (round to nearest even).
func fromF32(b []byte, src []float32, dt tensor.DType) { fusedStore(b, 0, src, dt) }

// quantizeGroup computes one group's scale, bias and codes the way MLX's
// CPU kernel does: all arithmetic in float32, the scale's sign chosen so that
// the edge of larger magnitude maps exactly to code 0, and the scale and
// bias used unrounded for the codes (they are rounded to w's dtype only when
// stored).
func quantizeGroup(w []float32, codes []uint8, bits int) (scale, bias float32) {
	nBins := float32(int(1)<<bits - 1)
	wMin, wMax := float32(math.Inf(1)), float32(math.Inf(-1))
	for _, v := range w {
		wMax = max(wMax, v)
		wMin = min(wMin, v)
	}
	mask := abs32(wMin) > abs32(wMax)
	scale = max((wMax-wMin)/nBins, quantEps)
	if !mask {
		scale = -scale
	}
	edge := wMax
	if mask {
		edge = wMin
	}
	q0 := rint(edge / scale)
	if q0 != 0 {
		scale = edge / q0
		bias = edge
	}
	for j, v := range w {
		q := rint((v - bias) / scale)
		q = min(max(q, 0), nBins)
		codes[j] = uint8(q)
	}
	return scale, bias
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// unpackCodes reads len(codes) bits-wide fields from a little-endian bit stream.
func unpackCodes(codes []uint8, src []uint32, bits int) {
	switch bits {
	case 4:
		for i, w := range src[:len(codes)/8] {
			c := codes[i*8 : i*8+8]
			for p := range c {
				c[p] = uint8(w>>(4*p)) & 15
			}
		}
		return
	case 8:
		for i, w := range src[:len(codes)/4] {
			c := codes[i*4 : i*4+4]
			c[0], c[1], c[2], c[3] = uint8(w), uint8(w>>8), uint8(w>>16), uint8(w>>24)
		}
		return
	}
	mask := uint64(1)<<bits - 1
	var acc uint64
	n, in := 0, 0
	for j := range codes {
		if n < bits {
			acc |= uint64(src[in]) << n
			in++
			n += 32
		}
		codes[j] = uint8(acc & mask)
		acc >>= bits
		n -= bits
	}
}

// Quantize packs w in MLX's affine format.
func (be *Backend) Quantize(w *tensor.Array, groupSize, bits int) (wq, scales, biases *tensor.Array) {
	shape := w.Shape()
	k := shape[len(shape)-1]
	rows := w.Size() / max(k, 1)
	dt := w.DType()
	qShape := append(shapeOf(w)[:len(shape)-1], k*bits/32)
	sShape := append(shapeOf(w)[:len(shape)-1], k/groupSize)
	wq, qi := be.newArray(qShape, tensor.Uint32)
	scales, si := be.newArray(sShape, dt)
	biases, bi := be.newArray(sShape, dt)
	if rows == 0 || k == 0 {
		return
	}
	src, owned := contig(w)
	if owned {
		defer src.buf.drop()
	}
	es := dt.Size()
	in := bytesOf(src, w.Size(), es)
	qw := u32s(qi.buf.data)
	ng := k / groupSize
	wpg := groupSize * bits / 32 // words per group
	sb, bb := si.buf.data, bi.buf.data
	parallelFor(rows, max(1, 16384/k), func(lo, hi int) {
		row := make([]float32, k)
		codes := make([]uint8, groupSize)
		sv := make([]float32, ng)
		bv := make([]float32, ng)
		for r := lo; r < hi; r++ {
			toF32(row, in[r*k*es:(r+1)*k*es], dt)
			for g := range ng {
				sv[g], bv[g] = quantizeGroup(row[g*groupSize:(g+1)*groupSize], codes, bits)
				tensor.PackCodes(qw[(r*ng+g)*wpg:(r*ng+g+1)*wpg], codes, bits)
			}
			fromF32(sb[r*ng*es:(r+1)*ng*es], sv, dt)
			fromF32(bb[r*ng*es:(r+1)*ng*es], bv, dt)
		}
	})
	return
}

// Dequantize unpacks into dt. It follows MLX's arithmetic: q·scale and then
// +bias, each rounded to the scales' dtype, and the result converted to dt.
func (be *Backend) Dequantize(wq, scales, biases *tensor.Array, groupSize, bits int, dt tensor.DType) *tensor.Array {
	shape := shapeOf(wq)
	words := shape[len(shape)-1]
	k := words * 32 / bits
	shape[len(shape)-1] = k
	out, oi := be.newArray(shape, dt)
	rows := wq.Size() / max(words, 1)
	if rows == 0 || k == 0 {
		return out
	}
	qc, qo := contig(wq)
	sc, so := contig(scales)
	bc, bo := contig(biases)
	defer func() {
		for _, p := range []struct {
			im    *impl
			owned bool
		}{{qc, qo}, {sc, so}, {bc, bo}} {
			if p.owned {
				p.im.buf.drop()
			}
		}
	}()
	sdt := scales.DType()
	ses := sdt.Size()
	ng := k / groupSize
	qw := u32s(bytesOf(qc, wq.Size(), 4))
	sb := bytesOf(sc, scales.Size(), ses)
	bb := bytesOf(bc, biases.Size(), ses)
	odata := oi.buf.data
	oes := dt.Size()
	parallelFor(rows, max(1, 16384/k), func(lo, hi int) {
		codes := make([]uint8, k)
		sv := make([]float32, ng)
		bv := make([]float32, ng)
		vals := make([]float32, k)
		for r := lo; r < hi; r++ {
			unpackCodes(codes, qw[r*words:(r+1)*words], bits)
			toF32(sv, sb[r*ng*ses:(r+1)*ng*ses], sdt)
			toF32(bv, bb[r*ng*ses:(r+1)*ng*ses], sdt)
			if sdt == tensor.Float16 {
				// the same products, sums and roundings as below, the
				// roundings a row at a time (vectorized)
				for g := range ng {
					s := sv[g]
					for j := g * groupSize; j < (g+1)*groupSize; j++ {
						vals[j] = float32(float32(codes[j]) * s)
					}
				}
				fusedRoundRow(vals, sdt)
				for g := range ng {
					b := bv[g]
					for j := g * groupSize; j < (g+1)*groupSize; j++ {
						vals[j] = float32(vals[j] + b)
					}
				}
				fusedRoundRow(vals, sdt)
				fromF32(odata[r*k*oes:(r+1)*k*oes], vals, dt)
				continue
			}
			for g := range ng {
				s, b := sv[g], bv[g]
				for j := g * groupSize; j < (g+1)*groupSize; j++ {
					// explicit conversions keep the product and the sum as
					// two separately rounded operations (no FMA)
					v := tensor.RoundTo(float32(float32(codes[j])*s), sdt)
					vals[j] = tensor.RoundTo(float32(v+b), sdt)
				}
			}
			fromF32(odata[r*k*oes:(r+1)*k*oes], vals, dt)
		}
	})
	return out
}
