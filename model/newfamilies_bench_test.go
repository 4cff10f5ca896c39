package model

import (
	"encoding/binary"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// benchCheckpoint is a random 4-bit checkpoint written for a benchmark:
// its tensors, and the bytes one decode step reads.
type benchCheckpoint struct {
	arrays map[string]*tensor.Array
	read   int
	r      *rand.Rand
}

// linear adds a 4-bit linear name [out, in] (group 64; experts > 0: a
// stacked bank) and counts it as read each step unless skip.
func (c *benchCheckpoint) linear(name string, out, in int, skip bool) {
	var owned []*tensor.Array
	wq, s, b := randQuant(c.r, out, in, &owned)
	c.arrays[name+".weight"], c.arrays[name+".scales"], c.arrays[name+".biases"] = wq, s, b
	if !skip {
		c.read += wq.NBytes() + s.NBytes() + b.NBytes()
	}
}

// vec adds a bfloat16 tensor of ones (norms) or small values, read each step.
func (c *benchCheckpoint) vec(name string, v float32, shape ...int) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	raw := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(raw[2*i:], tensor.F32ToBF16(v*(1+0.1*c.r.Float32())))
	}
	c.arrays[name] = tensor.FromBytes(raw, shape, tensor.BFloat16)
	c.read += 2 * n
}

// write saves the checkpoint with cfg (plus the quantization section) to dir.
func (c *benchCheckpoint) write(b *testing.B, dir string, cfg map[string]any) {
	cfg["quantization"] = map[string]any{"group_size": 64, "bits": 4}
	raw, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := safetensors.WriteArrays(filepath.Join(dir, "model.safetensors"), c.arrays, map[string]string{"format": "mlx"}); err != nil {
		b.Fatal(err)
	}
	for _, a := range c.arrays {
		a.Free()
	}
	c.arrays = nil
}

const (
	benchHidden, benchLayers, benchFFN, benchVocab = 2048, 16, 8192, 32000
)

// benchCommon adds the embedding (one row read per step), the final norm,
// the head and each layer's norms and dense MLP.
func benchCommon(c *benchCheckpoint) {
	d := benchHidden
	c.linear("model.embed_tokens", benchVocab, d, true)
	c.read += d/2 + 2*2*(d/64) // the one row read
	c.vec("model.norm.weight", 1, d)
	c.linear("lm_head", benchVocab, d, false)
	for i := range benchLayers {
		p := "model.layers." + strconv.Itoa(i) + "."
		c.vec(p+"input_layernorm.weight", 1, d)
		c.vec(p+"post_attention_layernorm.weight", 1, d)
		c.linear(p+"mlp.gate_proj", benchFFN, d, false)
		c.linear(p+"mlp.up_proj", benchFFN, d, false)
		c.linear(p+"mlp.down_proj", d, benchFFN, false)
	}
}

