package model

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// The generic dense tier: one implementation of the Llama-shaped decoder
// (embeddings, blocks of grouped-query attention with rope and a
// feed-forward, a final norm and a head), with a descriptor per family
// saying where its variants differ: the norm (RMSNorm, Gemma's 1 + w,
// LayerNorm with bias), which norms sit around attention and the
// feed-forward, fused projections, q/k norms per head or over the whole
// projection, layers without rope, sliding windows, embedding, residual
// and logit scales, and a final softcap. Rope types come from
// newRopeSpec. Every stored tensor must be used: a checkpoint with a
// tensor the descriptor does not read is refused naming it (the weight
// audit), as is one missing a tensor it does read.

// normKind is a family's normalisation layer.
type normKind int

const (
	rmsNorm   normKind = iota // x/rms(x)·w
	gemmaNorm                 // x/rms(x)·(1 + w)
	layerNorm                 // (x − mean)/std·w + b
)

// qkNormKind is where a family normalises queries and keys.
type qkNormKind int

const (
	qkNone    qkNormKind = iota
	qkPerHead            // over each head (Qwen3, Gemma 3)
	qkWhole              // over the whole projection, before the heads split (OLMo 2)
)

// family describes one model family of the generic tier.
type family struct {
	name          string
	modelTypes    []string
	architectures []string
	norm          normKind
	qkNorm        qkNormKind
	// the four norm slots of a block, by tensor name ("" when absent):
	// before and after attention, before and after the feed-forward
	preAttn, postAttn, preMLP, postMLP string
	fusedQKV                           bool // self_attn.qkv_proj (Phi-3)
	fusedGateUp                        bool // mlp.gate_up_proj (Phi-3, GLM-4)
	plainMLP                           bool // mlp.c_fc → act → mlp.c_proj (Starcoder2)
	gemmaEmbed                         bool // embeddings × √hidden
	// windowAll: sliding_window, when set, applies to every layer of a
	// config without layer_types (Mistral, Phi-3, Starcoder2)
	windowAll   bool
	traditional bool // rope rotates interleaved pairs (GLM-4)
	// routedMoE: layers from first_k_dense_replace on are DeepSeek-style
	// MoE blocks (GLM-4.5); use_qk_norm switches the per-head q/k norms on
	routedMoE    bool
	defaultTheta float64
	defaultAct   string
}

var llamaNorms = family{preAttn: "input_layernorm", preMLP: "post_attention_layernorm"}

func fam(base family, f func(*family)) *family { f(&base); return &base }

// families is the generic tier's descriptor table.
var families = []*family{
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures, f.windowAll = "mistral", []string{"mistral"}, []string{"MistralForCausalLM"}, true
	}),
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures = "ministral", []string{"ministral"}, []string{"MinistralForCausalLM"}
	}),
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures = "qwen2", []string{"qwen2"}, []string{"Qwen2ForCausalLM"}
	}),
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures = "phi3", []string{"phi3"}, []string{"Phi3ForCausalLM"}
		f.fusedQKV, f.fusedGateUp, f.windowAll = true, true, true
	}),
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures = "smollm3", []string{"smollm3"}, []string{"SmolLM3ForCausalLM"}
	}),
	fam(family{postAttn: "post_attention_layernorm", postMLP: "post_feedforward_layernorm"}, func(f *family) {
		f.name, f.modelTypes, f.architectures, f.qkNorm = "olmo2", []string{"olmo2"}, []string{"Olmo2ForCausalLM"}, qkWhole
	}),
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures = "granite", []string{"granite"}, []string{"GraniteForCausalLM"}
	}),
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures = "starcoder2", []string{"starcoder2"}, []string{"Starcoder2ForCausalLM"}
		f.norm, f.plainMLP, f.windowAll, f.defaultAct = layerNorm, true, true, "gelu_pytorch_tanh"
	}),
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures = "gemma", []string{"gemma"}, []string{"GemmaForCausalLM"}
		f.norm, f.gemmaEmbed, f.defaultAct = gemmaNorm, true, "gelu_pytorch_tanh"
	}),
	fam(family{preAttn: "input_layernorm", postAttn: "post_attention_layernorm", preMLP: "pre_feedforward_layernorm", postMLP: "post_feedforward_layernorm"}, func(f *family) {
		f.name, f.modelTypes, f.architectures = "gemma3", []string{"gemma3_text"}, []string{"Gemma3ForCausalLM"}
		f.norm, f.qkNorm, f.gemmaEmbed, f.defaultAct = gemmaNorm, qkPerHead, true, "gelu_pytorch_tanh"
	}),
	fam(family{preAttn: "input_layernorm", postAttn: "post_self_attn_layernorm", preMLP: "post_attention_layernorm", postMLP: "post_mlp_layernorm"}, func(f *family) {
		f.name, f.modelTypes, f.architectures = "glm4", []string{"glm4"}, []string{"Glm4ForCausalLM"}
		f.fusedGateUp, f.traditional = true, true
	}),
	fam(llamaNorms, func(f *family) {
		f.name, f.modelTypes, f.architectures = "glm4_moe", []string{"glm4_moe"}, []string{"Glm4MoeForCausalLM"}
		f.routedMoE = true
	}),
}

