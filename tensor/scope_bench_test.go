package tensor_test

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// These measure what scope tracking adds to making an array, the cost
// every op pays: NewArray registers the result with the innermost open
// scope of the goroutine that made it.

// BenchmarkNewArray makes and frees a one-element array with no scope open.
func BenchmarkNewArray(b *testing.B) {
	for b.Loop() {
		tensor.Zeros([]int{1}, tensor.Float32).Free()
	}
}

// BenchmarkNewArrayInScope makes and frees a one-element array inside an
// open scope (tracked, then dropped from it by Free).
func BenchmarkNewArrayInScope(b *testing.B) {
	s := tensor.NewScope()
	defer s.Close()
	for b.Loop() {
		tensor.Zeros([]int{1}, tensor.Float32).Free()
	}
}

// BenchmarkScopeClose opens a scope, makes eight arrays in it and closes
// it (which frees them): one model layer's worth of temporaries.
func BenchmarkScopeClose(b *testing.B) {
	for b.Loop() {
		s := tensor.NewScope()
		for range 8 {
			_ = tensor.Zeros([]int{1}, tensor.Float32)
		}
		s.Close()
	}
}
