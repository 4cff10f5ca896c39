package safetensors

import (
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// memBackend is the little of a backend these tests need (FromBytes,
// Bytes, Free). It keeps the tests independent of the CPU backend's other
// kernels and records whether each array borrowed its bytes, which is the
// decision File.Array makes.
type memBackend struct {
	tensor.Backend // nil: any other method panics, flagging an unexpected call
}

// memImpl is a memBackend array's storage.
type memImpl struct {
	data     []byte
	borrowed bool
}

var testBE = &memBackend{}

func (b *memBackend) Name() string { return "mem" }

func (b *memBackend) FromBytes(raw []byte, shape []int, dt tensor.DType, noCopy bool) *tensor.Array {
	im := &memImpl{data: raw, borrowed: noCopy}
	if !noCopy {
		im.data = slices.Clone(raw)
	}
	return tensor.NewArray(b, im, shape, dt)
}

func (b *memBackend) Bytes(a *tensor.Array) []byte { return slices.Clone(a.Impl().(*memImpl).data) }

func (b *memBackend) Free(a *tensor.Array) {}

func (b *memBackend) Eval(...*tensor.Array) {}

func borrowed(a *tensor.Array) bool { return a.Impl().(*memImpl).borrowed }

// failBackend fails every FromBytes the way a backend out of memory does.
type failBackend struct{ memBackend }

func (b *failBackend) FromBytes([]byte, []int, tensor.DType, bool) *tensor.Array {
	panic(&tensor.Error{Op: "FromBytes", Err: tensor.ErrBackend})
}