func init() {
	for _, f := range families {
		if f.defaultTheta == 0 {
			f.defaultTheta = 10000
		}
		Register(Arch{Name: f.name, ModelTypes: f.modelTypes, Architectures: f.architectures,
			New: func(c *Config, w *Weights) (Architecture, error) { return newGeneric(c, w, f) }})
	}
}

// genericConfig is the union of the config.json fields the families read.
type genericConfig struct {
	ModelType     string   `json:"model_type"`
	Hidden        int      `json:"hidden_size"`
	Layers        int      `json:"num_hidden_layers"`
	Intermediate  int      `json:"intermediate_size"`
	Heads         int      `json:"num_attention_heads"`
	KVHeads       int      `json:"num_key_value_heads"`
	HeadDim       int      `json:"head_dim"`
	Vocab         int      `json:"vocab_size"`
	MaxPos        int      `json:"max_position_embeddings"`
	RMSEps        *float64 `json:"rms_norm_eps"`
	NormEps       *float64 `json:"norm_epsilon"`
	LayerNormEps  *float64 `json:"layer_norm_eps"`
	Act           string   `json:"hidden_act"`
	Activation    string   `json:"hidden_activation"`
	SlidingWindow *int     `json:"sliding_window"`
	UseSliding    *bool    `json:"use_sliding_window"`
	MaxWindow     *int     `json:"max_window_layers"`
	LayerTypes    []string `json:"layer_types"`
	NoRopeLayers  []int    `json:"no_rope_layers"`

	QueryPreAttnScalar *float64 `json:"query_pre_attn_scalar"`
	FinalSoftcap       *float64 `json:"final_logit_softcapping"`
	AttnSoftcap        *float64 `json:"attn_logit_softcapping"`
	EmbedMult          *float64 `json:"embedding_multiplier"`
	AttnMult           *float64 `json:"attention_multiplier"`
	ResidMult          *float64 `json:"residual_multiplier"`
	LogitsScaling      *float64 `json:"logits_scaling"`
	PartialRotary      *float64 `json:"partial_rotary_factor"`
	OrigMaxPos         int      `json:"original_max_position_embeddings"`
	RopeLocalBase      *float64 `json:"rope_local_base_freq"`

	// GLM-4.5's MoE (the router of mlaMoE)
	UseQKNorm   bool    `json:"use_qk_norm"`
	Routed      int     `json:"n_routed_experts"`
	SharedN     int     `json:"n_shared_experts"`
	TopK        int     `json:"num_experts_per_tok"`
	Groups      int     `json:"n_group"`
	TopKGroup   int     `json:"topk_group"`
	NormTopK    bool    `json:"norm_topk_prob"`
	RoutedScale float64 `json:"routed_scaling_factor"`
	FirstDense  int     `json:"first_k_dense_replace"`
	MoEInter    int     `json:"moe_intermediate_size"`
}

