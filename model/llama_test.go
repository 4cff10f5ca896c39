package model_test

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// TestLlamaMLPBiasLoadsOnce loads the same checkpoint with and without
// mlp_bias: the biased one may hold only its six bias vectors more. Loading
// the MLP once plainly and again with biases (as llama.go once did) kept a
// second copy of every MLP weight alive until Close.
func TestLlamaMLPBiasLoadsOnce(t *testing.T) {
	src := writeRandomLlama(t, 0.02)
	biased := rewrite(t, src, func(ts []safetensors.Tensor) []safetensors.Tensor {
		for l := range 2 {
			p := fmt.Sprintf("model.layers.%d.mlp.", l)
			for name, n := range map[string]int{"gate_proj": 256, "up_proj": 256, "down_proj": 128} {
				ts = append(ts, safetensors.Tensor{Name: p + name + ".bias", DType: tensor.Float32, Shape: []int{n}, Data: make([]byte, 4*n)})
			}
		}
		return ts
	}, func(m map[string]any) { m["mlp_bias"] = true })

	held := func(dir string) int64 {
		t.Helper()
		before := tensor.LiveArrays()
		m, err := model.Load(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := tensor.LiveArrays() - before
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if d := tensor.LiveArrays() - before; d != 0 {
			t.Fatalf("%d arrays left after Close", d)
		}
		return n
	}
	plain, withBias := held(src), held(biased)
	if withBias-plain != 6 {
		t.Fatalf("mlp_bias checkpoint holds %d arrays, plain %d: want exactly the 6 biases more", withBias, plain)
	}
}