// benchQwen35 writes a 1B-shaped Qwen3.5 (dense): 16 layers, three gated
// DeltaNet layers (16 key and value heads of 128) to each gated full
// attention layer (16 heads of 128, 4 KV heads), FFN 8192.
func benchQwen35(b *testing.B, dir string) int {
	c := &benchCheckpoint{arrays: map[string]*tensor.Array{}, r: rand.New(rand.NewSource(2))}
	benchCommon(c)
	d, kh, vh, kd, vd, heads, kvh, hd := benchHidden, 16, 16, 128, 128, 16, 4, 128
	var types []string
	for i := range benchLayers {
		p := "model.layers." + strconv.Itoa(i) + "."
		if (i+1)%4 != 0 {
			types = append(types, "linear_attention")
			la := p + "linear_attn."
			conv := 2*kh*kd + vh*vd
			c.linear(la+"in_proj_qkv", conv, d, false)
			c.linear(la+"in_proj_z", vh*vd, d, false)
			c.linear(la+"in_proj_b", vh, d, false)
			c.linear(la+"in_proj_a", vh, d, false)
			c.vec(la+"conv1d.weight", 0.1, conv, 1, 4)
			c.vec(la+"A_log", 0.5, vh)
			c.vec(la+"dt_bias", 0.5, vh)
			c.vec(la+"norm.weight", 1, vd)
			c.linear(la+"out_proj", d, vh*vd, false)
			continue
		}
		types = append(types, "full_attention")
		sa := p + "self_attn."
		c.linear(sa+"q_proj", 2*heads*hd, d, false)
		c.linear(sa+"k_proj", kvh*hd, d, false)
		c.linear(sa+"v_proj", kvh*hd, d, false)
		c.linear(sa+"o_proj", d, heads*hd, false)
		c.vec(sa+"q_norm.weight", 0.1, hd)
		c.vec(sa+"k_norm.weight", 0.1, hd)
	}
	c.write(b, dir, map[string]any{
		"model_type": "qwen3_5_text", "architectures": []string{"Qwen3_5ForCausalLM"},
		"hidden_size": d, "num_hidden_layers": benchLayers, "intermediate_size": benchFFN, "vocab_size": benchVocab,
		"num_attention_heads": heads, "num_key_value_heads": kvh, "head_dim": hd, "rms_norm_eps": 1e-6,
		"layer_types": types, "linear_conv_kernel_dim": 4, "linear_key_head_dim": kd, "linear_value_head_dim": vd,
		"linear_num_key_heads": kh, "linear_num_value_heads": vh, "tie_word_embeddings": false,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
	})
	return c.read
}

// benchMLA writes a 1B-shaped DeepSeek-V3 (dense MLP, no routed experts:
// the attention is what differs) or, with dsa, GLM-5 (its indexer: 32
// heads of 128, top 2048): 16 heads, q LoRA 768, latent 512 + 64 rotary,
// no-rope 128, v 128.
func benchMLA(b *testing.B, dir string, dsa bool) int {
	c := &benchCheckpoint{arrays: map[string]*tensor.Array{}, r: rand.New(rand.NewSource(3))}
	benchCommon(c)
	d, heads, qr, rank, rope, nope, vdim := benchHidden, 16, 768, 512, 64, 128, 128
	ih, id := 32, 128
	for i := range benchLayers {
		sa := "model.layers." + strconv.Itoa(i) + ".self_attn."
		c.linear(sa+"q_a_proj", qr, d, false)
		c.vec(sa+"q_a_layernorm.weight", 1, qr)
		c.linear(sa+"q_b_proj", heads*(nope+rope), qr, false)
		c.linear(sa+"kv_a_proj_with_mqa", rank+rope, d, false)
		c.vec(sa+"kv_a_layernorm.weight", 1, rank)
		c.linear(sa+"kv_b_proj", heads*(nope+vdim), rank, false) // absorbed, read packed
		c.linear(sa+"o_proj", d, heads*vdim, false)
		if dsa {
			ip := sa + "indexer."
			c.linear(ip+"wq_b", ih*id, qr, false)
			c.linear(ip+"wk", id, d, false)
			c.linear(ip+"weights_proj", ih, d, false)
			c.vec(ip+"k_norm.weight", 1, id)
			c.vec(ip+"k_norm.bias", 0.01, id)
		}
	}
	cfg := map[string]any{
		"model_type": "deepseek_v3", "architectures": []string{"DeepseekV3ForCausalLM"},
		"hidden_size": d, "num_hidden_layers": benchLayers, "intermediate_size": benchFFN, "vocab_size": benchVocab,
		"num_attention_heads": heads, "num_key_value_heads": heads, "rms_norm_eps": 1e-6,
		"q_lora_rank": qr, "kv_lora_rank": rank, "qk_rope_head_dim": rope, "qk_nope_head_dim": nope, "v_head_dim": vdim,
		"n_routed_experts": 0, "max_position_embeddings": 4096, "tie_word_embeddings": false,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000.0},
	}
	if dsa {
		cfg["model_type"], cfg["architectures"] = "glm_moe_dsa", []string{"GlmMoeDsaForCausalLM"}
		cfg["index_topk"], cfg["index_n_heads"], cfg["index_head_dim"] = 2048, ih, id
	}
	c.write(b, dir, cfg)
	return c.read
}