// Generic is a model of the generic dense tier.
type Generic struct {
	fam        *family
	cfg        genericConfig
	eos        []int
	dtype      tensor.DType
	embedScale float64 // 0: none
	Embed      *Embedding
	Blocks     []*genericBlock
	Norm       normer
	Head       Projection
	softcap    float64 // 0: none
	logitDiv   float64 // 0: none
}

// normer is a normalisation layer.
type normer interface {
	Forward(x *tensor.Array) *tensor.Array
}

// LayerNormBias is LayerNorm with a weight and a bias.
type LayerNormBias struct {
	Weight, Bias *tensor.Array
	Eps          float32
}

// Forward normalises x over its last axis.
func (n *LayerNormBias) Forward(x *tensor.Array) *tensor.Array {
	return tensor.LayerNorm(x, n.Weight, n.Bias, n.Eps)
}

type genericBlock struct {
	preAttn, postAttn, preMLP, postMLP normer
	attn                               *genericAttention
	mlp                                normer // the feed-forward, as a layer x → y
	resid                              float64
	window                             int
}

// genericAttention is grouped-query attention with the generic tier's
// options; it attends through Attend and rotates through the spans of
// kv.Spans, as Attention does, so batched passes (kv.Rows) and paged
// caches work unchanged.
type genericAttention struct {
	heads, kvHeads, headDim int
	scale                   float32
	Q, K, V, O              Projection
	QNorm, KNorm            *RMSNorm // per head, or nil
	QNormAll, KNormAll      normer   // over the whole projection, or nil
	rope                    *ropeSpec
}

// routedBlock is an mlaMoE as a block's feed-forward.
type routedBlock struct{ m *mlaMoE }

func (r routedBlock) Forward(x *tensor.Array) *tensor.Array { return r.m.forward(x) }

// plainMLP is Starcoder2's feed-forward: proj(act(fc(x))).
type plainMLP struct {
	FC, Proj Projection
	act      func(*tensor.Array) *tensor.Array
}

func (m *plainMLP) Forward(x *tensor.Array) *tensor.Array {
	return scoped(func() *tensor.Array { return m.Proj.Forward(m.act(m.FC.Forward(x))) })
}

// activation maps a config's activation name to its function.
func activation(name string) (func(*tensor.Array) *tensor.Array, error) {
	switch name {
	case "", "silu", "swish":
		return tensor.Silu, nil
	case "gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu_tanh":
		return tensor.GeluApprox, nil
	case "gelu":
		return tensor.Gelu, nil
	}
	return nil, fmt.Errorf("%w: activation %q (supported: silu, gelu, gelu_pytorch_tanh)", ErrUnsupported, name)
}

// ropeFor is one layer type's rope parameters as config.json states them.
type ropeFor struct {
	p  RopeParams
	ex ropeExtra
}

