package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

func init() {
	Register(Arch{
		Name:          "qwen3_5",
		ModelTypes:    []string{"qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"},
		Architectures: []string{"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"},
		New:           func(c *Config, w *Weights) (Architecture, error) { return newQwen35(c, w, false) },
	})
	Register(Arch{
		Name:          "qwen3_next",
		ModelTypes:    []string{"qwen3_next"},
		Architectures: []string{"Qwen3NextForCausalLM"},
		New:           func(c *Config, w *Weights) (Architecture, error) { return newQwen35(c, w, true) },
	})
}

// qwen35Config holds the config.json fields of Qwen3.5 and Qwen3-Next
// (for Qwen3.5's multimodal form, those of its text_config).
type qwen35Config struct {
	ModelType     string   `json:"model_type"`
	Hidden        int      `json:"hidden_size"`
	Layers        int      `json:"num_hidden_layers"`
	Intermediate  int      `json:"intermediate_size"`
	Heads         int      `json:"num_attention_heads"`
	KVHeads       int      `json:"num_key_value_heads"`
	HeadDim       int      `json:"head_dim"`
	Vocab         int      `json:"vocab_size"`
	Eps           float32  `json:"rms_norm_eps"`
	AttentionBias bool     `json:"attention_bias"`
	LayerTypes    []string `json:"layer_types"`
	FullInterval  int      `json:"full_attention_interval"`
	PartialRotary *float64 `json:"partial_rotary_factor"`
	ConvKernel    int      `json:"linear_conv_kernel_dim"`
	KeyDim        int      `json:"linear_key_head_dim"`
	ValueDim      int      `json:"linear_value_head_dim"`
	KeyHeads      int      `json:"linear_num_key_heads"`
	ValueHeads    int      `json:"linear_num_value_heads"`
	Experts       int      `json:"num_experts"`
	TopK          int      `json:"num_experts_per_tok"`
	MoEInter      int      `json:"moe_intermediate_size"`
	SharedInter   int      `json:"shared_expert_intermediate_size"`
	NormTopK      *bool    `json:"norm_topk_prob"`
	SparseStep    int      `json:"decoder_sparse_step"`
	MLPOnlyLayers []int    `json:"mlp_only_layers"`
}

// Qwen35 is the Qwen3.5 / Qwen3-Next hybrid decoder: most layers are
// gated DeltaNet linear attention (a causal depthwise convolution, then
// the gated delta rule over a per-head recurrent state, a gated RMSNorm
// and an output projection), every few a gated full attention layer
// (q/k norms, partial rotary, the output scaled by sigmoid of a per-head
// gate from the query projection); the feed-forward is a gated MLP or a
// sparse MoE with a gated shared expert. Norms scale by 1 + w as
// transformers stores them (MLX conversions store them shifted).
type Qwen35 struct {
	cfg    qwen35Config
	eos    []int
	dtype  tensor.DType
	Embed  *Embedding
	Blocks []*qwen35Block
	Norm   *RMSNorm
	Head   Projection
	// MTPBlocks are the checkpoint's multi-token-prediction layers
	// (mtp.layers.K, full attention), sharing one input projection MTPFC
	// of the next token's embedding and the hidden state (each normed by
	// MTPENorm, MTPHNorm; embedding first) and the output norm MTPNorm;
	// the head is the model's. None when the checkpoint has none.
	MTPBlocks                   []*qwen35Block
	MTPFC                       Projection
	MTPENorm, MTPHNorm, MTPNorm *RMSNorm
}

type qwen35Block struct {
	InNorm, PostNorm *RMSNorm
	Linear           *deltaNet  // nil on full attention layers
	Attn             *gatedAttn // nil on linear layers
	MLP              *MLP
	MoE              *SparseMoE
	Shared           *MLP
	SharedGate       Projection
}

// deltaNet is one gated DeltaNet layer.
type deltaNet struct {
	next                bool          // Qwen3-Next's fused, per-key-head grouped projections
	QKV, Z, B, A        Projection    // Qwen3.5
	QKVZ, BA            Projection    // Qwen3-Next
	Conv                *tensor.Array // [kernel, channels]
	ALog, DtBias        *tensor.Array // [value heads] float32
	Norm                *RMSNorm      // gated, over the value head dim
	Out                 Projection
	kHeads, vHeads      int
	kDim, vDim, kernel  int
	keyWidth, convWidth int
}

