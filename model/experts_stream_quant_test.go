package model_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/modeltest"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// moeShape sizes a random Qwen3-MoE checkpoint.
type moeShape struct {
	Hidden, Layers, Experts, TopK, MoEInter, Heads, KVHeads, HeadDim, Vocab int
	// Bits, when not 0, stores the expert banks stacked and quantized
	// (mlx-lm's switch_mlp layout) with group size Group; 0 stores them per
	// expert in float32 (HF's layout).
	Bits, Group int
	// DType stores the float tensors (Invalid: float32).
	DType tensor.DType
	// Packed (with Bits) writes the expert banks as random codes with
	// random scales and biases instead of quantizing random floats: as
	// good for speed and exactness tests, and fast enough for checkpoints
	// of gigabytes.
	Packed bool
}

// writeRandomMoE writes a seeded random Qwen3-MoE checkpoint of shape s
// into dir, one layer at a time (so that large ones do not sit in memory
// whole).
func writeRandomMoE(t testing.TB, dir string, s moeShape) {
	t.Helper()
	r := rand.New(rand.NewSource(11))
	dt := s.DType
	if !dt.Valid() {
		dt = tensor.Float32
	}
	randArr := func(std float64, shape ...int) *tensor.Array {
		n := 1
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			if len(shape) == 1 {
				v[i] = 1 + float32(0.05*r.NormFloat64())
			} else {
				v[i] = float32(std * r.NormFloat64())
			}
		}
		return tensor.FromFloat32(v, shape, dt)
	}
	d, qd, kvd := s.Hidden, s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	std := 1 / math.Sqrt(float64(d))
	index := map[string]string{}
	write := func(file string, arrs map[string]*tensor.Array) {
		if err := safetensors.WriteArrays(filepath.Join(dir, file), arrs, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		for n, a := range arrs {
			index[n] = file
			a.Free()
		}
	}
	head := map[string]*tensor.Array{
		"model.embed_tokens.weight": randArr(1, s.Vocab, d),
		"model.norm.weight":         randArr(0, d),
		"lm_head.weight":            randArr(std, s.Vocab, d),
	}
	if s.Bits != 0 {
		w := head["lm_head.weight"]
		head["lm_head.weight"], head["lm_head.scales"], head["lm_head.biases"] = tensor.Quantize(w, s.Group, s.Bits)
		w.Free()
	}
	write("model-embed.safetensors", head)
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		a := map[string]*tensor.Array{
			p + "input_layernorm.weight":          randArr(0, d),
			p + "post_attention_layernorm.weight": randArr(0, d),
			p + "self_attn.q_proj.weight":         randArr(std, qd, d),
			p + "self_attn.k_proj.weight":         randArr(std, kvd, d),
			p + "self_attn.v_proj.weight":         randArr(std, kvd, d),
			p + "self_attn.o_proj.weight":         randArr(1/math.Sqrt(float64(qd)), d, qd),
			p + "self_attn.q_norm.weight":         randArr(0, s.HeadDim),
			p + "self_attn.k_norm.weight":         randArr(0, s.HeadDim),
			p + "mlp.gate.weight":                 randArr(std, s.Experts, d),
		}
		if s.Bits != 0 { // the dense projections quantized too, as in MLX checkpoints
			for _, n := range []string{"q_proj", "k_proj", "v_proj", "o_proj"} {
				base := p + "self_attn." + n
				w := a[base+".weight"]
				a[base+".weight"], a[base+".scales"], a[base+".biases"] = tensor.Quantize(w, s.Group, s.Bits)
				w.Free()
			}
		}
		for _, proj := range []struct {
			name    string
			out, in int
		}{{"gate_proj", s.MoEInter, d}, {"up_proj", s.MoEInter, d}, {"down_proj", d, s.MoEInter}} {
			if s.Bits != 0 && s.Packed {
				base := p + "mlp.switch_mlp." + proj.name
				a[base+".weight"], a[base+".scales"], a[base+".biases"] = packedBank(r, s.Experts, proj.out, proj.in, s.Group, s.Bits, dt)
				continue
			}
			if s.Bits != 0 {
				w := randArr(1/math.Sqrt(float64(proj.in)), s.Experts, proj.out, proj.in)
				q, sc, b := tensor.Quantize(w, s.Group, s.Bits)
				w.Free()
				base := p + "mlp.switch_mlp." + proj.name
				a[base+".weight"], a[base+".scales"], a[base+".biases"] = q, sc, b
				continue
			}
			for e := range s.Experts {
				a[fmt.Sprintf("%smlp.experts.%d.%s.weight", p, e, proj.name)] = randArr(1/math.Sqrt(float64(proj.in)), proj.out, proj.in)
			}
		}
		write(fmt.Sprintf("model-layer%03d.safetensors", l), a)
	}
	raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": index})
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"model_type": "qwen3_moe", "architectures": []string{"Qwen3MoeForCausalLM"},
		"hidden_size": d, "intermediate_size": 4 * d, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"vocab_size": s.Vocab, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
		"rope_theta": 1e6, "eos_token_id": 2, "num_experts": s.Experts, "num_experts_per_tok": s.TopK,
		"moe_intermediate_size": s.MoEInter, "norm_topk_prob": true, "decoder_sparse_step": 1,
		"mlp_only_layers": []int{}, "torch_dtype": dt.String(),
	}
	if s.Bits != 0 {
		cfg["quantization"] = map[string]any{"group_size": s.Group, "bits": s.Bits}
	}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// packedBank makes a random quantized bank [experts, out, in]: random