// genericRopes reads rope_parameters (flat, or per layer type as Gemma 3
// writes it), rope_scaling and rope_theta. The "" entry is the flat one.
func genericRopes(c *Config, cfg *genericConfig, defaultTheta float64) (map[string]ropeFor, error) {
	var rc struct {
		Parameters map[string]json.RawMessage `json:"rope_parameters"`
		Scaling    json.RawMessage            `json:"rope_scaling"`
	}
	_ = json.Unmarshal(c.Raw, &rc) // a flat rope_parameters fails the map: handled below
	out := map[string]ropeFor{}
	perType := false
	for k, raw := range rc.Parameters {
		if strings.HasSuffix(k, "_attention") && len(raw) > 0 && raw[0] == '{' {
			perType = true
			var r ropeFor
			r.p.Theta = defaultTheta
			if err := json.Unmarshal(raw, &r.p); err != nil {
				return nil, fmt.Errorf("%w: config.json: rope_parameters[%q]: %v", ErrCheckpoint, k, err)
			}
			_ = json.Unmarshal(raw, &r.ex)
			if r.p.Type == "" {
				r.p.Type = r.p.LegacyType
			}
			if r.p.Type == "" {
				r.p.Type = "default"
			}
			out[k] = r
		}
	}
	if perType {
		return out, nil
	}
	p, err := parseRope(c, defaultTheta)
	if err != nil {
		return nil, err
	}
	var ex ropeExtra
	var both struct {
		Scaling    json.RawMessage `json:"rope_scaling"`
		Parameters json.RawMessage `json:"rope_parameters"`
	}
	_ = json.Unmarshal(c.Raw, &both)
	for _, raw := range []json.RawMessage{both.Scaling, both.Parameters} {
		if len(raw) > 0 && string(raw) != "null" {
			_ = json.Unmarshal(raw, &ex)
		}
	}
	if p.OriginalMaxPositions == 0 {
		p.OriginalMaxPositions = cfg.OrigMaxPos
	}
	out[""] = ropeFor{p, ex}
	if cfg.RopeLocalBase != nil { // Gemma 3's older spelling: sliding layers use their own base
		loc := RopeParams{Type: "default", Theta: *cfg.RopeLocalBase}
		out["sliding_attention"] = ropeFor{p: loc}
		out["full_attention"] = ropeFor{p, ex}
	}
	return out, nil
}

