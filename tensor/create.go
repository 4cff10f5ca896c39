package tensor

import (
	"encoding/binary"
	"math"
)

func checkShape(op string, shape []int) {
	for _, d := range shape {
		if d < 0 {
			throw(op, ErrShape, "negative dimension in %v", shape)
		}
	}
}

func checkDType(op string, dt DType) {
	if !dt.Valid() {
		throw(op, ErrDType, "%s", dt)
	}
}

// FromBytes makes an array on the default backend from little-endian element bytes (copied).
func FromBytes(raw []byte, shape []int, dt DType) *Array {
	return FromBytesOn(Default(), raw, shape, dt, false)
}

// FromBytesOn makes an array on be from little-endian element bytes. With
// noCopy the backend may keep raw, which must then stay valid and unwritten
// for the array's life (a read-only mmap of a checkpoint, say).
func FromBytesOn(be Backend, raw []byte, shape []int, dt DType, noCopy bool) *Array {
	checkShape("FromBytes", shape)
	checkDType("FromBytes", dt)
	if want := prod(shape) * dt.Size(); len(raw) != want {
		throw("FromBytes", ErrShape, "%d bytes for %s%v, want %d", len(raw), dt, shape, want)
	}
	return be.FromBytes(raw, shape, dt, noCopy)
}

// FromFloat32 makes an array from float32 values stored as dt (a float type,
// rounded to nearest even) on the default backend. A nil shape means 1-D.
func FromFloat32(data []float32, shape []int, dt DType) *Array {
	return FromFloat32On(Default(), data, shape, dt)
}

// FromFloat32On is FromFloat32 on a given backend: host values for a model
// or sampler that lives on a backend other than the default one.
func FromFloat32On(be Backend, data []float32, shape []int, dt DType) *Array {
	if shape == nil {
		shape = []int{len(data)}
	}
	if prod(shape) != len(data) {
		throw("FromFloat32", ErrShape, "%d values for shape %v", len(data), shape)
	}
	var raw []byte
	switch dt {
	case Float32:
		raw = make([]byte, 4*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
	case BFloat16:
		raw = make([]byte, 2*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint16(raw[2*i:], F32ToBF16(v))
		}
	case Float16:
		raw = make([]byte, 2*len(data))
		for i, v := range data {
			binary.LittleEndian.PutUint16(raw[2*i:], F32ToF16(v))
		}
	default:
		f := FromFloat32On(be, data, shape, Float32)
		defer f.Free()
		return AsType(f, dt)
	}
	return FromBytesOn(be, raw, shape, dt, false)
}

// FromFloat64 is FromFloat32 for float64 input (values are rounded to float32 first).
func FromFloat64(data []float64, shape []int, dt DType) *Array {
	f := make([]float32, len(data))
	for i, v := range data {
		f[i] = float32(v)
	}
	return FromFloat32(f, shape, dt)
}

// FromInt32 makes an int32 array on the default backend. A nil shape means 1-D.
func FromInt32(data []int32, shape []int) *Array { return FromInt32On(Default(), data, shape) }

// FromInt32On is FromInt32 on a given backend: token ids, positions and
// gather indices for a model or sampler on a backend other than the
// default one.
func FromInt32On(be Backend, data []int32, shape []int) *Array {
	if shape == nil {
		shape = []int{len(data)}
	}
	if prod(shape) != len(data) {
		throw("FromInt32", ErrShape, "%d values for shape %v", len(data), shape)
	}
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	return FromBytesOn(be, raw, shape, Int32, false)
}

// FromInts makes an array of integer dtype dt (or a float type) from ints.
func FromInts(data []int, shape []int, dt DType) *Array {
	if shape == nil {
		shape = []int{len(data)}
	}
	if prod(shape) != len(data) {
		throw("FromInts", ErrShape, "%d values for shape %v", len(data), shape)
	}
	raw := make([]byte, len(data)*max(dt.Size(), 1))
	le := binary.LittleEndian
	switch dt {
	case Bool:
		for i, v := range data {
			if v != 0 {
				raw[i] = 1
			}
		}
	case Uint8:
		for i, v := range data {
			raw[i] = uint8(v)
		}
	case Int32, Uint32:
		for i, v := range data {
			le.PutUint32(raw[4*i:], uint32(v))
		}
	case Int64:
		for i, v := range data {
			le.PutUint64(raw[8*i:], uint64(v))
		}
	default:
		f := make([]float32, len(data))
		for i, v := range data {
			f[i] = float32(v)
		}
		return FromFloat32(f, shape, dt)
	}
	return FromBytes(raw, shape, dt)
}

// FromUint32 makes a uint32 array on the default backend. A nil shape means 1-D.
func FromUint32(data []uint32, shape []int) *Array { return FromUint32On(Default(), data, shape) }

// FromUint32On is FromUint32 on a given backend: packed quantized codes
// computed on the host for a model on any backend.
func FromUint32On(be Backend, data []uint32, shape []int) *Array {
	if shape == nil {
		shape = []int{len(data)}
	}
	if prod(shape) != len(data) {
		throw("FromUint32", ErrShape, "%d values for shape %v", len(data), shape)
	}
	raw := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], v)
	}
	return FromBytesOn(be, raw, shape, Uint32, false)
}

