package mlxffi

import (
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestEmptyArrays runs ops on zero-sized arrays: MLX's CPU kernels divide
// by zero on some of them, which would kill the process, so each must be
// either computed by MLX safely or answered by the backend itself.
func TestEmptyArrays(t *testing.T) {
	be := mlxBackend(t)
	s := tensor.NewScope()
	defer s.Close()
	e := tensor.FullOn(be, []int{0, 4}, 1, tensor.Float32)
	e3 := tensor.FullOn(be, []int{1, 2, 0, 4}, 1, tensor.Float32)
	ones := tensor.FullOn(be, []int{3, 4}, 1, tensor.Float32)
	idx := tensor.FullOn(be, []int{0}, 0, tensor.Int32)
	cases := []struct {
		name  string
		f     func() *tensor.Array
		shape []int
	}{
		{"unary", func() *tensor.Array { return tensor.Exp(e) }, []int{0, 4}},
		{"binary", func() *tensor.Array { return tensor.Add(e, e) }, []int{0, 4}},
		{"sum-empty-axis", func() *tensor.Array { return tensor.Sum(e, []int{0}, false) }, []int{4}},
		{"max-other-axis", func() *tensor.Array { return tensor.Max(e, []int{1}, false) }, []int{0}},
		{"argmax", func() *tensor.Array { return tensor.Argmax(e, 1, false) }, []int{0}},
		{"softmax", func() *tensor.Array { return tensor.Softmax(e, -1) }, []int{0, 4}},
		{"logsumexp", func() *tensor.Array { return tensor.LogSumExp(e, []int{1}, false) }, []int{0}},
		{"cumsum", func() *tensor.Array { return tensor.Cumsum(e, 0, false, true) }, []int{0, 4}},
		{"take", func() *tensor.Array { return tensor.Take(ones, idx, 0) }, []int{0, 4}},
		{"concat", func() *tensor.Array { return tensor.Concatenate([]*tensor.Array{e, ones}, 0) }, []int{3, 4}},
		{"rmsnorm", func() *tensor.Array { return tensor.RMSNorm(e, nil, 1e-5) }, []int{0, 4}},
		{"layernorm", func() *tensor.Array { return tensor.LayerNorm(e, nil, nil, 1e-5) }, []int{0, 4}},
		{"rope", func() *tensor.Array { return tensor.RoPE(e3, tensor.RoPEOptions{Dims: 4, Base: 10000}) }, []int{1, 2, 0, 4}},
		{"sdpa-no-queries", func() *tensor.Array {
			k := tensor.FullOn(be, []int{1, 2, 3, 4}, 1, tensor.Float32)
			return tensor.ScaledDotProductAttention(e3, k, k, tensor.SDPAOptions{})
		}, []int{1, 2, 0, 4}},
		{"matmul-k0", func() *tensor.Array {
			return tensor.Matmul(tensor.FullOn(be, []int{2, 0}, 1, tensor.Float32), tensor.FullOn(be, []int{0, 3}, 1, tensor.Float32))
		}, []int{2, 3}},
		{"random", func() *tensor.Array { return tensor.RandomBits(tensor.KeyOn(be, 1), 0, 2) }, []int{0, 2}},
		{"argsort", func() *tensor.Array { return tensor.Argsort(e, 0) }, []int{0, 4}},
		{"argpartition", func() *tensor.Array { return tensor.Argpartition(e, 0, 1) }, []int{0, 4}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out *tensor.Array
			if err := tensor.Try(func() { out = c.f(); _ = out.Bytes() }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out.Shape(), c.shape) {
				t.Fatalf("shape %v, want %v", out.Shape(), c.shape)
			}
		})
	}
}