func newGeneric(c *Config, w *Weights, f *family) (Architecture, error) {
	cfg := genericConfig{Groups: 1, TopKGroup: 1, RoutedScale: 1}
	if err := c.Decode(&cfg); err != nil {
		return nil, err
	}
	if cfg.Hidden <= 0 || cfg.Layers <= 0 || cfg.Heads <= 0 || cfg.Vocab <= 0 {
		return nil, fmt.Errorf("%w: config.json: hidden_size %d, num_hidden_layers %d, num_attention_heads %d, vocab_size %d", ErrCheckpoint, cfg.Hidden, cfg.Layers, cfg.Heads, cfg.Vocab)
	}
	if cfg.AttnSoftcap != nil && *cfg.AttnSoftcap > 0 {
		return nil, fmt.Errorf("%w: %s with attn_logit_softcapping", ErrUnsupported, f.name)
	}
	if cfg.KVHeads == 0 {
		cfg.KVHeads = cfg.Heads
	}
	if cfg.HeadDim == 0 || f.name == "phi3" { // Phi-3 derives its head size
		cfg.HeadDim = cfg.Hidden / cfg.Heads
	}
	if cfg.Heads%cfg.KVHeads != 0 {
		return nil, fmt.Errorf("%w: config.json: %d heads not a multiple of %d KV heads", ErrCheckpoint, cfg.Heads, cfg.KVHeads)
	}
	if cfg.LayerTypes != nil && len(cfg.LayerTypes) != cfg.Layers {
		return nil, fmt.Errorf("%w: config.json: %d layer_types for %d layers", ErrCheckpoint, len(cfg.LayerTypes), cfg.Layers)
	}
	if cfg.NoRopeLayers != nil && len(cfg.NoRopeLayers) != cfg.Layers {
		return nil, fmt.Errorf("%w: config.json: %d no_rope_layers for %d layers", ErrCheckpoint, len(cfg.NoRopeLayers), cfg.Layers)
	}
	eps := 1e-6
	for _, e := range []*float64{cfg.LayerNormEps, cfg.RMSEps, cfg.NormEps} {
		if e != nil {
			eps = *e
		}
	}
	if f.norm != layerNorm && cfg.RMSEps != nil {
		eps = *cfg.RMSEps
	}
	actName := cfg.Act
	if cfg.Activation != "" {
		actName = cfg.Activation
	}
	if actName == "" {
		actName = f.defaultAct
	}
	act, err := activation(actName)
	if err != nil {
		return nil, err
	}
	ropes, err := genericRopes(c, &cfg, f.defaultTheta)
	if err != nil {
		return nil, err
	}
	m := &Generic{fam: f, cfg: cfg, eos: c.EOS}
	d, hd := cfg.Hidden, cfg.HeadDim
	m.Embed = w.Embedding("embed_tokens", cfg.Vocab, d)
	m.dtype = m.Embed.DType
	if f.gemmaEmbed {
		m.embedScale = roundTo(math.Sqrt(float64(d)), m.dtype)
	}
	if cfg.EmbedMult != nil {
		m.embedScale = *cfg.EmbedMult
	}
	norm := func(name string, dim int) normer {
		switch f.norm {
		case layerNorm:
			return &LayerNormBias{Weight: w.Tensor(name+".weight", dim), Bias: w.Tensor(name+".bias", dim), Eps: float32(eps)}
		case gemmaNorm:
			return gemmaRMSNorm(w, name, dim, float32(eps))
		}
		return w.RMSNorm(name, dim, float32(eps))
	}
	scale := float32(1 / math.Sqrt(float64(hd)))
	if cfg.QueryPreAttnScalar != nil {
		scale = float32(1 / math.Sqrt(*cfg.QueryPreAttnScalar))
	}
	if cfg.AttnMult != nil {
		scale = float32(*cfg.AttnMult)
	}
	window := 0
	if cfg.SlidingWindow != nil {
		window = *cfg.SlidingWindow
	}
	built := map[string]*ropeSpec{}
	lin := func(name string, in, out int) Projection { return w.Linear(name, in, out, w.Has(name+".bias")) }
	for i := range cfg.Layers {
		p := "layers." + strconv.Itoa(i) + "."
		b := &genericBlock{}
		if cfg.ResidMult != nil {
			b.resid = *cfg.ResidMult
		}
		// the layer's attention type and window
		kind := "full_attention"
		switch {
		case cfg.LayerTypes != nil:
			kind = cfg.LayerTypes[i]
		case f.windowAll && window > 0:
			kind = "sliding_attention"
		case f.name == "qwen2" && cfg.UseSliding != nil && *cfg.UseSliding && window > 0 && (cfg.MaxWindow == nil || i >= *cfg.MaxWindow):
			kind = "sliding_attention"
		}
		switch kind {
		case "full_attention":
		case "sliding_attention":
			if window <= 0 {
				return nil, fmt.Errorf("%w: config.json: layer %d is a sliding layer without sliding_window", ErrCheckpoint, i)
			}
			b.window = window
		default:
			return nil, fmt.Errorf("%w: %s layer %d of type %q", ErrUnsupported, f.name, i, kind)
		}
		for slot, name := range map[*normer]string{&b.preAttn: f.preAttn, &b.postAttn: f.postAttn, &b.preMLP: f.preMLP, &b.postMLP: f.postMLP} {
			if name != "" {
				*slot = norm(p+name, d)
			}
		}
		a := &genericAttention{heads: cfg.Heads, kvHeads: cfg.KVHeads, headDim: hd, scale: scale}
		qn, kn := cfg.Heads*hd, cfg.KVHeads*hd
		if f.fusedQKV {
			parts := splitRows(w, p+"self_attn.qkv_proj", d, []int{qn, kn, kn})
			a.Q, a.K, a.V = parts[0], parts[1], parts[2]
		} else {
			a.Q, a.K, a.V = lin(p+"self_attn.q_proj", d, qn), lin(p+"self_attn.k_proj", d, kn), lin(p+"self_attn.v_proj", d, kn)
		}
		a.O = lin(p+"self_attn.o_proj", qn, d)
		qk := f.qkNorm
		if f.routedMoE && cfg.UseQKNorm {
			qk = qkPerHead
		}
		switch qk {
		case qkPerHead:
			a.QNorm = asRMS(norm(p+"self_attn.q_norm", hd))
			a.KNorm = asRMS(norm(p+"self_attn.k_norm", hd))
		case qkWhole:
			a.QNormAll, a.KNormAll = norm(p+"self_attn.q_norm", qn), norm(p+"self_attn.k_norm", kn)
		}
		if cfg.NoRopeLayers == nil || cfg.NoRopeLayers[i] != 0 {
			key := ""
			if _, ok := ropes[kind]; ok {
				key = kind
			}
			if _, ok := ropes[key]; !ok {
				return nil, fmt.Errorf("%w: config.json: no rope parameters for %s layers", ErrCheckpoint, kind)
			}
			if built[key] == nil {
				rf := ropes[key]
				partial := rf.p.PartialRotaryFactor
				if partial == 0 && cfg.PartialRotary != nil {
					partial = *cfg.PartialRotary
				}
				if partial == 0 {
					partial = 1
				}
				dims := int(float64(hd) * partial)
				maxPos := cfg.MaxPos
				if maxPos == 0 {
					maxPos = 4096
				}
				r, err := newRopeSpec(w, rf.p, rf.ex, dims, hd, maxPos, f.traditional)
				if err != nil {
					return nil, err
				}
				built[key] = r
			}
			a.rope = built[key]
		}
		b.attn = a
		switch {
		case f.routedMoE && cfg.Routed > 0 && i >= cfg.FirstDense:
			if cfg.Groups <= 0 || cfg.Routed%cfg.Groups != 0 || cfg.TopKGroup > cfg.Groups || cfg.TopK <= 0 {
				return nil, fmt.Errorf("%w: config.json: %d experts in %d groups, top %d groups, top %d", ErrCheckpoint, cfg.Routed, cfg.Groups, cfg.TopKGroup, cfg.TopK)
			}
			sm := w.SparseMoE(p+"mlp", d, cfg.MoEInter, cfg.Routed, cfg.TopK, cfg.NormTopK)
			mo := &mlaMoE{Router: sm.Router, Experts: sm.Experts, topK: cfg.TopK, groups: cfg.Groups, topKGroup: cfg.TopKGroup, norm: cfg.NormTopK, scale: cfg.RoutedScale}
			bias := w.Tensor(p+"mlp.gate.e_score_correction_bias", cfg.Routed)
			mo.Bias = w.Own(tensor.WithScope(func() []*tensor.Array { return []*tensor.Array{tensor.AsType(bias, tensor.Float32)} })[0])
			if cfg.SharedN > 0 {
				mo.Shared = w.MLP(p+"mlp.shared_experts", d, cfg.MoEInter*cfg.SharedN)
			}
			b.mlp = routedBlock{mo}
		case f.plainMLP:
			b.mlp = &plainMLP{FC: lin(p+"mlp.c_fc", d, cfg.Intermediate), Proj: lin(p+"mlp.c_proj", cfg.Intermediate, d), act: act}
		case f.fusedGateUp:
			parts := splitRows(w, p+"mlp.gate_up_proj", d, []int{cfg.Intermediate, cfg.Intermediate})
			b.mlp = &MLP{Gate: parts[0], Up: parts[1], Down: lin(p+"mlp.down_proj", cfg.Intermediate, d), Act: act}
		default:
			b.mlp = &MLP{Gate: lin(p+"mlp.gate_proj", d, cfg.Intermediate), Up: lin(p+"mlp.up_proj", d, cfg.Intermediate),
				Down: lin(p+"mlp.down_proj", cfg.Intermediate, d), Act: act}
		}
		m.Blocks = append(m.Blocks, b)
	}
	m.Norm = norm("norm", d)
	if w.Has("lm_head.weight") || w.Has("lm_head.scales") {
		m.Head = w.Linear("lm_head", d, cfg.Vocab, false)
	} else {
		m.Head = w.TiedHead("embed_tokens", m.Embed)
	}
	if cfg.FinalSoftcap != nil && *cfg.FinalSoftcap > 0 {
		m.softcap = *cfg.FinalSoftcap
	}
	if cfg.LogitsScaling != nil && *cfg.LogitsScaling != 0 && *cfg.LogitsScaling != 1 {
		m.logitDiv = *cfg.LogitsScaling
	}
	if err := auditWeights(w, f.name); err != nil {
		return nil, err
	}
	return m, nil
}

