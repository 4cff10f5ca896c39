package serve

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"iter"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// llama1B is a 1B-shaped Llama: hidden 2048, 16 layers, GQA 32/8, head
// dim 64, FFN 8192, vocab 32000.
var llama1B = struct{ hidden, layers, heads, kvHeads, headDim, ffn, vocab int }{2048, 16, 32, 8, 64, 8192, 32000}

// write1BAdapters writes a random 1B-shaped 4-bit (groups of 64,
// bfloat16 scales) Llama checkpoint and n random rank-16 bfloat16 PEFT
// adapters on all seven projections of every layer; it returns the model
// folder and the adapter folders.
func write1BAdapters(b *testing.B, n int) (string, []string) {
	b.Helper()
	s := llama1B
	root := b.TempDir()
	modelDir := filepath.Join(root, "model")
	r := rand.New(rand.NewSource(21))
	bf16 := func(k int, v func() float32) []byte {
		out := make([]byte, 2*k)
		for i := range k {
			binary.LittleEndian.PutUint16(out[2*i:], tensor.F32ToBF16(v()))
		}
		return out
	}
	var ts []safetensors.Tensor
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
	projs := []struct {
		name    string
		out, in int
	}{
		{"self_attn.q_proj", s.heads * s.headDim, s.hidden}, {"self_attn.k_proj", s.kvHeads * s.headDim, s.hidden},
		{"self_attn.v_proj", s.kvHeads * s.headDim, s.hidden}, {"self_attn.o_proj", s.hidden, s.heads * s.headDim},
		{"mlp.gate_proj", s.ffn, s.hidden}, {"mlp.up_proj", s.ffn, s.hidden}, {"mlp.down_proj", s.hidden, s.ffn},
	}
	lin("model.embed_tokens", s.vocab, s.hidden)
	norm("model.norm.weight")
	lin("lm_head", s.vocab, s.hidden)
	for l := range s.layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		norm(p + "input_layernorm.weight")
		norm(p + "post_attention_layernorm.weight")
		for _, pr := range projs {
			lin(p+pr.name, pr.out, pr.in)
		}
	}
	if err := os.MkdirAll(modelDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(modelDir, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		b.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"model_type": "llama", "hidden_size": s.hidden, "num_hidden_layers": s.layers, "intermediate_size": s.ffn,
		"num_attention_heads": s.heads, "num_key_value_heads": s.kvHeads, "head_dim": s.headDim, "vocab_size": s.vocab,
		"rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": false, "eos_token_id": 2,
		"quantization": map[string]any{"group_size": 64, "bits": 4}})
	if err := os.WriteFile(filepath.Join(modelDir, "config.json"), cfg, 0o644); err != nil {
		b.Fatal(err)
	}
	const rank = 16
	var dirs []string
	for a := range n {
		dir := filepath.Join(root, fmt.Sprintf("a%d", a))
		var ad []safetensors.Tensor
		for l := range s.layers {
			for _, pr := range projs {
				base := fmt.Sprintf("base_model.model.model.layers.%d.%s", l, pr.name)
				ad = append(ad,
					safetensors.Tensor{Name: base + ".lora_A.weight", DType: tensor.BFloat16, Shape: []int{rank, pr.in}, Data: bf16(rank*pr.in, func() float32 { return float32(0.02 * r.NormFloat64()) })},
					safetensors.Tensor{Name: base + ".lora_B.weight", DType: tensor.BFloat16, Shape: []int{pr.out, rank}, Data: bf16(pr.out*rank, func() float32 { return float32(0.02 * r.NormFloat64()) })})
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := safetensors.Write(filepath.Join(dir, "adapter_model.safetensors"), ad, nil); err != nil {
			b.Fatal(err)
		}
		acfg, _ := json.Marshal(map[string]any{"peft_type": "LORA", "r": rank, "lora_alpha": 32,
			"target_modules": []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}})
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), acfg, 0o644); err != nil {
			b.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	return modelDir, dirs
}

