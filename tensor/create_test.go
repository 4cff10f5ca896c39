package tensor_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// countingBackend is the CPU backend counting the host data handed to it,
// to tell "made on be" from "made on the default backend".
type countingBackend struct {
	tensor.Backend
	fromBytes int
}

func (c *countingBackend) FromBytes(raw []byte, shape []int, dt tensor.DType, noCopy bool) *tensor.Array {
	c.fromBytes++
	return c.Backend.FromBytes(raw, shape, dt, noCopy)
}

func TestFromInt32On(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	other := &countingBackend{Backend: cpu.Default}
	data := []int32{-3, 0, 7, 1 << 30, -1 << 31, 5}
	a := tensor.FromInt32On(other, data, []int{2, 3})
	defer a.Free()
	if other.fromBytes != 1 || a.DType() != tensor.Int32 || !slices.Equal(a.Shape(), []int{2, 3}) {
		t.Fatalf("got %v after %d FromBytes on the backend, want int32[2 3] after 1", a, other.fromBytes)
	}
	if got := a.Int32s(); !slices.Equal(got, data) {
		t.Fatalf("values %v, want %v", got, data)
	}
	flat := tensor.FromInt32On(other, data, nil)
	defer flat.Free()
	if !slices.Equal(flat.Shape(), []int{len(data)}) {
		t.Fatalf("nil shape gave %v, want 1-D", flat.Shape())
	}
	def := tensor.FromInt32(data, nil)
	defer def.Free()
	if other.fromBytes != 2 || def.Backend() != tensor.Default() || !slices.Equal(def.Int32s(), data) {
		t.Fatalf("FromInt32 gave %v %v (%d FromBytes on the other backend, want 2)", def, def.Int32s(), other.fromBytes)
	}
	if err := tensor.Try(func() { tensor.FromInt32On(other, data, []int{4}) }); !errors.Is(err, tensor.ErrShape) {
		t.Fatalf("6 values for shape [4]: %v, want ErrShape", err)
	}
}

func TestFromFloat32On(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	data := []float32{1.5, -2.25, 0, 3e-3, 65504, -0.5}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16, tensor.Float16, tensor.Int32} {
		other := &countingBackend{Backend: cpu.Default}
		a := tensor.FromFloat32On(other, data, []int{3, 2}, dt)
		def := tensor.FromFloat32(data, []int{3, 2}, dt)
		if other.fromBytes != 1 || a.DType() != dt || !slices.Equal(a.Shape(), []int{3, 2}) {
			t.Errorf("%s: got %v after %d FromBytes on the backend, want %s[3 2] after 1", dt, a, other.fromBytes, dt)
		}
		// same rounding as on the default backend, value for value
		if got, want := a.Float32s(), def.Float32s(); !slices.Equal(got, want) {
			t.Errorf("%s: values %v, default backend gives %v", dt, got, want)
		}
		if dt == tensor.Float32 && !slices.Equal(a.Float32s(), data) {
			t.Errorf("float32 values %v, want %v", a.Float32s(), data)
		}
		a.Free()
		def.Free()
	}
	if err := tensor.Try(func() { tensor.FromFloat32On(cpu.Default, data, []int{2, 2}, tensor.Float32) }); !errors.Is(err, tensor.ErrShape) {
		t.Fatalf("6 values for shape [2 2]: %v, want ErrShape", err)
	}
}

func TestFromUint32On(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	other := &countingBackend{Backend: cpu.Default}
	data := []uint32{0, 1, 1<<32 - 1, 0x89abcdef}
	a := tensor.FromUint32On(other, data, []int{2, 2})
	defer a.Free()
	if other.fromBytes != 1 || a.DType() != tensor.Uint32 || !slices.Equal(a.Shape(), []int{2, 2}) {
		t.Fatalf("got %v after %d FromBytes on the backend, want uint32[2 2] after 1", a, other.fromBytes)
	}
	got := a.Int64s()
	for i, v := range data {
		if got[i] != int64(v) {
			t.Fatalf("values %v, want %v", got, data)
		}
	}
	if err := tensor.Try(func() { tensor.FromUint32On(other, data, []int{3}) }); !errors.Is(err, tensor.ErrShape) {
		t.Fatalf("4 values for shape [3]: %v, want ErrShape", err)
	}
}
