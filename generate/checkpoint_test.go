package generate_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// llamaShape sizes a random Llama checkpoint.
type llamaShape struct {
	Hidden, Layers, Heads, KVHeads, HeadDim, FFN, Vocab int
}

// writeLlama writes a seeded random Llama checkpoint with shape s: float32
// weights (N(0, 0.05)), or, with bits > 0, MLX affine-quantized weights
// (random packed words, bfloat16 scales and biases, group 64) — decode
// speed does not depend on the values. It returns the folder and the
// bytes a decode step reads (every weight except the embedding).
func writeLlama(t testing.TB, s llamaShape, bits int) (string, int64) {
	t.Helper()
	dir := t.TempDir()
	r := rand.New(rand.NewSource(7))
	var tensors []safetensors.Tensor
	var stepBytes int64
	add := func(name string, dt tensor.DType, shape []int, data []byte, read bool) {
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: dt, Shape: shape, Data: data})
		if read {
			stepBytes += int64(len(data))
		}
	}
	f32 := func(n int, one bool) []byte {
		b := make([]byte, 4*n)
		for i := range n {
			v := float32(0.2 * r.NormFloat64())
			if one {
				v = 1 + 0.5*v
			}
			binary.LittleEndian.PutUint32(b[4*i:], mathFloat32bits(v))
		}
		return b
	}
	lin := func(name string, out, in int, read bool) {
		if bits == 0 {
			add(name+".weight", tensor.Float32, []int{out, in}, f32(out*in, false), read)
			return
		}
		w := make([]byte, out*in*bits/8)
		r.Read(w)
		g := out * in / 64
		sc, bi := make([]byte, 2*g), make([]byte, 2*g)
		for i := range g {
			binary.LittleEndian.PutUint16(sc[2*i:], tensor.F32ToBF16(0.002+0.001*r.Float32()))
			binary.LittleEndian.PutUint16(bi[2*i:], tensor.F32ToBF16(-0.015-0.005*r.Float32()))
		}
		add(name+".weight", tensor.Uint32, []int{out, in * bits / 32}, w, read)
		add(name+".scales", tensor.BFloat16, []int{out, in / 64}, sc, read)
		add(name+".biases", tensor.BFloat16, []int{out, in / 64}, bi, read)
	}
	norm := func(name string) {
		if bits == 0 {
			add(name, tensor.Float32, []int{s.Hidden}, f32(s.Hidden, true), true)
			return
		}
		b := make([]byte, 2*s.Hidden)
		for i := range s.Hidden {
			binary.LittleEndian.PutUint16(b[2*i:], tensor.F32ToBF16(1))
		}
		add(name, tensor.BFloat16, []int{s.Hidden}, b, true)
	}
	lin("model.embed_tokens", s.Vocab, s.Hidden, false)
	norm("model.norm.weight")
	lin("lm_head", s.Vocab, s.Hidden, true)
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		norm(p + "input_layernorm.weight")
		norm(p + "post_attention_layernorm.weight")
		lin(p+"self_attn.q_proj", s.Heads*s.HeadDim, s.Hidden, true)
		lin(p+"self_attn.k_proj", s.KVHeads*s.HeadDim, s.Hidden, true)
		lin(p+"self_attn.v_proj", s.KVHeads*s.HeadDim, s.Hidden, true)
		lin(p+"self_attn.o_proj", s.Hidden, s.Heads*s.HeadDim, true)
		lin(p+"mlp.gate_proj", s.FFN, s.Hidden, true)
		lin(p+"mlp.up_proj", s.FFN, s.Hidden, true)
		lin(p+"mlp.down_proj", s.Hidden, s.FFN, true)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"hidden_size": s.Hidden, "intermediate_size": s.FFN, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"vocab_size": s.Vocab, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
		"rope_theta": 500000.0, "eos_token_id": []int{2},
	}
	if bits > 0 {
		cfg["quantization"] = map[string]any{"group_size": 64, "bits": bits}
	}
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, stepBytes
}

// writeRandomLlama is a small float32 Llama with the given head dim and
// layer count (head dims that KV quantization groups can divide).
func writeRandomLlama(t testing.TB, headDim, layers int, _ any) string {
	dir, _ := writeLlama(t, llamaShape{Hidden: 128, Layers: layers, Heads: 4, KVHeads: 2, HeadDim: headDim, FFN: 256, Vocab: 320}, 0)
	return dir
}

func mathFloat32bits(v float32) uint32 { return math.Float32bits(v) }
