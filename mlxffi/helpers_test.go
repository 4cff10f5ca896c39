package mlxffi

import (
	"errors"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
)

// mlxBackend opens the MLX backend or skips the test with one line when
// libmlxc is not installed; any other failure to open it is a test failure.
func mlxBackend(t testing.TB) *Backend {
	t.Helper()
	be, err := Open()
	if errors.Is(err, ErrNotFound) {
		t.Skip("libmlxc not found: " + err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return be
}

func f32bytes(v ...float32) []byte {
	a := tensor.FromFloat32(v, nil, tensor.Float32)
	defer a.Free()
	return a.Bytes()
}
