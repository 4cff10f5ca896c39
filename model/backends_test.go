package model

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
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
		withDefault(t, mlxtest.OpenOrSkip(t), f)
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

// TestLoadOnOtherBackend loads a sliding-window model on MLX while the
// default backend stays the CPU one (what `mlxgo convert --backend mlx`
// does) and runs a prompt longer than the window without caches: the
// windowed mask must be made on the model's backend, and the logits equal
// the CPU model's. Skips without libmlxc.
func TestLoadOnOtherBackend(t *testing.T) {
	mlx := mlxtest.OpenOrSkip(t)
	if tensor.Default() == mlx {
		t.Fatal("default backend is MLX; this test needs another default")
	}
	src := filepath.Join("testdata", "gemma4_dense", "f32")
	prompt := fixturePrompt(t, "gemma4_dense")
	cpu := loadGemma4(t, src)
	want := logitsOf(t, cpu, prompt, 0)
	cpu.Close()
	m, err := Load(src, &LoadOptions{Backend: mlx})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sc := tensor.NewScope()
	defer sc.Close()
	h, err := m.Forward(int32s(mlx, prompt, 1, len(prompt)), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := m.Logits(h)
	if err != nil {
		t.Fatal(err)
	}
	got := lg.Float32s()
	v := len(got) / len(prompt)
	worst := 0.0
	for p := range prompt {
		for j := range v {
			worst = math.Max(worst, math.Abs(float64(got[p*v+j]-want[p][j])))
		}
	}
	if worst > 1e-3 {
		t.Errorf("MLX logits differ from the CPU model's by %.3g", worst)
	}
}
