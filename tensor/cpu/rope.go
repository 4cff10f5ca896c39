package cpu

import (
	"math"
	"slices"
	"sync"

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
	offs := ropeOffsets(o)
	batch := 1
	if x.NDim() >= 3 {
		batch = x.Dim(0)
	}
	if len(offs) != 1 && len(offs) != batch {
		panic(&tensor.Error{Op: "RoPE", Err: tensor.ErrShape})
	}
	return be.rope(x, o, len(offs), func(b, p int) (int, int) { return p, offs[b] })
}

// RoPESpans rotates each span of x's tokens from its own offset in one
// pass, the bits RoPE gives each span alone (see tensor.RoPESpans).
func (be *Backend) RoPESpans(x *tensor.Array, o tensor.RoPEOptions, spans []tensor.RoPESpan) *tensor.Array {
	rel := make([]int, 0, x.Dim(-2))
	off := make([]int, 0, x.Dim(-2))
	for _, s := range spans {
		for p := range s.Len {
			rel, off = append(rel, p), append(off, s.Offset)
		}
	}
	return be.rope(x, o, 1, func(_, p int) (int, int) { return rel[p], off[p] })
}

// rope is RoPE with tables for nb batch entries (every entry shares
// table 0 when nb is 1): token p of entry b is rotated at position
// float32(rel)+float32(off) of at(b, p), the sum RoPE forms of a token's
// index in its call and the call's offset.
func (be *Backend) rope(x *tensor.Array, o tensor.RoPEOptions, nb int, at func(b, p int) (rel, off int)) *tensor.Array {
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
	batch := 1
	if nd >= 3 {
		batch = shape[0]
	}
	pos := make([]float32, nb*t)
	for b := range nb {
		for p := range t {
			rel, off := at(b, p)
			pos[b*t+p] = float32(float32(rel)+float32(off)) * scale
		}
	}
	cos, sin := ropeTables(pos, inv, dt)
	xi, owned := fusedLastDense(x)
	if owned {
		defer xi.buf.drop()
	}
	rows := fusedRowOffsets(xi, shape)
	perBatch := len(rows) / batch
	// rotated halves 16 at a time in float32 or bfloat16 (the same bits)
	vec := hasAVX512 && !o.Traditional && half%16 == 0 && half > 0 && (dt == tensor.Float32 || dt == tensor.BFloat16)
	vbf16 := 0
	if dt == tensor.BFloat16 {
		vbf16 = 1
	}
	parallelFor(len(rows), max(1, 4096/max(d, 1)), func(lo, hi int) {
		row := make([]float32, d)
		var pa, pb, pe, pf []float32 // the loops' products
		if !vec {
			pa, pb, pe, pf = make([]float32, half), make([]float32, half), make([]float32, half), make([]float32, half)
		}
		for r := lo; r < hi; r++ {
			fusedLoad(row, xi.buf.data, rows[r], dt)
			b := 0
			if nb > 1 {
				b = r / perBatch
			}
			tb := (b*t + r%t) * half
			c, s := cos[tb:tb+half], sin[tb:tb+half]
			if vec {
				ropeHalves(&row[0], &c[0], &s[0], half, vbf16)
				fusedStore(om.buf.data, om.off+r*d, row, dt)
				continue
			}
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

// ropeTable is one call's cos and sin tables ([len(pos)][len(inv)], each
// rounded to dt) with what they were made from. A batched decode step
// rotates every layer's queries and keys at the same positions, so the
// last table is kept and reused while those match; its slices are never
// written once made.
type ropeTable struct {
	dt       tensor.DType
	pos, inv []float32
	cos, sin []float32
}

var ropeLast struct {
	sync.Mutex
	t *ropeTable
}

// ropeTables returns the cos and sin of pos[p]·inv[i] (angles formed in
// float32, cos and sin rounded to dt), the last call's when it asked for
// the same.
func ropeTables(pos, inv []float32, dt tensor.DType) (cos, sin []float32) {
	ropeLast.Lock()
	last := ropeLast.t
	ropeLast.Unlock()
	if last != nil && last.dt == dt && slices.Equal(last.pos, pos) && slices.Equal(last.inv, inv) {
		return last.cos, last.sin
	}
	half := len(inv)
	cos = make([]float32, len(pos)*half)
	sin = make([]float32, len(cos))
	for p, ps := range pos {
		base := p * half
		for i, f := range inv {
			th := float64(float32(ps * f))
			cos[base+i] = tensor.RoundTo(float32(math.Cos(th)), dt)
			sin[base+i] = tensor.RoundTo(float32(math.Sin(th)), dt)
		}
	}
	ropeLast.Lock()
	ropeLast.t = &ropeTable{dt: dt, pos: pos, inv: inv, cos: cos, sin: sin}
	ropeLast.Unlock()
	return cos, sin
}