// gatedAttn is Qwen3.5's full attention layer.
type gatedAttn struct {
	heads, kvHeads, headDim int
	scale                   float32
	Q, K, V, O              Projection
	QNorm, KNorm            *RMSNorm
	Rope                    *Rope
}

func newQwen35(c *Config, w *Weights, next bool) (Architecture, error) {
	cfg := qwen35Config{Eps: 1e-6, FullInterval: 4, SparseStep: 1, ConvKernel: 4}
	if err := c.Decode(&cfg); err != nil {
		return nil, err
	}
	text := c
	var nested struct {
		Text json.RawMessage `json:"text_config"`
	}
	_ = json.Unmarshal(c.Raw, &nested)
	if len(nested.Text) > 0 && string(nested.Text) != "null" {
		if err := json.Unmarshal(nested.Text, &cfg); err != nil {
			return nil, fmt.Errorf("%w: config.json: text_config: %v", ErrCheckpoint, err)
		}
		text = &Config{Raw: nested.Text}
	}
	if cfg.Hidden <= 0 || cfg.Layers <= 0 || cfg.Heads <= 0 || cfg.Vocab <= 0 || cfg.KeyHeads <= 0 || cfg.ValueHeads%max(cfg.KeyHeads, 1) != 0 {
		return nil, fmt.Errorf("%w: config.json: hidden_size %d, num_hidden_layers %d, num_attention_heads %d, vocab_size %d, linear heads %d/%d", ErrCheckpoint, cfg.Hidden, cfg.Layers, cfg.Heads, cfg.Vocab, cfg.KeyHeads, cfg.ValueHeads)
	}
	if cfg.KVHeads == 0 {
		cfg.KVHeads = cfg.Heads
	}
	if cfg.HeadDim == 0 {
		cfg.HeadDim = cfg.Hidden / cfg.Heads
	}
	if cfg.LayerTypes == nil {
		for i := range cfg.Layers {
			t := "linear_attention"
			if (i+1)%max(cfg.FullInterval, 1) == 0 {
				t = "full_attention"
			}
			cfg.LayerTypes = append(cfg.LayerTypes, t)
		}
	}
	if len(cfg.LayerTypes) != cfg.Layers {
		return nil, fmt.Errorf("%w: config.json: %d layer_types for %d layers", ErrCheckpoint, len(cfg.LayerTypes), cfg.Layers)
	}
	rp, err := parseRope(text, 10000)
	if err != nil {
		return nil, err
	}
	partial := rp.PartialRotaryFactor
	if partial == 0 && cfg.PartialRotary != nil {
		partial = *cfg.PartialRotary
	}
	if partial == 0 {
		partial = 0.25
	}
	if rp.Type != "default" {
		return nil, fmt.Errorf("%w: %s rope type %q (supported: default)", ErrUnsupported, cfg.ModelType, rp.Type)
	}
	rope := &Rope{Dims: int(float64(cfg.HeadDim) * partial), Base: float32(rp.Theta), Scale: 1}
	normTopK := true
	if cfg.NormTopK != nil {
		normTopK = *cfg.NormTopK
	}

	m := &Qwen35{cfg: cfg, eos: c.EOS}
	d := cfg.Hidden
	m.Embed = w.Embedding("embed_tokens", cfg.Vocab, d)
	m.dtype = m.Embed.DType
	// transformers stores the zero-centred norms as w (scaling by 1 + w),
	// with conv1d weights [C, 1, K]; MLX conversions store 1 + w and [C, K, 1]
	shifted := true
	for i, t := range cfg.LayerTypes {
		if t == "linear_attention" {
			full, _ := w.Resolve("layers." + strconv.Itoa(i) + ".linear_attn.conv1d.weight")
			if info, err := w.Set().Info(full); err == nil && len(info.Shape) == 3 && info.Shape[2] == 1 && info.Shape[1] != 1 {
				shifted = false
			}
			break
		}
	}
	norm := func(name string, dim int) *RMSNorm {
		if shifted {
			return gemmaRMSNorm(w, name, dim, cfg.Eps)
		}
		return w.RMSNorm(name, dim, cfg.Eps)
	}
	block := func(p, kind string, sparse bool) (*qwen35Block, error) {
		b := &qwen35Block{InNorm: norm(p+"input_layernorm", d), PostNorm: norm(p+"post_attention_layernorm", d)}
		switch kind {
		case "linear_attention":
			b.Linear = loadDeltaNet(w, p+"linear_attn", &cfg, next)
		case "full_attention":
			hd := cfg.HeadDim
			b.Attn = &gatedAttn{heads: cfg.Heads, kvHeads: cfg.KVHeads, headDim: hd, scale: float32(1 / math.Sqrt(float64(hd))), Rope: rope,
				Q:     w.Linear(p+"self_attn.q_proj", d, 2*cfg.Heads*hd, cfg.AttentionBias),
				K:     w.Linear(p+"self_attn.k_proj", d, cfg.KVHeads*hd, cfg.AttentionBias),
				V:     w.Linear(p+"self_attn.v_proj", d, cfg.KVHeads*hd, cfg.AttentionBias),
				O:     w.Linear(p+"self_attn.o_proj", cfg.Heads*hd, d, cfg.AttentionBias),
				QNorm: norm(p+"self_attn.q_norm", hd), KNorm: norm(p+"self_attn.k_norm", hd)}
		default:
			return nil, fmt.Errorf("%w: %s layer %s of type %q", ErrUnsupported, cfg.ModelType, p, kind)
		}
		if sparse {
			b.MoE = w.SparseMoE(p+"mlp", d, cfg.MoEInter, cfg.Experts, cfg.TopK, normTopK)
			if cfg.SharedInter > 0 {
				b.Shared = w.MLP(p+"mlp.shared_expert", d, cfg.SharedInter)
				b.SharedGate = w.Linear(p+"mlp.shared_expert_gate", d, 1, false)
			}
		} else {
			b.MLP = w.MLP(p+"mlp", d, cfg.Intermediate)
		}
		return b, nil
	}
	for i := range cfg.Layers {
		sparse := cfg.Experts > 0 && !contains(cfg.MLPOnlyLayers, i) && (i+1)%max(cfg.SparseStep, 1) == 0
		b, err := block("layers."+strconv.Itoa(i)+".", cfg.LayerTypes[i], sparse)
		if err != nil {
			return nil, err
		}
		m.Blocks = append(m.Blocks, b)
	}
	m.Norm = norm("norm", d)
	if w.Has("lm_head.weight") || w.Has("lm_head.scales") {
		m.Head = w.Linear("lm_head", d, cfg.Vocab, false)
	} else {
		m.Head = w.TiedHead("embed_tokens", m.Embed)
	}
	// multi-token prediction: mtp.layers.K, full attention layers
	for k := 0; w.Has("mtp.fc.weight") || w.Has("mtp.fc.scales"); k++ {
		p := "mtp.layers." + strconv.Itoa(k) + "."
		if !w.Has(p + "input_layernorm.weight") {
			break
		}
		sparse := cfg.Experts > 0 && (w.Has(p+"mlp.gate.weight") || w.Has(p+"mlp.gate.scales"))
		b, err := block(p, "full_attention", sparse)
		if err != nil {
			return nil, err
		}
		m.MTPBlocks = append(m.MTPBlocks, b)
	}
	if len(m.MTPBlocks) > 0 {
		m.MTPFC = w.Linear("mtp.fc", 2*d, d, false)
		m.MTPENorm, m.MTPHNorm = norm("mtp.pre_fc_norm_embedding", d), norm("mtp.pre_fc_norm_hidden", d)
		m.MTPNorm = norm("mtp.norm", d)
	}
	if err := auditWeights(w, cfg.ModelType); err != nil {
		return nil, err
	}
	return m, nil
}

