package backendtest

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// Reference helpers: flat row-major data with explicit index math, kept
// simple enough to be obviously right.

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// unravel turns a flat row-major index into per-axis indices.
func unravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] > 0 {
			idx[d] = i % shape[d]
			i /= shape[d]
		}
	}
	return idx
}

// ravel turns per-axis indices into a flat row-major index.
func ravel(idx, shape []int) int {
	f := 0
	for d := range shape {
		f = f*shape[d] + idx[d]
	}
	return f
}

// bcastIndex maps an index of the broadcast output to the flat index of an
// input of shape in (aligned at the trailing axes, size-1 axes pinned to 0).
func bcastIndex(outIdx []int, in []int) int {
	off := len(outIdx) - len(in)
	f := 0
	for d := range in {
		i := outIdx[off+d]
		if in[d] == 1 {
			i = 0
		}
		f = f*in[d] + i
	}
	return f
}

func broadcastShape(a, b []int) []int {
	s, ok := tensor.BroadcastShapes(a, b)
	if !ok {
		panic("reference: shapes do not broadcast")
	}
	return s
}

// expand materialises v (of shape in) broadcast to shape out.
func expand(v []float64, in, out []int) []float64 {
	r := make([]float64, numel(out))
	for i := range r {
		r[i] = v[bcastIndex(unravel(i, out), in)]
	}
	return r
}

func swapPerm(n, i, j int) []int {
	p := make([]int, n)
	for k := range p {
		p[k] = k
	}
	p[i], p[j] = p[j], p[i]
	return p
}

// transposeRef permutes the axes of v (of shape) by perm: out axis k is
// input axis perm[k].
func transposeRef(v []float64, shape, perm []int) []float64 {
	os := make([]int, len(perm))
	for k, p := range perm {
		os[k] = shape[p]
	}
	out := make([]float64, len(v))
	in := make([]int, len(shape))
	for i := range out {
		idx := unravel(i, os)
		for k, p := range perm {
			in[p] = idx[k]
		}
		out[i] = v[ravel(in, shape)]
	}
	return out
}

// roundTo rounds v to the nearest value dt holds (integers: C conversion,
// truncating toward zero and wrapping).
func roundTo(v float64, dt tensor.DType) float64 {
	switch dt {
	case tensor.Float32:
		return float64(float32(v))
	case tensor.BFloat16:
		return float64(tensor.BF16ToF32(tensor.F32ToBF16(float32(v))))
	case tensor.Float16:
		return float64(tensor.F16ToF32(tensor.F32ToF16(float32(v))))
	case tensor.Bool:
		if v != 0 {
			return 1
		}
		return 0
	default:
		return float64(wrapInt(int64(v), dt))
	}
}

// wrapInt reduces v modulo the width of integer dtype dt, as two's-complement hardware does.
func wrapInt(v int64, dt tensor.DType) int64 {
	switch dt {
	case tensor.Uint8:
		return int64(uint8(v))
	case tensor.Int32:
		return int64(int32(v))
	case tensor.Uint32:
		return int64(uint32(v))
	case tensor.Bool:
		if v != 0 {
			return 1
		}
		return 0
	}
	return v
}

// encodeVals writes values (already representable in dt) as little-endian bytes.
func encodeVals(vals []float64, dt tensor.DType) []byte {
	es := dt.Size()
	raw := make([]byte, len(vals)*es)
	le := binary.LittleEndian
	for i, v := range vals {
		p := raw[i*es:]
		switch dt {
		case tensor.Bool:
			if v != 0 {
				p[0] = 1
			}
		case tensor.Uint8:
			p[0] = uint8(int64(v))
		case tensor.Int32, tensor.Uint32:
			le.PutUint32(p, uint32(int64(v)))
		case tensor.Int64:
			le.PutUint64(p, uint64(int64(v)))
		case tensor.Float16:
			le.PutUint16(p, tensor.F32ToF16(float32(v)))
		case tensor.BFloat16:
			le.PutUint16(p, tensor.F32ToBF16(float32(v)))
		case tensor.Float32:
			le.PutUint32(p, math.Float32bits(float32(v)))
		}
	}
	return raw
}