// auditWeights fails naming the stored tensors no layer read (rotary
// tables some exporters store are not weights).
func auditWeights(w *Weights, arch string) error {
	var left []string
	for _, n := range w.Unused() {
		if strings.HasSuffix(n, "rotary_emb.inv_freq") {
			continue
		}
		left = append(left, n)
	}
	if len(left) == 0 {
		return nil
	}
	sort.Strings(left)
	more := ""
	if len(left) > 8 {
		more = fmt.Sprintf(" and %d more", len(left)-8)
		left = left[:8]
	}
	return fmt.Errorf("%w: %s: %d stored tensors the %s architecture does not use: %s%s", ErrCheckpoint, w.Set().Dir(), len(w.Unused()), arch, strings.Join(left, ", "), more)
}

// asRMS returns n as an *RMSNorm (per-head norms are RMS norms in every
// family that has them).
func asRMS(n normer) *RMSNorm {
	r, ok := n.(*RMSNorm)
	if !ok {
		fail(fmt.Errorf("%w: per-head q/k norm of a non-RMS family", ErrUnsupported))
	}
	return r
}

// gemmaRMSNorm loads a Gemma-style norm, which scales by 1 + w: the
// weight is stored shifted once at load (computed in float32, then cast
// back to the stored dtype).
func gemmaRMSNorm(w *Weights, name string, dim int, eps float32) *RMSNorm {
	raw := w.Tensor(name+".weight", dim)
	s := w.Own(tensor.WithScope(func() []*tensor.Array {
		return []*tensor.Array{tensor.AsType(tensor.AddScalar(tensor.AsType(raw, tensor.Float32), 1), raw.DType())}
	})[0])
	return &RMSNorm{Weight: s, Eps: eps}
}

