package quant

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// outputError is tr(ΔW·H·ΔWᵀ)/rows: the mean squared output error of a
// quantized layer over the calibration inputs summed in g.
func outputError(w, deq []float32, out, in int, g *gram) float64 {
	total := 0.0
	d := make([]float64, in)
	for r := range out {
		for j := range in {
			d[j] = float64(w[r*in+j] - deq[r*in+j])
		}
		for i := range in {
			if d[i] == 0 {
				continue
			}
			s := 0.0
			for j := range in {
				s += g.Sum[i*in+j] * d[j]
			}
			total += d[i] * s
		}
	}
	return total / float64(g.Rows)
}

func TestGPTQBeatsRounding(t *testing.T) {
	const out, in, rows = 48, 320, 1024 // 3 blocks of 128 columns, the last short
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]float32, out*in)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	// anisotropic, correlated inputs: a few strong directions plus noise
	g := &gram{In: in, Sum: make([]float64, in*in)}
	basis := make([][]float64, 8)
	for k := range basis {
		basis[k] = make([]float64, in)
		for j := range basis[k] {
			basis[k][j] = rng.NormFloat64() * float64(8-k)
		}
	}
	x := make([]float64, in)
	for range rows {
		for j := range x {
			x[j] = 0.3 * rng.NormFloat64()
		}
		for k := range basis {
			c := rng.NormFloat64()
			for j := range x {
				x[j] += c * basis[k][j]
			}
		}
		for i := range in {
			for j := range in {
				g.Sum[i*in+j] += x[i] * x[j]
			}
		}
		g.Rows++
	}
	spec := tensor.QuantSpec{GroupSize: 64, Bits: 4}
	plan, err := newGPTQPlan(g, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	// U must satisfy UᵀU = (H/rows + damp)⁻¹: check (UᵀU)·H' ≈ I on a few entries.
	codes, s, b := gptqQuantize(w, out, in, plan, spec, tensor.Float32, GPTQOptions{})
	deq := make([]float32, out*in)
	for r := range out {
		for j := range in {
			k := r*(in/64) + j/64
			deq[r*in+j] = s[k]*float32(codes[r*in+j]) + b[k]
		}
	}
	wa := tensor.FromFloat32(w, []int{out, in}, tensor.Float32)
	wq, qs, qb := tensor.Quantize(wa, 64, 4)
	rtn := tensor.Dequantize(wq, qs, qb, 64, 4, tensor.Float32).Float32s()
	tensor.Free(wa, wq, qs, qb)
	eG, eR := outputError(w, deq, out, in, g), outputError(w, rtn, out, in, g)
	t.Logf("output MSE: gptq %.4g, rtn %.4g (ratio %.3f)", eG, eR, eG/eR)
	if !(eG < 0.7*eR) || math.IsNaN(eG) {
		t.Errorf("gptq output error %.4g not well below rounding's %.4g", eG, eR)
	}
	// one block (every update immediate, float64) against blocks of 64
	// (later columns updated lazily by a float32 matrix product): the same
	// algorithm, so the same error up to float32 rounding
	for _, bs := range []int{in, 64} {
		codes, s, b := gptqQuantize(w, out, in, plan, spec, tensor.Float32, GPTQOptions{BlockSize: bs})
		for r := range out {
			for j := range in {
				k := r*(in/64) + j/64
				deq[r*in+j] = s[k]*float32(codes[r*in+j]) + b[k]
			}
		}
		e := outputError(w, deq, out, in, g)
		t.Logf("block %d: output MSE %.4g", bs, e)
		if math.Abs(e-eG) > 0.02*eG {
			t.Errorf("block size %d: output error %.4g, %.4g with blocks of 128", bs, e, eG)
		}
	}
}

// TestGPTQPlanInverse checks the factor GPTQ walks along: UᵀU must be the
// inverse of the damped mean Gram matrix.
func TestGPTQPlanInverse(t *testing.T) {
	const n = 300 // above cholLeaf: the recursive path
	rng := rand.New(rand.NewPCG(3, 4))
	g := &gram{In: n, Sum: make([]float64, n*n)}
	x := make([]float64, n)
	for range 2 * n {
		for j := range x {
			x[j] = rng.NormFloat64() * float64(1+j%3)
		}
		for i := range n {
			for j := range n {
				g.Sum[i*n+j] += x[i] * x[j]
			}
		}
		g.Rows++
	}
	const damp = 0.05
	p, err := newGPTQPlan(g, damp)
	if err != nil {
		t.Fatal(err)
	}
	h := make([]float64, n*n)
	mean := 0.0
	for i := range n {
		mean += g.Sum[i*n+i] / float64(g.Rows)
	}
	mean /= n
	for i := range n {
		for j := range n {
			h[i*n+j] = g.Sum[i*n+j] / float64(g.Rows)
		}
		h[i*n+i] += damp * mean
	}
	uu := make([]float64, n*n) // UᵀU
	for i := range n {
		for j := range n {
			if j < i && p.u[i*n+j] != 0 {
				t.Fatalf("U[%d][%d] = %g below the diagonal", i, j, p.u[i*n+j])
			}
		}
		for r := range n {
			if a := p.u[r*n+i]; a != 0 {
				for k := range n {
					uu[i*n+k] += a * p.u[r*n+k]
				}
			}
		}
	}
	worst := 0.0
	for i := range n {
		for j := range n {
			s := 0.0
			for k := range n {
				s += uu[i*n+k] * h[k*n+j]
			}
			if i == j {
				s--
			}
			worst = math.Max(worst, math.Abs(s))
		}
	}
	// float32 factorisation, as GPTQ implementations do
	if worst > 1e-4 {
		t.Errorf("UᵀU·H differs from I by %.3g", worst)
	}
	t.Logf("UᵀU·H − I: max %.2g", worst)
	// a Gram matrix with a zero row (an input never exercised) is not an error
	g.Sum[5*n+5] = 0
	for j := range n {
		g.Sum[5*n+j], g.Sum[j*n+5] = 0, 0
	}
	if p, err := newGPTQPlan(g, damp); err != nil || !p.dead[5] {
		t.Errorf("dead input: %v, dead %v", err, p != nil && p.dead[5])
	}
}