// BenchmarkAdapterBatch1B4bit measures decode tokens/s of 8 rows decoding
// as one generate.Batch over the random 1B-shaped 4-bit Llama through
// AdapterModel, each row with a rank-16 adapter on all seven projections
// of every layer: "same" gives every row adapter a0 (one span of 8 rows
// per layer), "mixed" gives row i adapter a_i (8 spans of one row: the
// base matmuls shared, each row's low-rank terms its own), and "base"
// runs the rows with no adapter. The three batches step in turn, one
// token per row each iteration, so that they see the same machine load;
// mixed/same is the ratio the issue asks for (of wall time, and of CPU
// time per token: -cpu). Prefill and each row's first token are outside
// the timed part.
func BenchmarkAdapterBatch1B4bit(b *testing.B) {
	const rows = 8
	dir, ads := write1BAdapters(b, rows)
	lm, err := lora.Open(dir, &model.LoadOptions{Copy: true}, ads...)
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	am := NewAdapterModel(lm)
	ids := lm.Host().IDs()
	prompt := func(row int) []int32 {
		p := make([]int32, 32)
		for i := range p {
			p[i] = int32((i*7 + 3 + row*101) % llama1B.vocab)
		}
		return p
	}
	type run struct {
		name      string
		bt        *generate.Batch
		took, cpu time.Duration
		toks      int
	}
	mk := func(name string, set func(row int) []string) *run {
		bt, err := generate.NewBatch(am, generate.BatchOptions{MaxRows: rows, TokenBudget: 2048})
		if err != nil {
			b.Fatal(err)
		}
		for r := range rows {
			if _, err := bt.Add(context.Background(), prompt(r), &generate.Options{MaxTokens: -1, Adapters: set(r)}); err != nil {
				b.Fatal(err)
			}
		}
		for bt.Stats().GeneratedTokens < rows {
			if _, err := bt.Step(); err != nil {
				b.Fatal(err)
			}
		}
		return &run{name: name, bt: bt}
	}
	runs := []*run{
		mk("base", func(int) []string { return nil }),
		mk("same", func(int) []string { return ids[:1] }),
		mk("mixed", func(r int) []string { return ids[r : r+1] }),
	}
	for _, r := range runs {
		defer r.bt.Close()
	}
	b.ResetTimer()
	for b.Loop() {
		for _, r := range runs {
			before := r.bt.Stats().GeneratedTokens
			t0, c0 := time.Now(), processCPU()
			if _, err := r.bt.Step(); err != nil {
				b.Fatal(err)
			}
			r.took += time.Since(t0)
			r.cpu += processCPU() - c0
			r.toks += r.bt.Stats().GeneratedTokens - before
		}
	}
	tps := map[string]float64{}
	cps := map[string]float64{} // tokens per CPU second
	for _, r := range runs {
		tps[r.name] = float64(r.toks) / r.took.Seconds()
		cps[r.name] = float64(r.toks) / r.cpu.Seconds()
		b.ReportMetric(tps[r.name], r.name+"-tok/s")
	}
	b.ReportMetric(tps["mixed"]/tps["same"], "mixed/same")
	b.ReportMetric(tps["same"]/tps["base"], "same/base")
	b.ReportMetric(cps["mixed"]/cps["same"], "mixed/same-cpu")
	b.ReportMetric(cps["same"]/cps["base"], "same/base-cpu")
}

// BenchmarkAdapterDecode1B4bit measures one row's greedy decode through
// generate.Generate on the random 1B-shaped 4-bit Llama: the base model
// against one rank-16 adapter on all seven projections of every layer
// (unmerged), two streams of one loaded model pulled a token each in
// turn so that both see the same machine load. ratio is adapter tok/s ÷
// base tok/s; cpu-ratio base CPU time ÷ adapter CPU time per token
// (steadier on a shared machine). Prefill and the first token are
// outside the timed part.
func BenchmarkAdapterDecode1B4bit(b *testing.B) {
	dir, ads := write1BAdapters(b, 1)
	lm, err := lora.Open(dir, &model.LoadOptions{Copy: true}, ads...)
	if err != nil {
		b.Fatal(err)
	}
	defer lm.Close()
	am := NewAdapterModel(lm)
	prompt := make([]int32, 32)
	for i := range prompt {
		prompt[i] = int32((i*7 + 3) % llama1B.vocab)
	}
	type run struct {
		next      func() (generate.Token, error, bool)
		stop      func()
		took, cpu time.Duration
	}
	mk := func(m generate.Model) *run {
		s, err := generate.Generate(context.Background(), m, prompt, &generate.Options{MaxTokens: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		next, stop := iter.Pull2(s.Tokens())
		r := &run{next: next, stop: stop}
		if _, err, ok := next(); !ok || err != nil {
			b.Fatal("no first token", err)
		}
		return r
	}
	runs := []*run{mk(am.Variant(nil)), mk(am.Variant(lm.Host().IDs()[:1]))}
	for _, r := range runs {
		defer r.stop()
	}
	b.ResetTimer()
	for b.Loop() {
		for _, r := range runs {
			t0, c0 := time.Now(), processCPU()
			if _, err, ok := r.next(); !ok || err != nil {
				b.Fatal("stream ended", err)
			}
			r.took += time.Since(t0)
			r.cpu += processCPU() - c0
		}
	}
	n := float64(b.N)
	base, ad := n/runs[0].took.Seconds(), n/runs[1].took.Seconds()
	b.ReportMetric(base, "base-tok/s")
	b.ReportMetric(ad, "adapter-tok/s")
	b.ReportMetric(ad/base, "ratio")
	b.ReportMetric(float64(runs[0].cpu)/float64(runs[1].cpu), "cpu-ratio")
}

// processCPU is the CPU time the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
