package cpu

import (
	"errors"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// Test helpers for the indexing and fused-layer kernels.

// fzRand returns n deterministic pseudo-random values in [-1, 1).
func fzRand(n int, seed uint32) []float32 {
	out := make([]float32, n)
	s := seed*2654435761 + 12345
	for i := range out {
		s = s*1664525 + 1013904223
		out[i] = float32(s>>8)/float32(1<<24)*2 - 1
	}
	return out
}

// fzRound returns v as dt would store it.
func fzRound(v []float32, dt tensor.DType) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = tensor.RoundTo(x, dt)
	}
	return out
}

// fzClose fails when got and want differ by more than atol + rtol·|want|.
func fzClose(t *testing.T, what string, got []float32, want []float64, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		g := float64(got[i])
		if math.IsNaN(g) || math.Abs(g-want[i]) > atol+rtol*math.Abs(want[i]) {
			if bad < 5 {
				t.Errorf("%s[%d] = %v, want %v", what, i, g, want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values off", what, bad, len(got))
	}
}

// fzNoLeak fails the test if f leaves arrays alive.
func fzNoLeak(t *testing.T, f func()) {
	t.Helper()
	before := tensor.LiveArrays()
	f()
	if d := tensor.LiveArrays() - before; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
}

// fzPanicErr runs f and returns the *tensor.Error it panics with.
func fzPanicErr(t *testing.T, f func()) *tensor.Error {
	t.Helper()
	err := tensor.Try(f)
	var te *tensor.Error
	if err == nil || !errors.As(err, &te) {
		t.Fatalf("want a *tensor.Error panic, got %v", err)
	}
	return te
}