func loadDeltaNet(w *Weights, p string, cfg *qwen35Config, next bool) *deltaNet {
	d := cfg.Hidden
	n := &deltaNet{next: next, kHeads: cfg.KeyHeads, vHeads: cfg.ValueHeads, kDim: cfg.KeyDim, vDim: cfg.ValueDim, kernel: cfg.ConvKernel}
	n.keyWidth = cfg.KeyHeads * cfg.KeyDim
	vw := cfg.ValueHeads * cfg.ValueDim
	n.convWidth = 2*n.keyWidth + vw
	if next {
		n.QKVZ = w.Linear(p+".in_proj_qkvz", d, 2*n.keyWidth+2*vw, false)
		n.BA = w.Linear(p+".in_proj_ba", d, 2*cfg.ValueHeads, false)
	} else {
		n.QKV = w.Linear(p+".in_proj_qkv", d, n.convWidth, false)
		n.Z = w.Linear(p+".in_proj_z", d, vw, false)
		n.B = w.Linear(p+".in_proj_b", d, cfg.ValueHeads, false)
		n.A = w.Linear(p+".in_proj_a", d, cfg.ValueHeads, false)
	}
	conv := w.Tensor(p+".conv1d.weight", n.convWidth, -1, -1)
	n.Conv = w.Own(tensor.WithScope(func() []*tensor.Array {
		var k *tensor.Array
		if conv.Dim(1) == 1 { // transformers: [C, 1, K]
			k = tensor.Reshape(conv, n.convWidth, conv.Dim(2))
		} else { // MLX: [C, K, 1]
			k = tensor.Reshape(conv, n.convWidth, conv.Dim(1))
		}
		return []*tensor.Array{tensor.Contiguous(tensor.Transpose(k))} // [K, C]
	})[0])
	if n.Conv.Dim(0) != n.kernel {
		w.failf(p+".conv1d.weight", "kernel %d, config says %d", n.Conv.Dim(0), n.kernel)
	}
	f32 := func(name string) *tensor.Array {
		a := w.Tensor(name, cfg.ValueHeads)
		return w.Own(tensor.WithScope(func() []*tensor.Array { return []*tensor.Array{tensor.AsType(a, tensor.Float32)} })[0])
	}
	n.ALog = f32(p + ".A_log")
	n.DtBias = f32(p + ".dt_bias")
	n.Norm = w.RMSNorm(p+".norm", cfg.ValueDim, cfg.Eps)
	n.Out = w.Linear(p+".out_proj", vw, d, false)
	return n
}