// FromBools makes a bool array. A nil shape means 1-D.
func FromBools(data []bool, shape []int) *Array {
	ints := make([]int, len(data))
	for i, b := range data {
		if b {
			ints[i] = 1
		}
	}
	return FromInts(ints, shape, Bool)
}

// Scalar makes a 0-d array holding v as dt.
func Scalar(v float64, dt DType) *Array { return Full(nil, v, dt) }

// Full makes an array of shape filled with v (as dt) on the default backend.
func Full(shape []int, v float64, dt DType) *Array { return FullOn(Default(), shape, v, dt) }

// FullOn is Full on a given backend.
func FullOn(be Backend, shape []int, v float64, dt DType) *Array {
	checkShape("Full", shape)
	checkDType("Full", dt)
	return be.Full(shape, v, dt)
}

// Zeros makes an array of zeros.
func Zeros(shape []int, dt DType) *Array { return Full(shape, 0, dt) }

// Ones makes an array of ones.
func Ones(shape []int, dt DType) *Array { return Full(shape, 1, dt) }

// ZerosLike makes zeros with a's shape, dtype and backend.
func ZerosLike(a *Array) *Array { return FullOn(a.Backend(), a.Shape(), 0, a.DType()) }

// FullLike makes an array with a's shape, dtype and backend filled with v.
func FullLike(a *Array, v float64) *Array { return FullOn(a.Backend(), a.Shape(), v, a.DType()) }

// Arange makes [start, stop) in steps of step, like numpy.arange.
func Arange(start, stop, step float64, dt DType) *Array {
	return ArangeOn(Default(), start, stop, step, dt)
}

// ArangeOn is Arange on a given backend.
func ArangeOn(be Backend, start, stop, step float64, dt DType) *Array {
	checkDType("Arange", dt)
	if step == 0 || math.IsNaN(step) || math.IsInf(step, 0) {
		throw("Arange", ErrArgument, "step %v", step)
	}
	n := int(math.Ceil((stop - start) / step))
	if n < 0 {
		n = 0
	}
	return be.Arange(start, step, n, dt)
}

// scalarLike makes a 0-d array of v in a's dtype on a's backend.
func scalarLike(a *Array, v float64) *Array { return FullOn(a.Backend(), nil, v, a.DType()) }

func sameBackend(op string, arrs ...*Array) Backend {
	var be Backend
	for _, a := range arrs {
		if a == nil {
			continue
		}
		a.check()
		if be == nil {
			be = a.be
		} else if a.be != be {
			throw(op, ErrArgument, "arrays on different backends (%s and %s)", be.Name(), a.be.Name())
		}
	}
	if be == nil {
		throw(op, ErrNil, "no array arguments")
	}
	return be
}

func normAxis(ax, ndim int, op string) int {
	if ax < 0 {
		ax += ndim
	}
	if ax < 0 || ax >= ndim {
		throw(op, ErrArgument, "axis %d out of range for %d dims", ax, ndim)
	}
	return ax
}