// codes, scales near 1/(levels·√in) and biases centring each group on 0,
// scales and biases in dt.
func packedBank(r *rand.Rand, experts, out, in, group, bits int, dt tensor.DType) (w, scales, biases *tensor.Array) {
	codes := make([]byte, experts*out*in*bits/8)
	r.Read(codes)
	groups := experts * out * in / group
	levels := float64(int(1)<<bits - 1)
	sv, bv := make([]float32, groups), make([]float32, groups)
	for i := range sv {
		sc := (0.8 + 0.4*r.Float64()) * 2 / (levels * math.Sqrt(float64(in)))
		sv[i], bv[i] = float32(sc), float32(-sc*levels/2)
	}
	w = tensor.FromBytes(codes, []int{experts, out, in * bits / 32}, tensor.Uint32)
	scales = tensor.FromFloat32(sv, []int{experts, out, in / group}, dt)
	biases = tensor.FromFloat32(bv, []int{experts, out, in / group}, dt)
	return w, scales, biases
}

// TestExpertStreamingQuantized holds streamed MLX-quantized (stacked,
// packed) experts to the resident model's logits bit for bit, sharded over
// several files.
func TestExpertStreamingQuantized(t *testing.T) {
	dir := t.TempDir()
	writeRandomMoE(t, dir, moeShape{Hidden: 64, Layers: 2, Experts: 8, TopK: 2, MoEInter: 64, Heads: 4, KVHeads: 2, HeadDim: 16, Vocab: 96, Bits: 4, Group: 32})
	prompt := []int32{5, 17, 3, 88, 41, 9, 60, 2, 33, 71}
	res, err := model.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Close()
	want := prefillLogits(t, res, prompt, 0)
	wantChunked := prefillLogits(t, res, prompt, 2)
	wantIDs, err := modeltest.Greedy(res, prompt[:3], 8, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, budget := range []int64{0, 40 << 10, math.MaxInt64} {
		m, err := model.Load(dir, &model.LoadOptions{Experts: &model.ExpertStreaming{CacheBytes: budget}})
		if err != nil {
			t.Fatal(err)
		}
		if u := m.(*model.Loaded).Unused(); len(u) != 0 {
			t.Errorf("unused tensors with streaming: %v", u)
		}
		sameBits(t, "prefill", prefillLogits(t, m, prompt, 0), want)
		sameBits(t, "chunked", prefillLogits(t, m, prompt, 2), wantChunked)
		ids, err := modeltest.Greedy(m, prompt[:3], 8, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		equalIDs(t, "greedy", ids, wantIDs)
		s, _ := m.(*model.Loaded).ExpertStats()
		if s.Misses == 0 || s.ResidentBytes > budget {
			t.Errorf("budget %d: %+v", budget, s)
		}
		// 2 layers × 3 banks × 8 experts, each a packed matrix with its
		// scales and biases
		if want := int64(2 * 3 * 8 * (64*64*4/8 + 2*64*2*4)); s.TotalBytes != want || s.Experts != 48 {
			t.Errorf("streamed %d experts of %d bytes, want 48 of %d", s.Experts, s.TotalBytes, want)
		}
		m.Close()
	}
}

// TestExpertStreamingErrors: a model closed while streaming refuses
// further passes with an error, and a truncated expert read is an error,
// not a panic.
func TestExpertStreamingErrors(t *testing.T) {
	dir := t.TempDir()
	writeRandomMoE(t, dir, moeShape{Hidden: 32, Layers: 1, Experts: 4, TopK: 2, MoEInter: 32, Heads: 2, KVHeads: 1, HeadDim: 16, Vocab: 64})
	m, err := model.Load(dir, &model.LoadOptions{Experts: &model.ExpertStreaming{}})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if _, err := m.Forward(ids2D([]int32{1, 2}), nil, nil); err == nil {
		t.Error("Forward on a closed streaming model succeeded")
	}
	// dense weights copied at load, so that nothing reads the mapping later
	m, err = model.Load(dir, &model.LoadOptions{Copy: true, Experts: &model.ExpertStreaming{}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// cut the layer file short: the headers were read at open, the expert
	// bytes are read on use
	path := filepath.Join(dir, "model-layer000.safetensors")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	sc := tensor.NewScope()
	defer sc.Close()
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	if _, err := m.Forward(ids2D([]int32{1, 2, 3}), caches, nil); err == nil {
		t.Error("Forward over a truncated checkpoint succeeded")
	} else {
		t.Logf("truncated: %v", err)
	}
}