// Info implements Architecture.
func (m *Qwen35) Info() Info {
	return Info{ModelType: m.cfg.ModelType, Vocab: m.cfg.Vocab, Hidden: m.cfg.Hidden, Layers: m.cfg.Layers, EOS: m.eos, DType: m.dtype}
}

// MakeCaches implements Architecture: a recurrent cache for each linear
// layer, a growing KV cache for each full attention layer.
func (m *Qwen35) MakeCaches() []kv.Cache {
	out := make([]kv.Cache, len(m.Blocks))
	for i, b := range m.Blocks {
		if b.Linear != nil {
			out[i] = kv.NewRecurrentCache()
		} else {
			out[i] = kv.NewKVCache()
		}
	}
	return out
}

// Forward implements Architecture.
func (m *Qwen35) Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	t := ids.Dim(1)
	h := EmbedInputs(m.Embed, ids, opts)
	out := outputRows(opts, t, h.Backend())
	var mask kv.Mask
	haveMask := false
	for i, b := range m.Blocks {
		var c kv.Cache
		if caches != nil {
			c = caches[i]
		}
		if b.Attn != nil && !haveMask {
			mask, haveMask = LayerMask(caches, i, t, 0, h.Backend()), true
		}
		h = b.forward(h, c, mask, lastRows(i, len(m.Blocks), out))
	}
	return sc.Keep(m.Norm.Forward(h))
}

// forward runs the block over x; with rows set (the last layer of a pass
// that wants only those positions) the feed-forward runs on them alone and
// the block returns them.
func (b *qwen35Block) forward(x *tensor.Array, c kv.Cache, mask kv.Mask, rows *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	n := b.InNorm.Forward(x)
	var a *tensor.Array
	if b.Linear != nil {
		a = b.Linear.forwardRows(n, c)
	} else {
		a = b.Attn.forward(n, c, mask)
	}
	r := takeRows(tensor.Add(x, a), rows)
	n = b.PostNorm.Forward(r)
	var f *tensor.Array
	if b.MoE != nil {
		f = b.MoE.Forward(n)
		if b.Shared != nil {
			g := tensor.Sigmoid(b.SharedGate.Forward(n))
			f = tensor.Add(f, tensor.Mul(g, b.Shared.Forward(n)))
		}
	} else {
		f = b.MLP.Forward(n)
	}
	return sc.Keep(tensor.Add(r, f))
}

