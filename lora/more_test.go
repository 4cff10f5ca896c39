package lora_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

var perExpert = regexp.MustCompile(`^(.*)\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$`)

// mlxLayout writes the HF fixture src in MLX's layout to a new folder:
// per-expert weights stacked into switch_mlp banks and, when quantize,
// every projection and bank affine-quantized (4 bits, groups of 32); with
// dequantized, the quantized weights expanded back to float32 instead
// (the float model the quantized one computes). It returns the folder.
func mlxLayout(t *testing.T, src string, quantize, dequantized bool) string {
	t.Helper()
	dst := t.TempDir()
	set, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	out := map[string]*tensor.Array{}
	defer func() {
		for _, a := range out {
			a.Free()
		}
	}()
	stacks := map[string]map[int]*tensor.Array{}
	for _, n := range set.Names() {
		a, err := set.Array(n, nil, true)
		if err != nil {
			t.Fatal(err)
		}
		if m := perExpert.FindStringSubmatch(n); m != nil {
			key := m[1] + ".switch_mlp." + m[3] + ".weight"
			if stacks[key] == nil {
				stacks[key] = map[int]*tensor.Array{}
			}
			var e int
			fmt.Sscan(m[2], &e)
			stacks[key][e] = a
			continue
		}
		out[n] = a
	}
	for key, parts := range stacks {
		l := make([]*tensor.Array, len(parts))
		for e, a := range parts {
			l[e] = a
		}
		out[key] = tensor.Stack(l, 0)
		tensor.Free(l...)
	}
	if quantize {
		for n, a := range out {
			if !strings.HasSuffix(n, "_proj.weight") {
				continue
			}
			mod := strings.TrimSuffix(n, ".weight")
			wq, s, b := tensor.Quantize(a, 32, 4)
			a.Free()
			if dequantized {
				out[n] = tensor.Dequantize(wq, s, b, 32, 4, tensor.Float32)
				tensor.Free(wq, s, b)
			} else {
				out[n], out[mod+".scales"], out[mod+".biases"] = wq, s, b
			}
		}
	}
	if err := safetensors.WriteArrays(filepath.Join(dst, "model.safetensors"), out, map[string]string{"format": "mlx"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if quantize && !dequantized {
		cfg["quantization"] = map[string]any{"group_size": 32, "bits": 4, "mode": "affine"}
	}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dst, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// moeAdapters writes one random adapter for the Qwen3-MoE fixture twice,
// in mlx-lm's format (switch banks: lora_a [E·r, in], lora_b [E, out, r])
// and in PEFT's per-expert one: q_proj of every layer and the three banks
// of the sparse layers 0 and 2, rank 4, scale 1.5.
func moeAdapters(t *testing.T) (mlx, peft string) {
	t.Helper()
	return moeAdaptersSeeded(t, 3)
}

// moeAdaptersSeeded is moeAdapters with its random values drawn from
// seed.
func moeAdaptersSeeded(t *testing.T, seed uint64) (mlx, peft string) {
	t.Helper()
	const E, r, D, I = 8, 4, 64, 32
	rng := rand.New(rand.NewPCG(seed, 4))
	randn := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * 0.3)
		}
		return v
	}
	mx := map[string]*tensor.Array{}
	pf := map[string]*tensor.Array{}
	defer func() {
		for _, a := range mx {
			a.Free()
		}
		for _, a := range pf {
			a.Free()
		}
	}()
	for l := range 3 {
		q := fmt.Sprintf("model.layers.%d.self_attn.q_proj", l)
		a, b := randn(D*r), randn(r*D) // a [in, r], b [r, out]
		mx[q+".lora_a"] = tensor.FromFloat32(a, []int{D, r}, tensor.Float32)
		mx[q+".lora_b"] = tensor.FromFloat32(b, []int{r, D}, tensor.Float32)
		pf["base_model.model."+q+".lora_A.weight"] = tensor.Contiguous(tensor.Transpose(mx[q+".lora_a"]))
		pf["base_model.model."+q+".lora_B.weight"] = tensor.Contiguous(tensor.Transpose(mx[q+".lora_b"]))
		if l == 1 {
			continue // a dense MLP layer (mlp_only_layers)
		}
		for _, p := range []struct {
			name    string
			in, out int
		}{{"gate_proj", D, I}, {"up_proj", D, I}, {"down_proj", I, D}} {
			bank := fmt.Sprintf("model.layers.%d.mlp.switch_mlp.%s", l, p.name)
			la := tensor.FromFloat32(randn(E*r*p.in), []int{E * r, p.in}, tensor.Float32)
			lb := tensor.FromFloat32(randn(E*p.out*r), []int{E, p.out, r}, tensor.Float32)
			mx[bank+".lora_a"], mx[bank+".lora_b"] = la, lb
			for e := range E {
				ex := fmt.Sprintf("base_model.model.model.layers.%d.mlp.experts.%d.%s", l, e, p.name)
				pf[ex+".lora_A.weight"] = tensor.Contiguous(tensor.SliceAxis(la, 0, e*r, (e+1)*r))              // [r, in]
				pf[ex+".lora_B.weight"] = tensor.Contiguous(tensor.Squeeze(tensor.SliceAxis(lb, 0, e, e+1), 0)) // [out, r]
			}
		}
	}
	mlx, peft = t.TempDir(), t.TempDir()
	if err := safetensors.WriteArrays(filepath.Join(mlx, "adapters.safetensors"), mx, nil); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteArrays(filepath.Join(peft, "adapter_model.safetensors"), pf, nil); err != nil {
		t.Fatal(err)
	}
	write := func(dir string, cfg map[string]any) {
		raw, _ := json.Marshal(cfg)
		if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(mlx, map[string]any{"fine_tune_type": "lora", "num_layers": 3, "lora_parameters": map[string]any{"rank": r, "scale": 1.5}})
	write(peft, map[string]any{"peft_type": "LORA", "r": r, "lora_alpha": 6, "target_modules": []string{"q_proj", "gate_proj", "up_proj", "down_proj"}})
	return mlx, peft
}

func open(t *testing.T, dir string, adapters ...string) *lora.Model {
	t.Helper()
	m, err := lora.Open(dir, &model.LoadOptions{DType: tensor.Float32}, adapters...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func toF64(l [][]float32) [][]float64 {
	out := make([][]float64, len(l))
	for i, r := range l {
		out[i] = make([]float64, len(r))
		for j, v := range r {
			out[i][j] = float64(v)
		}
	}
	return out
}

// differ fails unless got and want differ by more than 1e-2 of the
// largest logit somewhere (an adapter that changed nothing).
func differ(t *testing.T, what string, got, want [][]float32) {
	t.Helper()
	maxAbs, maxDiff := 0.0, 0.0
	for p := range want {
		for i := range want[p] {
			maxAbs = math.Max(maxAbs, math.Abs(float64(want[p][i])))
			maxDiff = math.Max(maxDiff, math.Abs(float64(got[p][i]-want[p][i])))
		}
	}
	if maxDiff <= 1e-2*maxAbs {
		t.Errorf("%s: the adapter changed the logits by at most %.3g (max |logit| %.3g)", what, maxDiff, maxAbs)
	}
}

// TestQuantizedBase: an adapter on a 4-bit model (QuantizedMatmul, and
// GatherQMM for the expert banks) adds what it adds to the float model
// those weights dequantize to; on experts, the mlx-lm bank format and
// PEFT's per-expert one give the same logits bit for bit.
func TestQuantizedBase(t *testing.T) {
	prompt := readGolden(t, "llama3").Prompt
	t.Run("llama3", func(t *testing.T) {
		q := mlxLayout(t, fixture("llama3"), true, false)
		d := mlxLayout(t, fixture("llama3"), true, true)
		a := adapterDir("llama3", "a_peft")
		mq, md := open(t, q, a), open(t, d, a)
		got, want := promptLogits(t, mq, prompt), promptLogits(t, md, prompt)
		compareLogits(t, "4-bit base + adapter vs its float weights + adapter", got, toF64(want))
		differ(t, "4-bit base", got, promptLogits(t, mq.With(lora.Selection{}), prompt))
	})
	t.Run("qwen3_moe", func(t *testing.T) {
		mxa, pfa := moeAdapters(t)
		q := mlxLayout(t, fixture("qwen3_moe"), true, false)
		d := mlxLayout(t, fixture("qwen3_moe"), true, true)
		mq, md := open(t, q, mxa), open(t, d, mxa, pfa)
		got, want := promptLogits(t, mq, prompt), promptLogits(t, md.With(lora.Selection{Set: []string{filepath.Base(mxa)}}), prompt)
		compareLogits(t, "4-bit experts (gathered) + adapter vs float experts (grouped) + adapter", got, toF64(want))
		differ(t, "4-bit MoE", got, promptLogits(t, mq.With(lora.Selection{}), prompt))
		identical(t, "PEFT per-expert vs mlx-lm bank format", promptLogits(t, md.With(lora.Selection{Set: []string{filepath.Base(pfa)}}), prompt), want)
		// the HF per-expert checkpoint itself, through the stacked banks
		hf := open(t, fixture("qwen3_moe"), pfa)
		compareLogits(t, "HF per-expert checkpoint + adapter", promptLogits(t, hf, prompt), toF64(promptLogits(t, open(t, mlxLayout(t, fixture("qwen3_moe"), false, false), mxa), prompt)))
	})
}

// TestFuse: a fused checkpoint computes what the unmerged adapters do.
func TestFuse(t *testing.T) {
	g := readGolden(t, "llama3")
	t.Run("float", func(t *testing.T) {
		for _, v := range []string{"llama3", "gemma4_dense"} {
			out := filepath.Join(t.TempDir(), "fused")
			ads := []string{adapterDir(v, "a_peft"), adapterDir(v, "b_peft")}
			if err := lora.Fuse(fixture(v), out, ads, lora.FuseOptions{}); err != nil {
				if v == "gemma4_dense" && strings.Contains(err.Error(), "tied") {
					continue
				}
				t.Fatal(err)
			}
			fused := open(t, out)
			compareLogits(t, v+": fused a+b vs PEFT a+b", promptLogits(t, fused, readGolden(t, v).Prompt), readGolden(t, v).LogitsAB)
			greedy(t, v+": fused a+b", fused, readGolden(t, v).Prompt, readGolden(t, v).GreedyAB)
		}
	})
	t.Run("quantized", func(t *testing.T) {
		q := mlxLayout(t, fixture("llama3"), true, false)
		a := adapterDir("llama3", "a_peft")
		unmerged := promptLogits(t, open(t, q, a), g.Prompt)
		deq := filepath.Join(t.TempDir(), "deq")
		if err := lora.Fuse(q, deq, []string{a}, lora.FuseOptions{Dequantize: true}); err != nil {
			t.Fatal(err)
		}
		md := open(t, deq)
		if md.Base().(*model.Loaded).Arch() == nil {
			t.Fatal("no architecture")
		}
		compareLogits(t, "fused --de-quantize vs unmerged 4-bit", promptLogits(t, md, g.Prompt), toF64(unmerged))
		req := filepath.Join(t.TempDir(), "req")
		if err := lora.Fuse(q, req, []string{a}, lora.FuseOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg, err := model.ReadConfig(req)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Quant == nil || cfg.Quant.Bits != 4 || cfg.Quant.GroupSize != 32 {
			t.Fatalf("requantized fuse: quantization %+v, want 4 bits, groups of 32", cfg.Quant)
		}
		// requantizing rounds the merged weights again, with the base's
		// bits and group size: the adapted modules hold exactly the
		// quantization of the dequantized fuse's weights
		sd, err := safetensors.OpenDir(deq)
		if err != nil {
			t.Fatal(err)
		}
		defer sd.Close()
		sr, err := safetensors.OpenDir(req)
		if err != nil {
			t.Fatal(err)
		}
		defer sr.Close()
		for _, n := range []string{"model.layers.0.self_attn.q_proj", "model.layers.2.mlp.down_proj"} {
			w, err := sd.Array(n+".weight", nil, true)
			if err != nil {
				t.Fatal(err)
			}
			wq, s, b := tensor.Quantize(w, 32, 4)
			for i, want := range []*tensor.Array{wq, s, b} {
				part := []string{".weight", ".scales", ".biases"}[i]
				raw, err := sr.Bytes(n + part)
				if err != nil {
					t.Fatal(err)
				}
				if string(raw) != string(want.Bytes()) {
					t.Errorf("%s%s: not the quantization of the merged weight", n, part)
				}
			}
			tensor.Free(w, wq, s, b)
		}
	})
	t.Run("refused", func(t *testing.T) {
		mxa, _ := moeAdapters(t)
		err := lora.Fuse(fixture("qwen3_moe"), t.TempDir(), []string{mxa}, lora.FuseOptions{})
		if err == nil || !strings.Contains(err.Error(), "convert") {
			t.Errorf("fusing into per-expert HF banks: error %v, want a refusal saying to convert", err)
		}
	})
}

// TestSpans: rows of one pass with different adapter sets compute, bit
// for bit on the CPU backend, what each computes in a pass of its own —
// on dense layers, on quantized expert banks (gathered per row) and on
// floating-point ones (rows grouped by expert, each told its token).
func TestSpans(t *testing.T) {
	for _, v := range []string{"llama3", "qwen3_moe", "qwen3_moe_float"} {
		t.Run(v, func(t *testing.T) {
			dir := fixture(strings.TrimSuffix(v, "_float"))
			ads := []string{adapterDir("llama3", "a_peft"), adapterDir("llama3", "b_peft")}
			if v != "llama3" {
				dir = mlxLayout(t, dir, v == "qwen3_moe", false) // quantized banks gather per row, float ones group rows by expert
				mxa, _ := moeAdaptersSeeded(t, 3)
				mxb, _ := moeAdaptersSeeded(t, 5)
				ads = []string{mxa, mxb}
			}
			m := open(t, dir, ads...)
			ids := m.Host().IDs()
			sets := [][]string{{ids[0]}, nil, {ids[0], ids[1]}, {ids[1]}}
			prompt := readGolden(t, "llama3").Prompt[:12]
			const T = 6
			rows := [][]int32{prompt[:T], prompt[T:], prompt[3 : 3+T], prompt[1 : 1+T]}
			var flat []int32
			var spans []lora.Span
			for i, r := range rows {
				flat = append(flat, r...)
				spans = append(spans, lora.Span{Rows: T, Set: sets[i]})
			}
			sc := tensor.NewScope()
			defer sc.Close()
			caches := m.MakeCaches()
			defer model.FreeCaches(caches)
			ids4 := tensor.Reshape(ids2D(flat), len(rows), T)
			h, err := m.ForwardWith(lora.Selection{Spans: spans}, ids4, caches, nil)
			if err != nil {
				t.Fatal(err)
			}
			l, err := m.LogitsWith(lora.Selection{Spans: spans}, h)
			if err != nil {
				t.Fatal(err)
			}
			all := f32s(t, l)
			V := m.Info().Vocab
			for i, r := range rows {
				solo := promptLogits(t, m.With(lora.Selection{Set: sets[i]}), r)
				for p := range T {
					for j := range V {
						if got := all[(i*T+p)*V+j]; math.Float32bits(got) != math.Float32bits(solo[p][j]) {
							t.Fatalf("row %d (adapters %v) position %d logit %d: %v in the batch, %v alone", i, sets[i], p, j, got, solo[p][j])
						}
					}
				}
			}
		})
	}
}
