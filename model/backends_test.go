package model

import (
	"errors"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi"
	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
)

// ForEachBackend runs f as one subtest per backend the parity tests must
// pass on: "cpu" always, and "mlx" (MLX through libmlxc), which skips with
// one line when libmlxc is not installed. The backend is the default
// backend while f runs, so Load, Greedy and the test's own arrays all use
// it. It lives in package model (a test file) so that both the internal
// tests and the model_test package share one table; model itself never
// imports mlxffi.
func ForEachBackend(t *testing.T, f func(t *testing.T, be tensor.Backend)) {
	t.Helper()
	t.Run("cpu", func(t *testing.T) {
		be, err := tensor.Open("cpu")
		if err != nil {
			t.Fatal(err)
		}
		withDefault(t, be, f)
	})
	t.Run("mlx", func(t *testing.T) {
		be, err := mlxffi.Open()
		if errors.Is(err, mlxffi.ErrNotFound) {
			t.Skip("libmlxc not found: MLX variant skipped")
		}
		if err != nil {
			t.Fatal(err)
		}
		withDefault(t, be, f)
	})
}

// withDefault runs f with be as the default backend, restoring the
// previous default afterwards.
func withDefault(t *testing.T, be tensor.Backend, f func(t *testing.T, be tensor.Backend)) {
	prev := tensor.Default()
	tensor.SetDefault(be)
	defer tensor.SetDefault(prev)
	f(t, be)
}
