package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// writeWideLlama writes a random float32 one-layer Llama whose matrices
// are all wider than 512 columns (the int8 kernels' minimum), 8 of them.
func writeWideLlama(t *testing.T) string {
	t.Helper()
	const hidden, heads, kvHeads, headDim, ffn, vocab = 576, 9, 3, 64, 1152, 256
	r := rand.New(rand.NewPCG(4, 4))
	var ts []safetensors.Tensor
	add := func(name string, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		b := make([]byte, 4*n)
		for i := range n {
			v := float32(0.05 * r.NormFloat64())
			if len(shape) == 1 {
				v = 1
			}
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: tensor.Float32, Shape: shape, Data: b})
	}
	add("model.embed_tokens.weight", vocab, hidden)
	add("model.norm.weight", hidden)
	add("lm_head.weight", vocab, hidden)
	p := "model.layers.0."
	add(p+"input_layernorm.weight", hidden)
	add(p+"post_attention_layernorm.weight", hidden)
	add(p+"self_attn.q_proj.weight", heads*headDim, hidden)
	add(p+"self_attn.k_proj.weight", kvHeads*headDim, hidden)
	add(p+"self_attn.v_proj.weight", kvHeads*headDim, hidden)
	add(p+"self_attn.o_proj.weight", hidden, heads*headDim)
	add(p+"mlp.gate_proj.weight", ffn, hidden)
	add(p+"mlp.up_proj.weight", ffn, hidden)
	add(p+"mlp.down_proj.weight", hidden, ffn)
	dir := t.TempDir()
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{
		"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": 1,
		"num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": headDim,
		"vocab_size": vocab, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
		"rope_theta": 10000.0, "eos_token_id": 2,
	})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInt8RepackAtLoad: --int8-activations repacks every matrix the text
// path reads while the model loads (the line names how many: the 8 of
// this model), on the generate verbs' and the server's load paths alike;
// the packs go with the model when the verb ends, and a
// later verb without the flag in the same process runs with float
// activations again.
func TestInt8RepackAtLoad(t *testing.T) {
	if !cpu.Int8ActivationsSupported() {
		t.Skip("no AVX512_VNNI: this CPU has no int8 kernels")
	}
	defer cpu.SetInt8Activations(cpu.Int8Activations())
	q := filepath.Join(t.TempDir(), "q4")
	if code, _, errs := run(t, "convert", "--hf-path", writeWideLlama(t), "--mlx-path", q, "-q", "--q-bits", "4", "--q-group-size", "64"); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	code, _, errs := run(t, "bench", "--model", q, "-p", "6", "-g", "3", "-n", "1", "--backend", "cpu", "--int8-activations")
	if code != 0 {
		t.Fatalf("bench --int8-activations: exit %d: %s", code, errs)
	}
	if want := "int8: 8 weight matrices repacked at load"; !strings.Contains(errs, want) {
		t.Errorf("stderr %q lacks %q", errs, want)
	}
	if n, b := cpu.Int8Packs(); n != 0 {
		t.Errorf("%d int8 packs (%d bytes) outlive the verb's model", n, b)
	}
	// the server's load path (serve repacked inside its first request)
	defer func(on bool) { int8Activations = on }(int8Activations)
	int8Activations = true
	var serr strings.Builder
	lm, _, err := loadServeModel(q, "cpu", false, nil, nil, &serr)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := cpu.Int8Packs(); n != 8 || !strings.Contains(serr.String(), "int8: 8 weight matrices repacked at load") {
		t.Errorf("serve's load: %d packs, stderr %q", n, serr.String())
	}
	lm.Close()
	if n, _ := cpu.Int8Packs(); n != 0 {
		t.Errorf("%d int8 packs outlive the server's model", n)
	}
	code, _, errs = run(t, "bench", "--model", q, "-p", "6", "-g", "3", "-n", "1", "--backend", "cpu")
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errs)
	}
	if cpu.Int8Activations() || strings.Contains(errs, "int8") {
		t.Errorf("a verb without --int8-activations ran with int8 activations on (stderr %q)", errs)
	}
	if n, _ := cpu.Int8Packs(); n != 0 {
		t.Errorf("%d int8 packs built without --int8-activations", n)
	}
}