func (a *gatedAttn) forward(x *tensor.Array, c kv.Cache, mask kv.Mask) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	bs, t, hd := x.Dim(0), x.Dim(1), a.headDim
	qg := tensor.Reshape(a.Q.Forward(x), bs, t, a.heads, 2*hd)
	q := tensor.SliceAxis(qg, 3, 0, hd)
	gate := tensor.Reshape(tensor.SliceAxis(qg, 3, hd, 2*hd), bs, t, a.heads*hd)
	q = tensor.Transpose(a.QNorm.Forward(q), 0, 2, 1, 3)
	k := tensor.Transpose(a.KNorm.Forward(tensor.Reshape(a.K.Forward(x), bs, t, a.kvHeads, hd)), 0, 2, 1, 3)
	v := tensor.Transpose(tensor.Reshape(a.V.Forward(x), bs, t, a.kvHeads, hd), 0, 2, 1, 3)
	spans := kv.Spans(c, t)
	q = a.Rope.ApplySpans(q, spans)
	k = a.Rope.ApplySpans(k, spans)
	o := Attend(q, k, v, c, mask, a.scale)
	o = tensor.Reshape(tensor.Transpose(o, 0, 2, 1, 3), bs, t, a.heads*hd)
	o = tensor.Mul(o, tensor.Sigmoid(gate))
	return sc.Keep(a.O.Forward(o))
}

// forwardRows runs the layer on x [B, T, D] with its cache; a batched
// pass's view (kv.Rows) runs each row's tokens through that row's
// recurrent cache in turn.
func (n *deltaNet) forwardRows(x *tensor.Array, c kv.Cache) *tensor.Array {
	r, ok := c.(*kv.Rows)
	if !ok {
		var rc *kv.RecurrentCache
		if c != nil {
			if rc, ok = c.(*kv.RecurrentCache); !ok {
				panic(&tensor.Error{Op: "model.Forward", Err: fmt.Errorf("%w: a linear attention layer needs a *kv.RecurrentCache, got %T", tensor.ErrArgument, c)})
			}
		}
		return n.forward(x, rc)
	}
	sc := tensor.NewScope()
	defer sc.Close()
	spans := kv.Spans(c, x.Dim(1))
	parts := make([]*tensor.Array, len(spans))
	for i, s := range spans {
		rc, ok := r.Caches[i].(*kv.RecurrentCache)
		if !ok {
			panic(&tensor.Error{Op: "model.Forward", Err: fmt.Errorf("%w: a linear attention layer needs *kv.RecurrentCache rows, got %T", tensor.ErrArgument, r.Caches[i])})
		}
		parts[i] = n.forward(tensor.SliceAxis(x, 1, s.Start, s.Start+s.Len), rc)
	}
	return sc.Keep(tensor.Concatenate(parts, 1))
}