// TestGPTQFixtures converts every architecture's fixture with GPTQ
// (sequential calibration through dense, KV-sharing, per-layer-input and
// MoE blocks): the checkpoint loads with every tensor used, its quantized
// kernels compute what the float model of its dequantized weights does,
// and the codes differ from plain rounding (the calibrated path ran). The
// distance of both methods to the float logits is logged: these random
// fixtures are chaotic under any rounding (see TestGemma4Quantized).
func TestGPTQFixtures(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, fx := range []string{"llama3", "qwen3", "qwen3_moe", "gemma4_dense", "gemma4_kv", "gemma4_ple", "gemma4_moe"} {
		t.Run(fx, func(t *testing.T) {
			src := fixture(fx, "f32")
			prompt := fixturePrompt(t, fx)
			fm, err := model.Load(src, nil)
			if err != nil {
				t.Fatal(err)
			}
			ref := logitsOf(t, fm, prompt, 0)
			calib, err := SampleSequences(fm, prompt[:1], 4, 40, 7)
			fm.Close()
			if err != nil {
				t.Fatal(err)
			}
			opts := ConvertOptions{Quantize: true, Spec: tensor.QuantSpec{Bits: 4, GroupSize: 64}, Method: MethodGPTQ, Calibration: calib}
			qdir, ddir := convertWith(t, src, opts)
			rdir := t.TempDir()
			if err := Convert(src, rdir, ConvertOptions{Quantize: true}); err != nil {
				t.Fatal(err)
			}
			q := load(t, qdir)
			got := logitsOf(t, q, prompt, 5)
			unused := q.Unused()
			q.Close()
			if len(unused) > 0 {
				t.Errorf("tensors never loaded: %v", unused)
			}
			d := load(t, ddir)
			deq := logitsOf(t, d, prompt, 0)
			d.Close()
			r := load(t, rdir)
			rtn := logitsOf(t, r, prompt, 0)
			r.Close()
			same := minCosine(toF64(deq), got)
			t.Logf("min cosine to float32: gptq %.4f, rtn %.4f; quantized vs its dequantized weights %.6f",
				minCosine(toF64(ref), got), minCosine(toF64(ref), rtn), same)
			if same < 0.9999 {
				t.Errorf("quantized kernels differ from the dequantized model (cosine %.6f)", same)
			}
			differs := 0
			gs, err := safetensors.OpenDir(qdir)
			if err != nil {
				t.Fatal(err)
			}
			defer gs.Close()
			rs, err := safetensors.OpenDir(rdir)
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			banks := 0
			for _, name := range gs.Names() {
				bank := strings.Contains(name, "switch_")
				if bank && strings.HasSuffix(name, ".weight") {
					banks++
				}
				if !strings.HasSuffix(name, "self_attn.q_proj.weight") && !(bank && strings.HasSuffix(name, "gate_proj.weight")) {
					continue
				}
				a, _ := gs.Array(name, nil, true)
				b, _ := rs.Array(name, nil, true)
				if !bytes.Equal(a.Bytes(), b.Bytes()) {
					differs++
				}
				tensor.Free(a, b)
			}
			if want := cfgLayers(t, src) + banks/3; differs != want {
				t.Errorf("GPTQ changed %d of the %d q_proj and expert gate_proj weights plain rounding writes", differs, want)
			}
		})
	}
}

