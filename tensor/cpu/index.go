package cpu

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// indexValue reads the integer element at element offset off of data (dtype
// dt); indices may arrive in any integer dtype, so gathers decode them here
// rather than demanding a conversion first.
func indexValue(data []byte, off int, dt tensor.DType) int {
	le := binary.LittleEndian
	switch dt {
	case tensor.Uint8, tensor.Bool:
		return int(data[off])
	case tensor.Int32:
		return int(int32(le.Uint32(data[4*off:])))
	case tensor.Uint32:
		return int(le.Uint32(data[4*off:]))
	case tensor.Int64:
		return int(int64(le.Uint64(data[8*off:])))
	}
	panic(&tensor.Error{Op: "index", Err: fmt.Errorf("%w: %s indices", tensor.ErrDType, dt)})
}

// checkIndex wraps a negative index and rejects one out of [0, n) with an
// ErrArgument naming it, so a bad token id reports itself instead of
// reading another row.
func checkIndex(op string, i, n, axis int) int {
	j := i
	if j < 0 {
		j += n
	}
	if j < 0 || j >= n {
		panic(&tensor.Error{Op: op, Err: fmt.Errorf("%w: index %d is out of range for axis %d of size %d", tensor.ErrArgument, i, axis, n)})
	}
	return j
}

// takeIndices returns the indices of idx, row-major, normalised against n.
func takeIndices(op string, idx *tensor.Array, n, axis int) []int {
	im, owned := contig(idx)
	if owned {
		defer im.buf.drop()
	}
	out := make([]int, idx.Size())
	for i := range out {
		out[i] = checkIndex(op, indexValue(im.buf.data, im.off+i, idx.DType()), n, axis)
	}
	return out
}

// freeOnPanic frees a result under construction when its kernel panics
// (a bad index), so failed calls leak nothing; use it deferred.
func freeOnPanic(a *tensor.Array) {
	if r := recover(); r != nil {
		a.Free()
		panic(r)
	}
}

// Take gathers slices of a along axis. Every gathered slice of the
// trailing dims is one copy, so an embedding lookup copies whole rows.
func (be *Backend) Take(a, indices *tensor.Array, axis int) *tensor.Array {
	sh := a.Shape()
	n := sh[axis]
	idx := takeIndices("Take", indices, n, axis)
	shape := slices.Concat(sh[:axis], indices.Shape(), sh[axis+1:])
	out, im := be.newArray(shape, a.DType())
	outer := numel(sh[:axis])
	inner := numel(sh[axis+1:])
	es := a.DType().Size()
	if len(idx) == 0 || outer == 0 || inner == 0 {
		return out
	}
	src, owned := contig(a)
	if owned {
		defer src.buf.drop()
	}
	sdata := bytesOf(src, a.Size(), es)
	ddata := im.buf.data
	row := inner * es
	ni := len(idx)
	parallelFor(outer*ni, max(1, 16384/max(row, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			o, k := r/ni, idx[r%ni]
			s := (o*n + k) * row
			copy(ddata[r*row:(r+1)*row], sdata[s:s+row])
		}
	})
	return out
}

// alongAxisStrides returns a's strides for iterating shape, zero where a is
// broadcast (size 1 against a larger dim), leaving skip's stride as is.
func alongAxisStrides(a *tensor.Array, shape []int, skip int) []int {
	st := slices.Clone(get(a).strides)
	for i, d := range a.Shape() {
		if i != skip && d == 1 && shape[i] != 1 {
			st[i] = 0
		}
	}
	return st
}

// indexOdometer calls f for every multi-index of shape in row-major order with
// the running element offsets of two strided operands.
func indexOdometer(shape []int, offA int, stA []int, offB int, stB []int, f func(pos []int, a, b int)) {
	if numel(shape) == 0 {
		return
	}
	nd := len(shape)
	pos := make([]int, nd)
	for {
		f(pos, offA, offB)
		d := nd - 1
		for ; d >= 0; d-- {
			pos[d]++
			offA += stA[d]
			offB += stB[d]
			if pos[d] < shape[d] {
				break
			}
			offA -= stA[d] * shape[d]
			offB -= stB[d] * shape[d]
			pos[d] = 0
		}
		if d < 0 {
			return
		}
	}
}

// TakeAlongAxis gathers a[..., indices, ...] element by element, with
// indices and a broadcasting against each other off axis.
func (be *Backend) TakeAlongAxis(a, indices *tensor.Array, axis int) *tensor.Array {
	sh, ish := a.Shape(), indices.Shape()
	shape := make([]int, len(sh))
	for i := range sh {
		switch {
		case i == axis || sh[i] == 1:
			shape[i] = ish[i]
		default:
			shape[i] = sh[i]
		}
	}
	out, im := be.newArray(shape, a.DType())
	es := a.DType().Size()
	ai, ii := get(a), get(indices)
	ast := alongAxisStrides(a, shape, axis)
	ist := alongAxisStrides(indices, shape, -1)
	stAx := ast[axis]
	ast[axis] = 0
	n := sh[axis]
	dst := im.buf.data
	sdat, idat, idt := ai.buf.data, ii.buf.data, indices.DType()
	defer freeOnPanic(out)
	k := 0
	indexOdometer(shape, ai.off, ast, ii.off, ist, func(_ []int, ao, io int) {
		j := checkIndex("TakeAlongAxis", indexValue(idat, io, idt), n, axis)
		s := (ao + j*stAx) * es
		copy(dst[k*es:(k+1)*es], sdat[s:s+es])
		k++
	})
	return out
}

// PutAlongAxis copies a, then writes values (already indices' shape and
// a's dtype) at the indexed positions in row-major order, so later
// duplicates win.
func (be *Backend) PutAlongAxis(a, indices, values *tensor.Array, axis int) *tensor.Array {
	out, im := be.denseCopy(a)
	es := a.DType().Size()
	ii, vi := get(indices), get(values)
	ost := slices.Clone(im.strides)
	n := a.Shape()[axis]
	stAx := ost[axis]
	dst := im.buf.data
	idat, vdat, idt := ii.buf.data, vi.buf.data, indices.DType()
	ish := indices.Shape()
	defer freeOnPanic(out)
	// off-axis position of the output follows indices' position
	indexOdometer(ish, ii.off, ii.strides, vi.off, vi.strides, func(pos []int, io, vo int) {
		j := checkIndex("PutAlongAxis", indexValue(idat, io, idt), n, axis)
		d := j * stAx
		for i, p := range pos {
			if i != axis {
				d += p * ost[i]
			}
		}
		copy(dst[d*es:(d+1)*es], vdat[vo*es:(vo+1)*es])
	})
	return out
}