// forward runs the gated DeltaNet on x [B, T, D], reading and replacing
// the cache's conv history and state (nil: start from zeros, keep none).
func (n *deltaNet) forward(x *tensor.Array, c *kv.RecurrentCache) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	bs, t := x.Dim(0), x.Dim(1)
	r := n.vHeads / n.kHeads
	var qkv, z, beta, a *tensor.Array
	if n.next {
		// per key head: q, k, v (r value heads), z (r value heads); b, a likewise
		g := tensor.Reshape(n.QKVZ.Forward(x), bs, t, n.kHeads, 2*n.kDim+2*r*n.vDim)
		q := tensor.Reshape(tensor.SliceAxis(g, 3, 0, n.kDim), bs, t, n.keyWidth)
		k := tensor.Reshape(tensor.SliceAxis(g, 3, n.kDim, 2*n.kDim), bs, t, n.keyWidth)
		v := tensor.Reshape(tensor.SliceAxis(g, 3, 2*n.kDim, 2*n.kDim+r*n.vDim), bs, t, n.vHeads*n.vDim)
		z = tensor.Reshape(tensor.SliceAxis(g, 3, 2*n.kDim+r*n.vDim, 2*n.kDim+2*r*n.vDim), bs, t, n.vHeads, n.vDim)
		qkv = tensor.Concatenate([]*tensor.Array{q, k, v}, 2)
		ba := tensor.Reshape(n.BA.Forward(x), bs, t, n.kHeads, 2*r)
		beta = tensor.Reshape(tensor.SliceAxis(ba, 3, 0, r), bs, t, n.vHeads)
		a = tensor.Reshape(tensor.SliceAxis(ba, 3, r, 2*r), bs, t, n.vHeads)
	} else {
		qkv = n.QKV.Forward(x)
		z = tensor.Reshape(n.Z.Forward(x), bs, t, n.vHeads, n.vDim)
		beta = n.B.Forward(x)
		a = n.A.Forward(x)
	}
	// causal depthwise convolution over the history and the new inputs
	var hist *tensor.Array
	if c != nil && c.Conv() != nil {
		hist = c.Conv()
	} else {
		hist = tensor.FullOn(qkv.Backend(), []int{bs, n.kernel - 1, n.convWidth}, 0, qkv.DType())
	}
	in := tensor.Concatenate([]*tensor.Array{hist, qkv}, 1) // [B, K-1+T, C]
	w := n.Conv
	if w.DType() != in.DType() {
		w = tensor.AsType(w, in.DType())
	}
	var conv *tensor.Array
	for j := range n.kernel {
		term := tensor.Mul(tensor.SliceAxis(in, 1, j, j+t), tensor.SliceAxis(w, 0, j, j+1))
		if conv == nil {
			conv = term
		} else {
			conv = tensor.Add(conv, term)
		}
	}
	conv = tensor.Silu(conv)
	newHist := tensor.Contiguous(tensor.SliceAxis(in, 1, t, t+n.kernel-1))

	f32 := func(y *tensor.Array) *tensor.Array { return tensor.AsType(y, tensor.Float32) }
	q := tensor.Reshape(tensor.SliceAxis(conv, 2, 0, n.keyWidth), bs, t, n.kHeads, n.kDim)
	k := tensor.Reshape(tensor.SliceAxis(conv, 2, n.keyWidth, 2*n.keyWidth), bs, t, n.kHeads, n.kDim)
	v := tensor.Reshape(tensor.SliceAxis(conv, 2, 2*n.keyWidth, n.convWidth), bs, t, n.vHeads, n.vDim)
	if r > 1 { // value head h reads key head h / r
		rep := func(y *tensor.Array) *tensor.Array {
			y = tensor.BroadcastTo(tensor.ExpandDims(y, 3), bs, t, n.kHeads, r, n.kDim)
			return tensor.Reshape(y, bs, t, n.vHeads, n.kDim)
		}
		q, k = rep(q), rep(k)
	}
	l2 := func(y *tensor.Array) *tensor.Array {
		y = f32(y)
		return tensor.Mul(y, tensor.Rsqrt(tensor.AddScalar(tensor.Sum(tensor.Square(y), []int{-1}, true), 1e-6)))
	}
	q = tensor.MulScalar(l2(q), 1/math.Sqrt(float64(n.kDim)))
	k = l2(k)
	// per head: β = σ(b), decay g = −exp(A_log)·softplus(a + dt_bias)
	beta = tensor.Sigmoid(f32(beta))
	g := tensor.Mul(tensor.Neg(tensor.Exp(n.ALog)), tensor.Softplus(tensor.Add(f32(a), n.DtBias)))
	// [B, H, T, ·] for the recurrence
	tr := func(y *tensor.Array) *tensor.Array { return tensor.Transpose(y, 0, 2, 1, 3) }
	q, k = tr(q), tr(k)
	v = tr(f32(v))
	decay := tensor.Exp(tensor.Transpose(g, 0, 2, 1)) // [B, H, T]
	betaT := tensor.Transpose(beta, 0, 2, 1)
	var state *tensor.Array
	if c != nil && c.Recurrent() != nil {
		state = c.Recurrent()
	} else {
		state = tensor.FullOn(x.Backend(), []int{bs, n.vHeads, n.kDim, n.vDim}, 0, tensor.Float32)
	}
	// Through a cache the recurrence runs token by token whatever the
	// call's length: the state after each token is then the same function
	// of the tokens however a prompt is split into calls (prefill chunks, a
	// batch's token budget), which is what makes a batched row
	// bit-identical to its solo run; the chunked form rounds differently
	// at its chunk boundaries, and on the CPU backend it is no faster
	// (1024 tokens of the qwen3_5 fixture: 0.33 s chunked, 0.32 s token by
	// token). Without a cache the whole sequence is one call, and runs
	// chunked.
	var out *tensor.Array
	if t > 1 && c == nil {
		out, state = gatedDeltaChunked(q, k, v, tensor.Transpose(g, 0, 2, 1), betaT, state)
	} else {
		out, state = gatedDeltaRule(q, k, v, decay, betaT, state)
	}
	o := tensor.AsType(tensor.Transpose(out, 0, 2, 1, 3), x.DType()) // [B, T, H, Dv]
	// gated RMSNorm: norm(o)·w·silu(z)
	o = tensor.Mul(n.Norm.Forward(o), tensor.AsType(tensor.Silu(f32(z)), o.DType()))
	res := n.Out.Forward(tensor.Reshape(o, bs, t, n.vHeads*n.vDim))
	if c != nil {
		c.Update(newHist, state, t)
	}
	return sc.Keep(res)
}

