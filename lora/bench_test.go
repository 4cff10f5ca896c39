package lora_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// shape1B is a 1B-shaped Llama: hidden 2048, 16 layers, GQA 32/8, head
// dim 64, FFN 8192, vocab 32000.
var shape1B = struct{ hidden, layers, heads, kvHeads, headDim, ffn, vocab int }{2048, 16, 32, 8, 64, 8192, 32000}

// projections of one Llama layer: name, out, in.
func projections() [][3]any {
	s := shape1B
	return [][3]any{
		{"self_attn.q_proj", s.heads * s.headDim, s.hidden}, {"self_attn.k_proj", s.kvHeads * s.headDim, s.hidden},
		{"self_attn.v_proj", s.kvHeads * s.headDim, s.hidden}, {"self_attn.o_proj", s.hidden, s.heads * s.headDim},
		{"mlp.gate_proj", s.ffn, s.hidden}, {"mlp.up_proj", s.ffn, s.hidden}, {"mlp.down_proj", s.hidden, s.ffn},
	}
}

// write1B writes a random 1B-shaped 4-bit (groups of 64, bfloat16 scales)
// Llama checkpoint and a rank-16 bfloat16 PEFT adapter on all seven
// projections of every layer, and returns the two folders.
func write1B(b *testing.B) (modelDir, adapterDir string) {
	b.Helper()
	s := shape1B
	modelDir, adapterDir = b.TempDir(), b.TempDir()
	r := rand.New(rand.NewSource(11))
	var ts []safetensors.Tensor
	bf16 := func(n int, v func() float32) []byte {
		out := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(out[2*i:], tensor.F32ToBF16(v()))
		}
		return out
	}
	lin := func(name string, out, in int) {
		w := make([]byte, out*in/2)
		r.Read(w)
		g := out * in / 64
		ts = append(ts,
			safetensors.Tensor{Name: name + ".weight", DType: tensor.Uint32, Shape: []int{out, in / 8}, Data: w},
			safetensors.Tensor{Name: name + ".scales", DType: tensor.BFloat16, Shape: []int{out, in / 64}, Data: bf16(g, func() float32 { return 0.002 + 0.001*r.Float32() })},
			safetensors.Tensor{Name: name + ".biases", DType: tensor.BFloat16, Shape: []int{out, in / 64}, Data: bf16(g, func() float32 { return -0.015 - 0.005*r.Float32() })})
	}
	norm := func(name string) {
		ts = append(ts, safetensors.Tensor{Name: name, DType: tensor.BFloat16, Shape: []int{s.hidden}, Data: bf16(s.hidden, func() float32 { return 1 })})
	}
	lin("model.embed_tokens", s.vocab, s.hidden)
	norm("model.norm.weight")
	lin("lm_head", s.vocab, s.hidden)
	var ad []safetensors.Tensor
	const rank = 16
	for l := range s.layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		norm(p + "input_layernorm.weight")
		norm(p + "post_attention_layernorm.weight")
		for _, pr := range projections() {
			name, out, in := pr[0].(string), pr[1].(int), pr[2].(int)
			lin(p+name, out, in)
			base := "base_model.model." + p + name
			ad = append(ad,
				safetensors.Tensor{Name: base + ".lora_A.weight", DType: tensor.BFloat16, Shape: []int{rank, in}, Data: bf16(rank*in, func() float32 { return float32(0.02 * r.NormFloat64()) })},
				safetensors.Tensor{Name: base + ".lora_B.weight", DType: tensor.BFloat16, Shape: []int{out, rank}, Data: bf16(out*rank, func() float32 { return float32(0.02 * r.NormFloat64()) })})
		}
	}
	if err := safetensors.Write(filepath.Join(modelDir, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		b.Fatal(err)
	}
	cfg := map[string]any{"model_type": "llama", "hidden_size": s.hidden, "num_hidden_layers": s.layers, "intermediate_size": s.ffn,
		"num_attention_heads": s.heads, "num_key_value_heads": s.kvHeads, "head_dim": s.headDim, "vocab_size": s.vocab,
		"rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": false, "eos_token_id": 2,
		"quantization": map[string]any{"group_size": 64, "bits": 4}}
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(modelDir, "config.json"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(adapterDir, "adapter_model.safetensors"), ad, nil); err != nil {
		b.Fatal(err)
	}
	acfg, _ := json.Marshal(map[string]any{"peft_type": "LORA", "r": rank, "lora_alpha": 32,
		"target_modules": []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}})
	if err := os.WriteFile(filepath.Join(adapterDir, "adapter_config.json"), acfg, 0o644); err != nil {
		b.Fatal(err)
	}
	return modelDir, adapterDir
}

// BenchmarkDecode1B4bitAdapter measures greedy decode tokens/s of a
// random 1B-shaped 4-bit Llama with one rank-16 adapter on all seven
// projections of every layer (unmerged), against the same loaded model
// with no adapter selected. Each iteration decodes one token of each,
// alternating, so that both see the same machine load; ratio is adapter
// tok/s ÷ base tok/s, cpu-ratio base CPU time ÷ adapter CPU time per token.
func BenchmarkDecode1B4bitAdapter(b *testing.B) {
	dir, ad := write1B(b)
	m, err := lora.Open(dir, &model.LoadOptions{Copy: true}, ad)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	base := m.With(lora.Selection{})
	type run struct {
		m      *lora.Model
		caches []kv.Cache
		tok    int32
		took   time.Duration
		cpu    time.Duration
	}
	step := func(r *run, ids []int32) {
		sc := tensor.NewScope()
		defer sc.Close()
		h, err := r.m.Forward(tensor.Reshape(ids2D(ids), 1, len(ids)), r.caches, nil)
		if err != nil {
			b.Fatal(err)
		}
		l, err := r.m.Logits(tensor.SliceAxis(h, 1, len(ids)-1, len(ids)))
		if err != nil {
			b.Fatal(err)
		}
		r.tok = int32(binary.LittleEndian.Uint32(tensor.AsType(tensor.Argmax(l, -1, false), tensor.Int32).Bytes()))
	}
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(i*7 + 3)
	}
	runs := []*run{{m: base, caches: m.MakeCaches()}, {m: m, caches: m.MakeCaches()}}
	for _, r := range runs {
		defer model.FreeCaches(r.caches)
		step(r, prompt)
	}
	b.ResetTimer()
	for b.Loop() {
		for _, r := range runs {
			t0, c0 := time.Now(), cpuTime()
			step(r, []int32{r.tok})
			r.took += time.Since(t0)
			r.cpu += cpuTime() - c0
		}
	}
	n := float64(b.N)
	baseTPS, adTPS := n/runs[0].took.Seconds(), n/runs[1].took.Seconds()
	b.ReportMetric(baseTPS, "base-tok/s")
	b.ReportMetric(adTPS, "adapter-tok/s")
	b.ReportMetric(adTPS/baseTPS, "ratio")
	b.ReportMetric(float64(runs[0].cpu)/float64(runs[1].cpu), "cpu-ratio")
}

// cpuTime is the CPU time the process has used (user and system): on a
// machine shared with other work, the ratio of two paths' CPU times is
// steadier than that of their wall times.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
