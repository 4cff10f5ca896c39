package model_test

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// llamaTestConfig is a small Llama 3 config for checkpoints written by tests.
var llamaTestConfig = map[string]any{
	"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
	"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
	"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
	"vocab_size": 512, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
	"rope_theta": 500000.0, "eos_token_id": []int{2, 3},
	"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
}

// randomLlamaTensors returns the float32 tensors of llamaTestConfig with
// N(0, std) weights and unit norms.
func randomLlamaTensors(std float64) map[string][]int {
	shapes := map[string][]int{
		"model.embed_tokens.weight": {512, 128},
		"model.norm.weight":         {128},
		"lm_head.weight":            {512, 128},
	}
	for l := range 2 {
		p := fmt.Sprintf("model.layers.%d.", l)
		shapes[p+"input_layernorm.weight"] = []int{128}
		shapes[p+"post_attention_layernorm.weight"] = []int{128}
		shapes[p+"self_attn.q_proj.weight"] = []int{128, 128}
		shapes[p+"self_attn.k_proj.weight"] = []int{64, 128}
		shapes[p+"self_attn.v_proj.weight"] = []int{64, 128}
		shapes[p+"self_attn.o_proj.weight"] = []int{128, 128}
		shapes[p+"mlp.gate_proj.weight"] = []int{256, 128}
		shapes[p+"mlp.up_proj.weight"] = []int{256, 128}
		shapes[p+"mlp.down_proj.weight"] = []int{128, 256}
	}
	return shapes
}

// writeRandomLlama writes a seeded random float32 Llama checkpoint and
// returns its folder.
func writeRandomLlama(t *testing.T, std float64) string {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewSource(3))
	arrs := map[string]*tensor.Array{}
	for name, shape := range randomLlamaTensors(std) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			if len(shape) == 1 {
				v[i] = 1 + float32(0.1*r.NormFloat64())
			} else {
				v[i] = float32(std * r.NormFloat64())
			}
		}
		arrs[name] = tensor.FromFloat32(v, shape, tensor.Float32)
	}
	if err := safetensors.WriteArrays(filepath.Join(dir, "model.safetensors"), arrs, nil); err != nil {
		t.Fatal(err)
	}
	for _, a := range arrs {
		a.Free()
	}
	raw, _ := json.Marshal(llamaTestConfig)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