// unitRoundoff is half the spacing of dt's values just above 1.
func unitRoundoff(dt tensor.DType) float64 {
	switch dt {
	case tensor.BFloat16:
		return 1.0 / 256
	case tensor.Float16:
		return 1.0 / 2048
	}
	return 1.0 / (1 << 24)
}

func isNaN(v float64) bool  { return math.IsNaN(v) }
func isInf(v float64) bool  { return math.IsInf(v, 0) }
func abs(v float64) float64 { return math.Abs(v) }

func isErr(err, target error) bool { return errors.Is(err, target) }

// reduceRef reduces v (of shape) over axes (sorted, non-negative) with
// f(acc, x) from init, returning the values and the kept/dropped shape.
func reduceRef(v []float64, shape, axes []int, keep bool, init float64, f func(acc, x float64) float64) ([]float64, []int) {
	red := make([]bool, len(shape))
	for _, a := range axes {
		red[a] = true
	}
	var outShape, keptShape []int
	for d, n := range shape {
		if red[d] {
			keptShape = append(keptShape, 1)
			if keep {
				outShape = append(outShape, 1)
			}
		} else {
			keptShape = append(keptShape, n)
			outShape = append(outShape, n)
		}
	}
	out := make([]float64, numel(keptShape))
	for i := range out {
		out[i] = init
	}
	for i, x := range v {
		idx := unravel(i, shape)
		for d := range idx {
			if red[d] {
				idx[d] = 0
			}
		}
		o := ravel(idx, keptShape)
		out[o] = f(out[o], x)
	}
	if outShape == nil {
		outShape = []int{}
	}
	return out, outShape
}

// normAxesRef resolves nil (all) and negative axes, sorted.
func normAxesRef(axes []int, nd int) []int {
	if axes == nil {
		out := make([]int, nd)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, 0, len(axes))
	for _, a := range axes {
		if a < 0 {
			a += nd
		}
		out = append(out, a)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// lanes calls f for every 1-D lane along axis of shape with the flat
// indices of its elements in order.
func lanes(shape []int, axis int, f func(idx []int)) {
	outer := numel(shape[:axis])
	inner := numel(shape[axis+1:])
	n := shape[axis]
	idx := make([]int, n)
	for o := 0; o < outer; o++ {
		for in := 0; in < inner; in++ {
			for k := 0; k < n; k++ {
				idx[k] = (o*n+k)*inner + in
			}
			f(idx)
		}
	}
}

// matmulRef multiplies a [..., M, K] by b [..., K, N] with batch
// broadcasting; out is [batch..., M, N]. absOut receives Σ|a||b| per
// output, the scale of the rounding error a float sum can make.
func matmulRef(a []float64, as []int, b []float64, bs []int) (out, absOut []float64, shape []int) {
	m, k := as[len(as)-2], as[len(as)-1]
	n := bs[len(bs)-1]
	batch := broadcastShape(as[:len(as)-2], bs[:len(bs)-2])
	shape = append(slices.Clone(batch), m, n)
	out = make([]float64, numel(shape))
	absOut = make([]float64, len(out))
	ab, bb := as[:len(as)-2], bs[:len(bs)-2]
	for bi := 0; bi < numel(batch); bi++ {
		bidx := unravel(bi, batch)
		ao := bcastIndex(bidx, ab) * m * k
		bo := bcastIndex(bidx, bb) * k * n
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				s, sa := 0.0, 0.0
				for p := 0; p < k; p++ {
					x := a[ao+i*k+p] * b[bo+p*n+j]
					s += x
					sa += abs(x)
				}
				out[(bi*m+i)*n+j] = s
				absOut[(bi*m+i)*n+j] = sa
			}
		}
	}
	return out, absOut, shape
}
