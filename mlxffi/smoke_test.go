package mlxffi

import (
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

func TestSmokeAdd(t *testing.T) {
	be := mlxBackend(t)
	s := tensor.NewScope()
	defer s.Close()
	a := tensor.FromBytesOn(be, le32(1, 2, 3, 4), []int{2, 2}, tensor.Float32, false)
	b := tensor.FullOn(be, []int{2}, 10, tensor.Float32)
	c := tensor.Add(a, b)
	if got := c.Float32s(); !slices.Equal(got, []float32{11, 12, 13, 14}) {
		t.Fatalf("add = %v", got)
	}
	tr := tensor.Transpose(a)
	if got := tr.Float32s(); !slices.Equal(got, []float32{1, 3, 2, 4}) {
		t.Fatalf("transpose bytes = %v", got)
	}
	v, err := Version()
	t.Logf("MLX %s from %s, err=%v", v, LibraryPath(), err)
}
