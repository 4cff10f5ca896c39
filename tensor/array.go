package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
)

// Array is an n-dimensional array on a Backend. Its shape and dtype are
// known when it is made, also on lazy backends. An Array is owned by whoever
// made it (or the Scope it was made in, see Scope for which) and must be
// freed once; using an array after Free panics with ErrFreed.
//
// Arrays are not safe for concurrent mutation (SetSlice, Free); concurrent
// reads of distinct arrays are fine on the CPU backend.
type Array struct {
	be    Backend
	impl  any
	shape []int
	dtype DType
	freed bool
	scope *Scope
	id    uint64
}

var (
	liveArrays atomic.Int64
	nextID     atomic.Uint64
)

// LiveArrays is the number of arrays made and not yet freed, over all
// backends. Tests assert on its change to find leaks.
func LiveArrays() int64 { return liveArrays.Load() }

// NewArray wraps a backend's storage handle as an Array. It is for backend
// implementations; it registers the array with the innermost open Scope
// of the calling goroutine (or of the goroutine it acts for under RunAs),
// so a backend calls it on the goroutine its caller's op runs on, never on
// a worker goroutine of its own outside RunAs.
func NewArray(be Backend, impl any, shape []int, dt DType) *Array {
	a := &Array{be: be, impl: impl, shape: slices.Clone(shape), dtype: dt, id: nextID.Add(1)}
	liveArrays.Add(1)
	track(a)
	return a
}

// Impl returns the backend's storage handle. For backend implementations.
func (a *Array) Impl() any { a.check(); return a.impl }

// SetImpl replaces the storage handle (in-place updates on lazy backends,
// where a new graph node takes the old one's place). For backend implementations.
func (a *Array) SetImpl(impl any) { a.check(); a.impl = impl }

// Backend returns the backend the array lives on.
func (a *Array) Backend() Backend { return a.be }

// Shape returns the dims; the slice must not be modified.
func (a *Array) Shape() []int { a.check(); return a.shape }

// Dim returns the size of axis i (negative counts from the end).
func (a *Array) Dim(i int) int {
	a.check()
	return a.shape[normAxis(i, len(a.shape), "Dim")]
}

// NDim is the number of dimensions.
func (a *Array) NDim() int { a.check(); return len(a.shape) }

// Size is the number of elements.
func (a *Array) Size() int { a.check(); return prod(a.shape) }

// NBytes is the number of bytes the elements occupy.
func (a *Array) NBytes() int { return a.Size() * a.dtype.Size() }

// DType returns the element type.
func (a *Array) DType() DType { a.check(); return a.dtype }

// Freed reports whether Free has been called.
func (a *Array) Freed() bool { return a.freed }

// String describes the array without evaluating it.
func (a *Array) String() string {
	if a == nil {
		return "Array(nil)"
	}
	if a.freed {
		return "Array(freed)"
	}
	return fmt.Sprintf("Array(%s%v, %s)", a.dtype, a.shape, a.be.Name())
}

// Free releases the array's storage now. Freeing twice is a no-op; a nil
// array is ignored. An array freed while registered in a Scope is dropped
// from it.
func (a *Array) Free() {
	if a == nil || a.freed {
		return
	}
	if a.scope != nil {
		forget(a)
	}
	a.be.Free(a)
	a.freed = true
	a.impl = nil
	liveArrays.Add(-1)
}

func (a *Array) check() {
	if a == nil {
		panic(&Error{Op: "array", Err: ErrNil})
	}
	if a.freed {
		panic(&Error{Op: "array", Err: ErrFreed})
	}
}

// Free frees every non-nil array given.
func Free(arrs ...*Array) {
	for _, a := range arrs {
		a.Free()
	}
}

// ---- evaluation and host access ----

// Eval computes the given arrays (blocking). Eager backends have nothing to do.
func Eval(arrs ...*Array) {
	for be, group := range groupByBackend(arrs) {
		be.Eval(group...)
	}
}

// AsyncEval starts computing the given arrays and returns at once.
func AsyncEval(arrs ...*Array) {
	for be, group := range groupByBackend(arrs) {
		be.AsyncEval(group...)
	}
}

func groupByBackend(arrs []*Array) map[Backend][]*Array {
	m := map[Backend][]*Array{}
	for _, a := range arrs {
		if a == nil {
			continue
		}
		a.check()
		m[a.be] = append(m[a.be], a)
	}
	return m
}

// Bytes evaluates a and returns its elements as contiguous little-endian bytes.
func (a *Array) Bytes() []byte { a.check(); return a.be.Bytes(a) }

// Float32s evaluates a and returns its elements converted to float32.
func (a *Array) Float32s() []float32 {
	raw := a.Bytes()
	n := a.Size()
	out := make([]float32, n)
	le := binary.LittleEndian
	switch a.dtype {
	case Float32:
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case BFloat16:
		for i := range out {
			out[i] = BF16ToF32(le.Uint16(raw[2*i:]))
		}
	case Float16:
		for i := range out {
			out[i] = F16ToF32(le.Uint16(raw[2*i:]))
		}
	default:
		for i, v := range bytesToInt64s(raw, a.dtype, n) {
			out[i] = float32(v)
		}
	}
	return out
}

// Float64s evaluates a and returns its elements converted to float64.
func (a *Array) Float64s() []float64 {
	if !a.dtype.IsFloat() {
		ints := a.Int64s()
		out := make([]float64, len(ints))
		for i, v := range ints {
			out[i] = float64(v)
		}
		return out
	}
	f := a.Float32s()
	out := make([]float64, len(f))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

// Int64s evaluates a and returns its elements converted to int64 (floats truncate).
func (a *Array) Int64s() []int64 {
	if a.dtype.IsFloat() {
		f := a.Float32s()
		out := make([]int64, len(f))
		for i, v := range f {
			out[i] = int64(v)
		}
		return out
	}
	return bytesToInt64s(a.Bytes(), a.dtype, a.Size())
}

// Int32s evaluates a and returns its elements converted to int32.
func (a *Array) Int32s() []int32 {
	v := a.Int64s()
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

// Bools evaluates a and returns whether each element is non-zero.
func (a *Array) Bools() []bool {
	f := a.Float64s()
	out := make([]bool, len(f))
	for i, x := range f {
		out[i] = x != 0
	}
	return out
}

// Item evaluates a single-element array and returns its value as float64.
func (a *Array) Item() float64 {
	if a.Size() != 1 {
		panic(&Error{Op: "Item", Err: fmt.Errorf("array of shape %v has %d elements, want 1", a.shape, a.Size())})
	}
	return a.Float64s()[0]
}

// ItemInt evaluates a single-element array and returns it as int.
func (a *Array) ItemInt() int {
	if a.Size() != 1 {
		panic(&Error{Op: "ItemInt", Err: fmt.Errorf("array of shape %v has %d elements, want 1", a.shape, a.Size())})
	}
	return int(a.Int64s()[0])
}

func bytesToInt64s(raw []byte, dt DType, n int) []int64 {
	out := make([]int64, n)
	le := binary.LittleEndian
	switch dt {
	case Bool, Uint8:
		for i := range out {
			out[i] = int64(raw[i])
		}
	case Int32:
		for i := range out {
			out[i] = int64(int32(le.Uint32(raw[4*i:])))
		}
	case Uint32:
		for i := range out {
			out[i] = int64(le.Uint32(raw[4*i:]))
		}
	case Int64:
		for i := range out {
			out[i] = int64(le.Uint64(raw[8*i:]))
		}
	default:
		panic(&Error{Op: "convert", Err: fmt.Errorf("dtype %s is not an integer type", dt)})
	}
	return out
}

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}
