//go:build unix

package model_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

var (
	bench1BOnce sync.Once
	bench1BDir  string
)

// writeLlama1B4bit writes a random 1B-shaped 4-bit Llama (hidden 2048, 16
// layers, GQA 32/8, FFN 8192, vocab 32000; groups of 64, bfloat16 scales,
// embedding and head quantized as in an MLX checkpoint) into dir.
func writeLlama1B4bit(t testing.TB, dir string) {
	t.Helper()
	const hidden, layers, heads, kvHeads, ffn, vocab, headDim = 2048, 16, 32, 8, 8192, 32000, 64
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
		ts = append(ts, safetensors.Tensor{Name: name, DType: tensor.BFloat16, Shape: []int{hidden}, Data: bf16(hidden, func() float32 { return 1 })})
	}
	lin("model.embed_tokens", vocab, hidden)
	norm("model.norm.weight")
	lin("lm_head", vocab, hidden)
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		norm(p + "input_layernorm.weight")
		norm(p + "post_attention_layernorm.weight")
		lin(p+"self_attn.q_proj", heads*headDim, hidden)
		lin(p+"self_attn.k_proj", kvHeads*headDim, hidden)
		lin(p+"self_attn.v_proj", kvHeads*headDim, hidden)
		lin(p+"self_attn.o_proj", hidden, heads*headDim)
		lin(p+"mlp.gate_proj", ffn, hidden)
		lin(p+"mlp.up_proj", ffn, hidden)
		lin(p+"mlp.down_proj", hidden, ffn)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": ffn,
		"num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": headDim, "vocab_size": vocab,
		"rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": false, "eos_token_id": 2,
		"max_position_embeddings": 8192, "quantization": map[string]any{"group_size": 64, "bits": 4}}
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// bench1B writes the 1B checkpoint once per process ($MLXGO_BENCH_1B_DIR
// when set, kept between runs; else a temporary folder).
func bench1B(b *testing.B) string {
	bench1BOnce.Do(func() {
		dir := os.Getenv("MLXGO_BENCH_1B_DIR")
		if dir == "" {
			d, err := os.MkdirTemp("", "mlxgo-bench-1b")
			if err != nil {
				b.Fatal(err)
			}
			dir = d
		}
		if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			writeLlama1B4bit(b, dir)
		}
		bench1BDir = dir
	})
	return bench1BDir
}

// BenchmarkFitPrediction holds `mlxgo fit`'s predicted decode tokens/s
// (PlanOptions.Predict: the checkpoint's kernels probed on this machine)
// against decode measured in the same run, on a random 1B-shaped 4-bit
// Llama, the random Qwen3-30B-A3B-shaped 4-bit MoE of
// BenchmarkExpertStreamingDecode (experts resident) and the demo model
// (bf16 and 4-bit). Each op is one decoded token (forward, logits,
// argmax, read-back) after a 32-token prompt and 16 warm-up steps;
// tok/s is the median token's (mean_tok/s the mean), ratio predicted ÷
// measured (median).
//
// MLXGO_BENCH_BACKEND=mlx probes and decodes on MLX instead (skipped
// without libmlxc).
func BenchmarkFitPrediction(b *testing.B) {
	be := tensor.Default()
	if os.Getenv("MLXGO_BENCH_BACKEND") == "mlx" {
		be = mlxtest.UseAsDefault(b)
	}
	b.Logf("cpu: %s, GOMAXPROCS %d, backend %s", cpuModel(), runtime.GOMAXPROCS(0), be.Name())
	models := []struct {
		name string
		dir  func(b *testing.B) string
	}{
		{"llama1B-q4", bench1B},
		{"qwen3moe-q4", benchMoE},
		{"demo-bf16", func(b *testing.B) string { return demoDir(b, demo.BF16) }},
		{"demo-q4", func(b *testing.B) string { return demoDir(b, demo.Q4) }},
	}
	for _, mc := range models {
		b.Run(mc.name, func(b *testing.B) {
			dir := mc.dir(b)
			const prompt, warm = 32, 16
			t0 := time.Now()
			plan, err := model.PlanMemory(dir, model.PlanOptions{Context: prompt + warm + b.N, Memory: 1 << 40, Predict: true, Backend: be})
			if err != nil {
				b.Fatal(err)
			}
			probe := time.Since(t0)
			m, err := model.Load(dir, &model.LoadOptions{Backend: be})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			caches := m.MakeCaches()
			defer model.FreeCaches(caches)
			vocab := m.Info().Vocab
			step := func(ids []int32) int32 {
				sc := tensor.NewScope()
				defer sc.Close()
				h, err := m.Forward(ids2D(ids), caches, nil)
				if err != nil {
					b.Fatal(err)
				}
				l, err := m.Logits(tensor.SliceAxis(h, 1, len(ids)-1, len(ids)))
				if err != nil {
					b.Fatal(err)
				}
				am := tensor.AsType(tensor.Argmax(l, -1, false), tensor.Int32)
				return int32(binary.LittleEndian.Uint32(am.Bytes()))
			}
			ids := make([]int32, prompt)
			for i := range ids {
				ids[i] = int32(3 + (131*i)%(vocab-3))
			}
			tok := step(ids)
			// random weights loop on a token; vary the input so routes vary
			next := func(t int32) []int32 { return []int32{(t*7919 + 13) % int32(vocab)} }
			for range warm {
				tok = step(next(tok))
			}
			per := make([]float64, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				tok = step(next(tok))
				per = append(per, time.Since(t0).Seconds())
			}
			mean := b.Elapsed().Seconds() / float64(b.N)
			b.StopTimer()
			// the median token, as the probe takes the median call (a
			// shared machine's preemptions count in neither); the mean too
			sort.Float64s(per)
			el := per[len(per)/2]
			b.ReportMetric(1/el, "tok/s")
			b.ReportMetric(1/mean, "mean_tok/s")
			b.ReportMetric(plan.PredictedDecodeTPS, "pred_tok/s")
			b.ReportMetric(plan.PredictedDecodeTPS*el, "ratio")
			b.ReportMetric(float64(plan.DecodeBytesPerToken)/1e6, "read_MB/tok")
			parts := make([]string, 0, len(plan.DecodeSeconds))
			for k, v := range plan.DecodeSeconds {
				parts = append(parts, fmt.Sprintf("%s %.2f ms", k, v*1e3))
			}
			sort.Strings(parts)
			la, _ := os.ReadFile("/proc/loadavg")
			b.Logf("%s (load %s): measured %.2f ms/token (median; mean %.2f), predicted %.2f (%s); plan with probe %v", mc.name, strings.Join(strings.Fields(string(la))[:3], " "), el*1e3, mean*1e3, 1e3/plan.PredictedDecodeTPS, strings.Join(parts, ", "), probe.Round(time.Millisecond))
		})
	}
}

// demoDir materialises a form of the demo model (into the test's cache
// folder when MLXGO_CACHE_DIR is unset).
func demoDir(b *testing.B, form string) string {
	dir, err := demo.Dir(form)
	if err != nil {
		b.Skipf("demo model: %v", err)
	}
	return dir
}

// cpuModel is the CPU's model name from /proc/cpuinfo.
func cpuModel() string {
	raw, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
