package mlxffi

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkHandoff is the bare cost of running a closure on the MLX thread.
func BenchmarkHandoff(b *testing.B) {
	mlxBackend(b)
	for b.Loop() {
		Do(func() {})
	}
}

// BenchmarkAddNoEval is one lazy graph-building call and its free.
func BenchmarkAddNoEval(b *testing.B) {
	be := mlxBackend(b)
	x := tensor.FullOn(be, []int{1}, 1, tensor.Float32)
	defer x.Free()
	for b.Loop() {
		be.Binary(tensor.OpAdd, x, x, []int{1}).Free()
	}
}

// BenchmarkAddEvalOnThread is add+eval as one closure: MLX's own cost.
func BenchmarkAddEvalOnThread(b *testing.B) {
	be := mlxBackend(b)
	x := tensor.FullOn(be, []int{1}, 1, tensor.Float32)
	defer x.Free()
	h := hOf(x)
	for b.Loop() {
		Do(func() {
			var r uintptr
			ck(mlx_add(&r, h, h, be.stream))
			ck(mlx_array_eval(r))
			mlx_array_free(r)
		})
	}
}