// splitRows loads the fused projection name (outputs stacked along the
// rows: Phi-3's qkv_proj, gate_up_proj) and returns one projection per
// part of outs. A plain or quantized layer is split into row slices at
// load; one a Wrapper stood in for runs whole and its output is sliced.
func splitRows(w *Weights, name string, in int, outs []int) []Projection {
	total := 0
	for _, o := range outs {
		total += o
	}
	p := w.Linear(name, in, total, w.Has(name+".bias"))
	out := make([]Projection, len(outs))
	l, ok := p.(*Linear)
	lo := 0
	for i, o := range outs {
		if !ok {
			out[i] = &sliceProjection{P: p, lo: lo, hi: lo + o}
			lo += o
			continue
		}
		rows := func(a *tensor.Array) *tensor.Array {
			if a == nil {
				return nil
			}
			return w.Own(tensor.WithScope(func() []*tensor.Array {
				return []*tensor.Array{tensor.Contiguous(tensor.SliceAxis(a, 0, lo, lo+o))}
			})[0])
		}
		out[i] = &Linear{Weight: rows(l.Weight), Bias: rows(l.Bias), Scales: rows(l.Scales), Biases: rows(l.Biases), QuantSpec: l.QuantSpec}
		lo += o
	}
	return out
}

// sliceProjection is columns lo..hi of another projection's output.
type sliceProjection struct {
	P      Projection
	lo, hi int
}

func (s *sliceProjection) Forward(x *tensor.Array) *tensor.Array {
	return scoped(func() *tensor.Array {
		y := s.P.Forward(x)
		return tensor.SliceAxis(y, y.NDim()-1, s.lo, s.hi)
	})
}

func (a *genericAttention) forward(x *tensor.Array, c kv.Cache, mask kv.Mask) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	b, t := x.Dim(0), x.Dim(1)
	heads := func(l Projection, n int, all normer, norm *RMSNorm) *tensor.Array {
		y := l.Forward(x)
		if all != nil {
			y = all.Forward(y)
		}
		y = tensor.Reshape(y, b, t, n, a.headDim)
		if norm != nil {
			y = norm.Forward(y)
		}
		return tensor.Transpose(y, 0, 2, 1, 3)
	}
	q := heads(a.Q, a.heads, a.QNormAll, a.QNorm)
	k := heads(a.K, a.kvHeads, a.KNormAll, a.KNorm)
	v := heads(a.V, a.kvHeads, nil, nil)
	if a.rope != nil {
		spans := kv.Spans(c, t)
		q = a.rope.applySpans(q, spans)
		k = a.rope.applySpans(k, spans)
	}
	o := Attend(q, k, v, c, mask, a.scale)
	o = tensor.Reshape(tensor.Transpose(o, 0, 2, 1, 3), b, t, a.heads*a.headDim)
	return sc.Keep(a.O.Forward(o))
}