// TestGPTQErrors: misuse of the method is an error, never a panic.
func TestGPTQErrors(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	src := fixture("llama3", "f32")
	for name, opts := range map[string]ConvertOptions{
		"no calibration":  {Quantize: true, Method: MethodGPTQ},
		"not quantizing":  {Method: MethodGPTQ, Calibration: [][]int32{{1, 2, 3}}},
		"unknown method":  {Quantize: true, Method: "awq"},
		"empty sequence":  {Quantize: true, Method: MethodGPTQ, Calibration: [][]int32{{1, 2}, {}}},
		"id out of range": {Quantize: true, Method: MethodGPTQ, Calibration: [][]int32{{1, 2, 1 << 20}}},
	} {
		if err := Convert(src, t.TempDir(), opts); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// BenchmarkGPTQ times GPTQ on one 2048×2048 layer (a 1B model's attention
// projection) — the plan (factoring the Gram matrix) and the quantization —
// against plain rounding of the same weight in the same run.
func BenchmarkGPTQ(b *testing.B) {
	const n = 2048
	rng := rand.New(rand.NewPCG(1, 2))
	g := &gram{In: n, Sum: make([]float64, n*n), Rows: 4 * n}
	x := make([]float64, n)
	for range 64 {
		for j := range x {
			x[j] = rng.NormFloat64()
		}
		for i := range n {
			for j := range n {
				g.Sum[i*n+j] += x[i] * x[j]
			}
		}
	}
	for i := range n {
		g.Sum[i*n+i] += float64(g.Rows)
	}
	w := make([]float32, n*n)
	for i := range w {
		w[i] = float32(rng.NormFloat64())
	}
	spec := tensor.QuantSpec{GroupSize: 64, Bits: 4}
	b.Run("plan", func(b *testing.B) {
		for b.Loop() {
			if _, err := newGPTQPlan(g, 0.01); err != nil {
				b.Fatal(err)
			}
		}
	})
	p, err := newGPTQPlan(g, 0.01)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("quantize", func(b *testing.B) {
		for b.Loop() {
			gptqQuantize(w, n, n, p, spec, tensor.BFloat16, GPTQOptions{})
		}
	})
	b.Run("rtn", func(b *testing.B) {
		wa := tensor.FromFloat32(w, []int{n, n}, tensor.BFloat16)
		defer wa.Free()
		for b.Loop() {
			q, s, z := tensor.Quantize(wa, 64, 4)
			tensor.Free(q, s, z)
		}
	})
}

// cfgLayers reads num_hidden_layers from a checkpoint's config.json.
func cfgLayers(t *testing.T, dir string) int {
	t.Helper()
	cfg, err := model.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Layers int `json:"num_hidden_layers"`
	}
	if err := json.Unmarshal(cfg.Raw, &c); err != nil || c.Layers == 0 {
		var nested struct {
			Text struct {
				Layers int `json:"num_hidden_layers"`
			} `json:"text_config"`
		}
		if json.Unmarshal(cfg.Raw, &nested) != nil || nested.Text.Layers == 0 {
			t.Fatalf("no num_hidden_layers in %s", dir)
		}
		return nested.Text.Layers
	}
	return c.Layers
}

// TestDequantize expands a converted checkpoint with a per-module
// override (lm_head at 8 bits, group 32, the rest 4-bit group 64): every
// weight comes back as float32 within a rounding step of the original, config.json loses its quantization section, and misuse is an
// error.
func TestDequantize(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	src := fixture("llama3", "f32")
	q, d := t.TempDir(), t.TempDir()
	if err := Convert(src, q, ConvertOptions{Quantize: true, Overrides: []Override{{Match: "lm_head", Spec: &tensor.QuantSpec{GroupSize: 32, Bits: 8}}}}); err != nil {
		t.Fatal(err)
	}
	if err := Dequantize(q, d, tensor.Float32); err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ReadConfig(d)
	if err != nil || cfg.Quant != nil || bytes.Contains(cfg.Raw, []byte("quantization")) {
		t.Fatalf("dequantized config: quant %v, err %v", cfg.Quant, err)
	}
	orig, err := safetensors.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	got, err := safetensors.OpenDir(d)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if !slices.Equal(orig.Names(), got.Names()) {
		t.Fatalf("tensors %v, want %v", got.Names(), orig.Names())
	}
	for _, name := range orig.Names() {
		a, _ := orig.Array(name, nil, true)
		b, _ := got.Array(name, nil, true)
		av, bv := a.Float32s(), b.Float32s()
		if b.DType() != tensor.Float32 || len(av) != len(bv) {
			t.Fatalf("%s: %s × %d", name, b.DType(), len(bv))
		}
		lo, hi, worst := math.Inf(1), math.Inf(-1), 0.0
		for i := range av {
			lo, hi = math.Min(lo, float64(av[i])), math.Max(hi, float64(av[i]))
			worst = math.Max(worst, math.Abs(float64(av[i]-bv[i])))
		}
		// one step of the coarsest grid a group can have (the whole
		// tensor's range; MLX's grid pins the larger edge, so the error
		// can pass half a step): 4 bits for most, 8 for the head, 0 for norms
		step := (hi - lo) / 15
		if strings.HasSuffix(name, "lm_head.weight") {
			step = (hi - lo) / 255
		}
		if strings.Contains(name, "norm") {
			step = 0
		}
		if worst > step+1e-6 {
			t.Errorf("%s: off by %.3g, more than a step (%.3g)", name, worst, step)
		}
		tensor.Free(a, b)
	}
	for name, dir := range map[string]string{"not quantized": src, "missing": filepath.Join(t.TempDir(), "none")} {
		if err := Dequantize(dir, t.TempDir(), tensor.Float32); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := Dequantize(q, t.TempDir(), tensor.Int32); err == nil {
		t.Error("dequantize to int32: no error")
	}
}