// gatedDeltaRule runs the gated delta rule over T steps: q, k [B, H, T,
// Dk], v [B, H, T, Dv], decay and beta [B, H, T], state [B, H, Dk, Dv]
// (float32). Per step: S ← S·decay; S ← S + kᵀ((v − kS)·β); o = qS.
// It returns the outputs [B, H, T, Dv] and the final state, both in the
// current scope.
func gatedDeltaRule(q, k, v, decay, beta, state *tensor.Array) (*tensor.Array, *tensor.Array) {
	t := q.Dim(2)
	outs := make([]*tensor.Array, t)
	for i := range t {
		step := tensor.NewScope()
		qi := tensor.SliceAxis(q, 2, i, i+1) // [B, H, 1, Dk]
		ki := tensor.SliceAxis(k, 2, i, i+1)
		vi := tensor.SliceAxis(v, 2, i, i+1) // [B, H, 1, Dv]
		di := tensor.ExpandDims(tensor.SliceAxis(decay, 2, i, i+1), -1)
		bi := tensor.ExpandDims(tensor.SliceAxis(beta, 2, i, i+1), -1)
		s := tensor.Mul(state, di)
		mem := tensor.Matmul(ki, s) // [B, H, 1, Dv]
		delta := tensor.Mul(tensor.Sub(vi, mem), bi)
		s = tensor.Add(s, tensor.Mul(tensor.SwapAxes(ki, 2, 3), delta)) // kᵀ·δ: an outer product, by broadcast (no matmul packing)
		outs[i] = tensor.Matmul(qi, s)
		step.Keep(outs[i], s)
		step.Close()
		if i > 0 {
			state.Free() // ours; the first is the caller's
		}
		state = s
	}
	return tensor.Concatenate(outs, 2), state
}

// Logits implements Architecture.
func (m *Qwen35) Logits(h *tensor.Array) *tensor.Array { return m.Head.Forward(h) }

// MTPDepth implements MTPArchitecture.
func (m *Qwen35) MTPDepth() int { return len(m.MTPBlocks) }

// MakeMTPCaches implements MTPArchitecture: one attention cache per block.
func (m *Qwen35) MakeMTPCaches() []kv.Cache {
	out := make([]kv.Cache, len(m.MTPBlocks))
	for i := range out {
		out[i] = kv.NewKVCache()
	}
	return out
}

// MTPStep implements MTPArchitecture; out is the block's normed output
// (what the head reads, and what a chained step takes as hidden).
func (m *Qwen35) MTPStep(k int, hidden, next *tensor.Array, cache kv.Cache) (*tensor.Array, *tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	x := m.MTPFC.Forward(tensor.Concatenate([]*tensor.Array{m.MTPENorm.Forward(m.Embed.Forward(next)), m.MTPHNorm.Forward(hidden)}, -1))
	var caches []kv.Cache
	if cache != nil {
		caches = []kv.Cache{cache}
	}
	mask := LayerMask(caches, 0, x.Dim(1), 0, x.Backend())
	y := m.MTPNorm.Forward(m.MTPBlocks[k].forward(x, cache, mask, nil))
	return sc.Keep(y), sc.Keep(m.Head.Forward(y))
}

// deltaChunk is the chunk length of the chunked gated delta rule.
const deltaChunk = 64

