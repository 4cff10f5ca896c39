// Package mlxtest holds test helpers for code that runs on the MLX
// backend: opening it, or skipping with one line where libmlxc is not
// installed, so that tests and benchmarks of other packages pass on
// machines without MLX.
package mlxtest

import (
	"errors"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi"
	"github.com/mlxgo/mlxgo/tensor"
)

// OpenOrSkip returns the process-wide MLX backend (mlxffi.Open), or skips
// t with one line when libmlxc is not found; any other failure to open it
// fails t.
func OpenOrSkip(t testing.TB) *mlxffi.Backend {
	t.Helper()
	be, err := mlxffi.Open()
	if errors.Is(err, mlxffi.ErrNotFound) {
		t.Skip("libmlxc not found: MLX skipped")
	}
	if err != nil {
		t.Fatal(err)
	}
	return be
}

// UseAsDefault is OpenOrSkip that also makes the MLX backend the default
// backend until t ends (the previous default is restored in t.Cleanup),
// so code that makes arrays through the default backend runs on MLX.
func UseAsDefault(t testing.TB) *mlxffi.Backend {
	t.Helper()
	be := OpenOrSkip(t)
	prev := tensor.Default()
	tensor.SetDefault(be)
	t.Cleanup(func() { tensor.SetDefault(prev) })
	return be
}
