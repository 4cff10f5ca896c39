package cpu

import (
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// ropeInvFreqs returns the per-pair angular rates. Without freqs they are
// exp(-i·ln(base)/(dims/2)) computed in float32 the way MLX does it; with
// freqs they are float32 reciprocals of the given wavelengths.
func ropeInvFreqs(o tensor.RoPEOptions) []float32 {
	half := o.Dims / 2
	inv := make([]float32, half)
	if o.Freqs != nil {
		im, owned := contig(o.Freqs)
		if owned {
			defer im.buf.drop()
		}
		fusedLoad(inv, im.buf.data, im.off, o.Freqs.DType())
		for i, f := range inv {
			inv[i] = 1 / f
		}
		return inv
	}
	step := float32(math.Log(float64(o.Base))) / float32(half)
	for i := range inv {
		inv[i] = float32(math.Exp(float64(float32(float32(-i) * step))))
	}
	return inv
}

// ropeOffsets returns the first position of each batch entry (one value
// when the offset is shared).
func ropeOffsets(o tensor.RoPEOptions) []int {
	if o.OffsetArr == nil {
		return []int{o.Offset}
	}
	im := get(o.OffsetArr)
	n := o.OffsetArr.Size()
	out := make([]int, n)
	st := 0
	if o.OffsetArr.NDim() == 1 {
		st = im.strides[0]
	}
	for i := range out {
		out[i] = indexValue(im.buf.data, im.off+i*st, o.OffsetArr.DType())
	}
	return out
}

// RoPE rotates feature pairs by position-dependent angles with the
// numerics of MLX's CPU implementation: angles (offset+t)·scale·inv_freq
// in float32, cos and sin rounded to x's dtype, and each product and sum
// rounded to x's dtype, so 16-bit results match MLX bit for bit whenever
// the float32 angles do.
func (be *Backend) RoPE(x *tensor.Array, o tensor.RoPEOptions) *tensor.Array {
	shape := x.Shape()
	dt := x.DType()
	nd := len(shape)
	out, om := be.newArray(shape, dt)
	if x.Size() == 0 {
		return out
	}
	d, t := shape[nd-1], shape[nd-2]
	half := o.Dims / 2
	scale := o.Scale
	if scale == 0 {
		scale = 1
	}
	inv := ropeInvFreqs(o)
	offs := ropeOffsets(o)
	batch := 1
	if nd >= 3 {
		batch = shape[0]
	}
	if len(offs) != 1 && len(offs) != batch {
		panic(&tensor.Error{Op: "RoPE", Err: tensor.ErrShape})
	}
	// cos/sin tables per distinct offset: [len(offs)][t][half]
	cos := make([]float32, len(offs)*t*half)
	sin := make([]float32, len(cos))
	for b, off := range offs {
		for p := range t {
			pos := float32(float32(p)+float32(off)) * scale
			base := (b*t + p) * half
			for i, f := range inv {
				th := float64(float32(pos * f))
				cos[base+i] = tensor.RoundTo(float32(math.Cos(th)), dt)
				sin[base+i] = tensor.RoundTo(float32(math.Sin(th)), dt)
			}
		}
	}
	xi, owned := fusedLastDense(x)
	if owned {
		defer xi.buf.drop()
	}
	rows := fusedRowOffsets(xi, shape)
	perBatch := len(rows) / batch
	parallelFor(len(rows), max(1, 4096/max(d, 1)), func(lo, hi int) {
		row := make([]float32, d)
		pa, pb, pe, pf := make([]float32, half), make([]float32, half), make([]float32, half), make([]float32, half)
		for r := lo; r < hi; r++ {
			fusedLoad(row, xi.buf.data, rows[r], dt)
			b := 0
			if len(offs) > 1 {
				b = r / perBatch
			}
			tb := (b*t + r%t) * half
			c, s := cos[tb:tb+half], sin[tb:tb+half]
			// each product rounded to x's dtype (a row at a time,
			// vectorized; nothing for float32), then the sums
			for i := range half {
				j1, j2 := i, i+half
				if o.Traditional {
					j1, j2 = 2*i, 2*i+1
				}
				x1, x2 := row[j1], row[j2]
				pa[i] = float32(x1 * c[i])
				pb[i] = float32(x2 * s[i])
				pe[i] = float32(x1 * s[i])
				pf[i] = float32(x2 * c[i])
			}
			fusedRoundRow(pa, dt)
			fusedRoundRow(pb, dt)
			fusedRoundRow(pe, dt)
			fusedRoundRow(pf, dt)
			for i := range half {
				j1, j2 := i, i+half
				if o.Traditional {
					j1, j2 = 2*i, 2*i+1
				}
				row[j1] = pa[i] - pb[i]
				row[j2] = pe[i] + pf[i]
			}
			fusedStore(om.buf.data, om.off+r*d, row, dt)
		}
	})
	return out
}