// forward runs the block over x; with rows set (the last layer of a pass
// that wants only those positions) the feed-forward branch runs on them
// alone and the block returns them.
func (b *genericBlock) forward(x *tensor.Array, c kv.Cache, mask kv.Mask, rows *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	branch := func(in *tensor.Array, pre, post normer, f func(*tensor.Array) *tensor.Array) *tensor.Array {
		y := in
		if pre != nil {
			y = pre.Forward(y)
		}
		y = f(y)
		if post != nil {
			y = post.Forward(y)
		}
		if b.resid != 0 {
			y = tensor.MulScalar(y, b.resid)
		}
		return tensor.Add(in, y)
	}
	h := branch(x, b.preAttn, b.postAttn, func(y *tensor.Array) *tensor.Array { return b.attn.forward(y, c, mask) })
	h = branch(takeRows(h, rows), b.preMLP, b.postMLP, b.mlp.Forward)
	return sc.Keep(h)
}

// Info implements Architecture.
func (m *Generic) Info() Info {
	win := 0
	for _, b := range m.Blocks {
		if b.window > 0 && (win == 0 || b.window < win) {
			win = b.window
		}
	}
	return Info{ModelType: m.cfg.ModelType, Vocab: m.cfg.Vocab, Hidden: m.cfg.Hidden, Layers: m.cfg.Layers,
		EOS: m.eos, DType: m.dtype, SlidingWindow: win}
}

// MakeCaches implements Architecture: a rotating cache of the window for
// sliding layers, a growing one for the others.
func (m *Generic) MakeCaches() []kv.Cache {
	out := make([]kv.Cache, len(m.Blocks))
	for i, b := range m.Blocks {
		if b.window > 0 {
			out[i] = kv.NewRotatingKVCache(b.window, 0)
		} else {
			out[i] = kv.NewKVCache()
		}
	}
	return out
}

// Forward implements Architecture.
func (m *Generic) Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	t := ids.Dim(1)
	h := m.Embed.Forward(ids)
	if m.embedScale != 0 {
		h = tensor.MulScalar(h, m.embedScale)
	}
	if opts != nil && opts.Embeddings != nil {
		emb := opts.Embeddings
		if emb.NDim() != 3 || emb.Dim(0) != h.Dim(0) || emb.Dim(1) != h.Dim(1) || emb.Dim(2) != h.Dim(2) {
			panic(&tensor.Error{Op: "model.Forward", Err: fmt.Errorf("%w: embeddings %v for hidden states %v", tensor.ErrShape, emb.Shape(), h.Shape())})
		}
		h = mergeEmbeddings(h, emb, opts.EmbedMask)
	}
	masks := map[int]kv.Mask{}
	for i, b := range m.Blocks {
		if _, ok := masks[b.window]; !ok {
			masks[b.window] = LayerMask(caches, i, t, b.window, h.Backend())
		}
	}
	out := outputRows(opts, t, h.Backend())
	for i, b := range m.Blocks {
		var c kv.Cache
		if caches != nil {
			c = caches[i]
		}
		h = b.forward(h, c, masks[b.window], lastRows(i, len(m.Blocks), out))
	}
	return sc.Keep(m.Norm.Forward(h))
}

// Logits implements Architecture: the head, divided by logits_scaling
// (Granite), then cap·tanh(logits/cap) when the config softcaps.
func (m *Generic) Logits(h *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	y := m.Head.Forward(h)
	if m.logitDiv != 0 {
		y = tensor.DivScalar(y, m.logitDiv)
	}
	if m.softcap != 0 {
		y = tensor.MulScalar(tensor.Tanh(tensor.DivScalar(y, m.softcap)), m.softcap)
	}
	return sc.Keep(y)
}