// gatedDeltaChunked is gatedDeltaRule computed a chunk of tokens at a
// time (prefill): within a chunk the delta rule's updates are one
// unit-lower-triangular system, solved by forward substitution for every
// chunk at once, and the state passes between chunks in one step each,
// so a long prompt costs chunk-length sequential steps plus one per
// chunk instead of one per token. Same arguments as gatedDeltaRule
// except logDecay, the log of the per-step decay.
func gatedDeltaChunked(q, k, v, logDecay, beta, state *tensor.Array) (*tensor.Array, *tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	bs, h, t, dk, dv := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3), v.Dim(3)
	c := min(deltaChunk, t)
	tp := (t + c - 1) / c * c
	if tp != t { // zero keys and values, decay 1: no effect on the state
		pad := func(x *tensor.Array) *tensor.Array {
			s := append([]int(nil), x.Shape()...)
			s[2] = tp - t
			return tensor.Concatenate([]*tensor.Array{x, tensor.FullOn(x.Backend(), s, 0, x.DType())}, 2)
		}
		q, k, v, logDecay, beta = pad(q), pad(k), pad(v), pad(logDecay), pad(beta)
	}
	nc := tp / c
	chunks := func(x *tensor.Array) *tensor.Array { return tensor.Reshape(x, bs, h, nc, c, x.Dim(3)) }
	bcol := tensor.ExpandDims(beta, -1)
	vb, kb := chunks(tensor.Mul(v, bcol)), chunks(tensor.Mul(k, bcol))
	q, k = chunks(q), chunks(k)
	cum := tensor.Cumsum(tensor.Reshape(logDecay, bs, h, nc, c), -1, false, true) // [B, H, N, C]
	lower := make([]bool, c*c)
	strict := make([]bool, c*c)
	for i := range c {
		for j := range c {
			lower[i*c+j] = j <= i
			strict[i*c+j] = j < i
		}
	}
	be := q.Backend()
	lowerM := tensor.FromBytesOn(be, boolBytes(lower), []int{c, c}, tensor.Bool, false)
	strictM := tensor.FromBytesOn(be, boolBytes(strict), []int{c, c}, tensor.Bool, false)
	pair := tensor.Sub(tensor.ExpandDims(cum, -1), tensor.ExpandDims(cum, -2)) // cum_i − cum_j
	pairExp := tensor.WhereScalar(lowerM, tensor.Exp(tensor.WhereScalar(lowerM, pair, 0)), 0)
	kT := tensor.SwapAxes(k, 3, 4)
	ut := tensor.WhereScalar(strictM, tensor.Mul(tensor.Matmul(kb, kT), pairExp), 0)
	intra := tensor.Mul(tensor.Matmul(q, kT), pairExp)
	ecum := tensor.ExpandDims(tensor.Exp(cum), -1)
	rhs := tensor.Concatenate([]*tensor.Array{vb, tensor.Mul(kb, ecum)}, 4) // [B, H, N, C, Dv+Dk]
	// (I + L)·X = rhs, row by row
	rows := make([]*tensor.Array, c)
	rows[0] = tensor.SliceAxis(rhs, 3, 0, 1)
	for i := 1; i < c; i++ {
		prev := tensor.Concatenate(rows[:i], 3)                          // [.., i, W]
		li := tensor.SliceAxis(tensor.SliceAxis(ut, 3, i, i+1), 4, 0, i) // [.., 1, i]
		rows[i] = tensor.Sub(tensor.SliceAxis(rhs, 3, i, i+1), tensor.Matmul(li, prev))
	}
	x := tensor.Concatenate(rows, 3)
	newV, kCum := tensor.SliceAxis(x, 4, 0, dv), tensor.SliceAxis(x, 4, dv, dv+dk)
	qd := tensor.Mul(q, ecum)
	last := tensor.SliceAxis(cum, 3, c-1, c)
	kd := tensor.Mul(k, tensor.ExpandDims(tensor.Exp(tensor.Sub(last, cum)), -1))
	chunkDecay := tensor.ExpandDims(tensor.Exp(last), -1) // [B, H, N, 1, 1]
	outs := make([]*tensor.Array, nc)
	at := func(a *tensor.Array, n int) *tensor.Array { return tensor.Squeeze(tensor.SliceAxis(a, 2, n, n+1), 2) }
	for n := range nc {
		vn := tensor.Sub(at(newV, n), tensor.Matmul(at(kCum, n), state))
		outs[n] = tensor.Add(tensor.Matmul(at(qd, n), state), tensor.Matmul(at(intra, n), vn))
		state = tensor.Add(tensor.Mul(state, at(chunkDecay, n)), tensor.Matmul(tensor.SwapAxes(at(kd, n), 2, 3), vn))
	}
	out := tensor.SliceAxis(tensor.Concatenate(outs, 2), 2, 0, t)
	sc.Keep(out, state)
	return out, state
}

func boolBytes(v []bool) []byte {
	out := make([]byte, len(v))
	for i, b := range v {
		if b {
			out[i] = 1
		}
	}
	return out
}