// BenchmarkDecodeNewFamilies1B4bit measures greedy decode tokens/s after
// a 32-token prompt of random 1B-shaped 4-bit models of the new families —
// Qwen3.5 (DeltaNet hybrid), DeepSeek-V3 (MLA) and GLM-5 (MLA with the
// DSA indexer), dense MLPs of 8192 — beside BenchmarkDecodeLlama1B4bit's
// Llama, one token of each in turn per iteration: each family's tok/s
// (of its median step),
// its ratio to the Llama's in the same run, and its share of the
// roofline (bytes one step reads ÷ read bandwidth).
func BenchmarkDecodeNewFamilies1B4bit(b *testing.B) {
	type run struct {
		name   string
		arch   Architecture
		caches []kv.Cache
		bytes  int
		tok    int32
		steps  []time.Duration
	}
	ll, lbytes, owned := benchLlama1B()
	defer tensor.Free(owned...)
	runs := []*run{{name: "llama", arch: ll, bytes: lbytes}}
	for _, f := range []struct {
		name string
		make func(*testing.B, string) int
	}{
		{"qwen3_5", benchQwen35},
		{"deepseek_v3", func(b *testing.B, dir string) int { return benchMLA(b, dir, false) }},
		{"glm_moe_dsa", func(b *testing.B, dir string) int { return benchMLA(b, dir, true) }},
	} {
		dir := b.TempDir()
		n := f.make(b, dir)
		m, err := Load(dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		runs = append(runs, &run{name: f.name, arch: m.(*Loaded).Arch(), bytes: n})
	}
	step := func(r *run, ids []int32) int32 {
		sc := tensor.NewScope()
		defer sc.Close()
		in := int32s(tensor.Default(), ids)
		h := r.arch.Forward(tensor.Reshape(in, 1, len(ids)), r.caches, nil)
		last := tensor.SliceAxis(h, 1, len(ids)-1, len(ids))
		am := tensor.Argmax(r.arch.Logits(last), -1, false)
		return int32(binary.LittleEndian.Uint32(tensor.AsType(am, tensor.Int32).Bytes()))
	}
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32(i * 7)
	}
	for _, r := range runs {
		r.caches = r.arch.MakeCaches()
		defer func() {
			for _, c := range r.caches {
				c.Free()
			}
		}()
		r.tok = step(r, prompt)
	}
	gbs := tensortest.ReadBandwidth(3)
	b.ResetTimer()
	for b.Loop() {
		for _, r := range runs {
			t0 := time.Now()
			r.tok = step(r, []int32{r.tok})
			r.steps = append(r.steps, time.Since(t0))
		}
	}
	// each model's median step: other work on the machine lands on some
	// steps of some models, and the median leaves it out
	median := func(r *run) float64 {
		d := slices.Clone(r.steps)
		slices.Sort(d)
		return 1 / d[len(d)/2].Seconds()
	}
	base := median(runs[0])
	for _, r := range runs {
		tps := median(r)
		roof := gbs * 1e9 / float64(r.bytes)
		b.ReportMetric(tps, r.name+"-tok/s")
		b.ReportMetric(tps/roof, r.name+"-roofline-ratio")
		if r != runs[0] {
			b.ReportMetric(tps/base, r.name+"/llama")
		}
		b.Logf("%s: %.3f GB read per token, %.2f tok/s, roofline %.2f tok/s", r.name, float64(r.bytes)/1e9, tps, roof)
	}
	b.ReportMetric(gbs, "read-GB/s")
}
