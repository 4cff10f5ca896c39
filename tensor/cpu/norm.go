package cpu

import (
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// Float row helpers shared by the fused kernels: they widen 16-bit floats
// to float32 for computing and narrow results back with round-to-nearest-even.

// fusedLoad widens n elements of dtype dt starting at element off (stride
// 1) of data into dst.
func fusedLoad(dst []float32, data []byte, off int, dt tensor.DType) {
	n := len(dst)
	switch dt {
	case tensor.Float32:
		copy(dst, f32s(data[4*off:4*(off+n)]))
	case tensor.BFloat16:
		src := u16s(data[2*off : 2*(off+n)])
		if hasAVX512 && n >= 16 {
			cvtBF16ToF32(dst, src) // the same bits, 16 at a time
			return
		}
		for i, h := range src {
			dst[i] = math.Float32frombits(uint32(h) << 16)
		}
	case tensor.Float16:
		loadF16(dst, u16s(data[2*off:2*(off+n)]))
	default:
		for i := range dst {
			dst[i] = float32(indexValue(data, off+i, dt))
		}
	}
}

// fusedStore narrows src into dtype dt at element off of data.
func fusedStore(data []byte, off int, src []float32, dt tensor.DType) {
	n := len(src)
	switch dt {
	case tensor.Float32:
		copy(f32s(data[4*off:4*(off+n)]), src)
	case tensor.BFloat16:
		storeBF16(u16s(data[2*off:2*(off+n)]), src)
	case tensor.Float16:
		storeF16(u16s(data[2*off:2*(off+n)]), src)
	}
}

// fusedRoundRow applies fusedRound to every element of v.
func fusedRoundRow(v []float32, dt tensor.DType) {
	if dt == tensor.Float32 {
		return
	}
	if dt == tensor.Float16 && (hasAVX512 || hasAVX2) && len(v) >= 8 {
		roundRow16(v, storeF16, loadF16)
		return
	}
	if dt == tensor.BFloat16 && hasAVX512 && len(v) >= 16 {
		roundRow16(v, storeBF16, cvtBF16ToF32)
		return
	}
	for i := range v {
		v[i] = tensor.RoundTo(v[i], dt)
	}
}

// roundRow16 rounds v to a 16-bit float type and back in place, a block at
// a time through a stack buffer: store narrows (storeF16, storeBF16: bit
// for bit tensor.F32ToF16 and F32ToBF16) and load widens exactly, so the
// result is tensor.RoundTo's.
func roundRow16(v []float32, store func([]uint16, []float32), load func([]float32, []uint16)) {
	var h [512]uint16
	for len(v) > 0 {
		c := v[:min(len(v), len(h))]
		store(h[:len(c)], c)
		load(c, h[:len(c)])
		v = v[len(c):]
	}
}

// fusedRowOffsets returns the element offset of every row (last axis) of the
// strided view im of shape, in row-major order.
func fusedRowOffsets(im *impl, shape []int) []int {
	nd := len(shape)
	lead := shape[:nd-1]
	rows := numel(lead)
	offs := make([]int, rows)
	if rows == 0 {
		return offs
	}
	zero := make([]int, nd-1)
	k := 0
	indexOdometer(lead, im.off, im.strides[:nd-1], 0, zero, func(_ []int, o, _ int) {
		offs[k] = o
		k++
	})
	return offs
}

// fusedLastDense returns a view of a whose last axis has stride 1 (a itself or
// a dense copy to drop), so row kernels can read rows as slices.
func fusedLastDense(a *tensor.Array) (im *impl, owned bool) {
	im = get(a)
	nd := a.NDim()
	if nd == 0 || a.Shape()[nd-1] <= 1 || im.strides[nd-1] == 1 {
		return im, false
	}
	return contig(a)
}

// normParam loads an optional [D] parameter (weight or bias) rounded to
// dt, as MLX casts it to the output type before applying it, into a
// buffer from normScratch (nil for a nil p); give buf back with normPut.
func normParam(p *tensor.Array, d int, dt tensor.DType) (v []float32, buf *[]float32) {
	if p == nil {
		return nil, nil
	}
	im, owned := contig(p)
	if owned {
		defer im.buf.drop()
	}
	b := normScratch.get(d)
	fusedLoad(*b, im.buf.data, im.off, p.DType())
	fusedRoundRow(*b, dt)
	return *b, b
}

// normPut gives a normParam buffer back (nil: nothing to give).
func normPut(b *[]float32) {
	if b != nil {
		normScratch.put(b)
	}
}

// normScratch recycles the norms' float32 rows and widened parameters: a
// decode step runs dozens of norms of one short row, where allocating them
// cost more than the arithmetic (BenchmarkRMSNorm/rows=1/d=2048: 5.7-6.1 µs
// allocating, 1.1 µs pooled).
var normScratch sizedScratch

// normSumSq is Σv² accumulated in float32 over eight lanes, the way a
// vectorised float32 reduction would.
func normSumSq(v []float32) float32 {
	var acc [8]float32
	i := 0
	if hasAVX512 && len(v) >= 8 {
		i = len(v) &^ 7
		ewSumSq8(&acc, &v[0], i) // the same lanes in one register
	}
	for ; i+8 <= len(v); i += 8 {
		for l := range 8 {
			acc[l] += float32(v[i+l] * v[i+l])
		}
	}
	var s float32
	for ; i < len(v); i++ {
		s += float32(v[i] * v[i])
	}
	return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

// normSum is Σv accumulated in float32 over eight lanes.
func normSum(v []float32) float32 {
	var acc [8]float32
	i := 0
	for ; i+8 <= len(v); i += 8 {
		for l := range 8 {
			acc[l] += v[i+l]
		}
	}
	var s float32
	for ; i < len(v); i++ {
		s += v[i]
	}
	return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

// normScale divides row by its root mean square (plus eps under the
// root) in float32 and rounds the result to dt: the step RMSNorm and
// LayerNorm (on the centred row) share.
func normScale(row []float32, invD, eps float32, dt tensor.DType) {
	ms := float32(normSumSq(row)*invD) + eps
	inv := float32(1 / float32(math.Sqrt(float64(ms))))
	normMulScalar(row, inv)
	fusedRoundRow(row, dt)
}

// normMulScalar sets row[i] = row[i]·a in float32.
func normMulScalar(row []float32, a float32) {
	i := 0
	if hasAVX512 && len(row) >= 16 {
		i = len(row) &^ 15
		ewScaleF32(&row[0], &row[0], a, i)
	}
	for ; i < len(row); i++ {
		row[i] = float32(row[i] * a)
	}
}

// normRows runs f on every row of x (last axis) in parallel with a float32
// scratch row, writing the result into a new dense array of x's dtype.
func (be *Backend) normRows(x *tensor.Array, f func(row []float32)) *tensor.Array {
	shape := x.Shape()
	dt := x.DType()
	out, om := be.newArray(shape, dt)
	d := shape[len(shape)-1]
	if x.Size() == 0 {
		return out
	}
	xi, owned := fusedLastDense(x)
	if owned {
		defer xi.buf.drop()
	}
	offs := fusedRowOffsets(xi, shape)
	parallelFor(len(offs), max(1, 8192/max(d, 1)), func(lo, hi int) {
		rb := normScratch.get(d)
		defer normScratch.put(rb)
		row := *rb
		for r := lo; r < hi; r++ {
			fusedLoad(row, xi.buf.data, offs[r], dt)
			f(row)
			fusedStore(om.buf.data, om.off+r*d, row, dt)
		}
	})
	return out
}

// RMSNorm follows MLX's rounding order: x·rsqrt(mean(x²)+eps) is formed in
// float32 and rounded to x's dtype, and only then multiplied by w in that
// dtype (so bf16 results round twice, exactly as MLX's do).
func (be *Backend) RMSNorm(x, w *tensor.Array, eps float32) *tensor.Array {
	dt := x.DType()
	d := x.Shape()[x.NDim()-1]
	wv, wb := normParam(w, d, dt)
	defer normPut(wb)
	invD := float32(1) / float32(d)
	return be.normRows(x, func(row []float32) {
		normScale(row, invD, eps, dt)
		if wv != nil {
			ewBinaryF32(tensor.OpMul, row, row, wv)
		}
	})
}

// LayerNorm follows MLX's rounding order: the normalised row is formed in
// float32 and rounded to x's dtype, then scaled by w and shifted by b in
// that dtype, each step rounding.
func (be *Backend) LayerNorm(x, w, b *tensor.Array, eps float32) *tensor.Array {
	dt := x.DType()
	d := x.Shape()[x.NDim()-1]
	wv, wb := normParam(w, d, dt)
	defer normPut(wb)
	bv, bb := normParam(b, d, dt)
	defer normPut(bb)
	invD := float32(1) / float32(d)
	return be.normRows(x, func(row []float32) {
		mu := float32(normSum(row) * invD)
		for i := range row {
			row[i] -= mu
		}
		normScale(row, invD, eps, dt)
		if wv != nil {
			if dt == tensor.Float16 {
				for i := range row {
					row[i] = float32(row[i] * wv[i])
				}
				fusedRoundRow(row, dt)
			} else {
				for i := range row {
					row[i] = tensor.RoundTo(float32(row[i]*wv[i]), dt)
				}
			}
		}
		if bv != nil {
			for i := range row {
				row[i] += bv[i]
			}
		}
	})
}
