package model

import (
	"fmt"
	"math"
	"strconv"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

func init() {
	Register(Arch{
		Name:          "deepseek_v3",
		ModelTypes:    []string{"deepseek_v3"},
		Architectures: []string{"DeepseekV3ForCausalLM"},
		New:           newMLA,
	})
	Register(Arch{
		Name:          "glm_moe_dsa",
		ModelTypes:    []string{"glm_moe_dsa"},
		Architectures: []string{"GlmMoeDsaForCausalLM"},
		New:           newMLA,
	})
}

// mlaConfig holds the config.json fields of DeepSeek-V3 and GLM-5 (glm_moe_dsa).
type mlaConfig struct {
	ModelType      string   `json:"model_type"`
	Hidden         int      `json:"hidden_size"`
	Layers         int      `json:"num_hidden_layers"`
	Intermediate   int      `json:"intermediate_size"`
	MoEInter       int      `json:"moe_intermediate_size"`
	Heads          int      `json:"num_attention_heads"`
	Vocab          int      `json:"vocab_size"`
	MaxPos         int      `json:"max_position_embeddings"`
	Eps            float32  `json:"rms_norm_eps"`
	QLoRA          int      `json:"q_lora_rank"`
	KVLoRA         int      `json:"kv_lora_rank"`
	RopeDim        int      `json:"qk_rope_head_dim"`
	NopeDim        int      `json:"qk_nope_head_dim"`
	VDim           int      `json:"v_head_dim"`
	Routed         int      `json:"n_routed_experts"`
	Shared         int      `json:"n_shared_experts"`
	TopK           int      `json:"num_experts_per_tok"`
	Groups         int      `json:"n_group"`
	TopKGroup      int      `json:"topk_group"`
	NormTopK       bool     `json:"norm_topk_prob"`
	RoutedScale    float64  `json:"routed_scaling_factor"`
	FirstDense     int      `json:"first_k_dense_replace"`
	MoEFreq        int      `json:"moe_layer_freq"`
	MLPLayerTypes  []string `json:"mlp_layer_types"`
	RopeInterleave *bool    `json:"rope_interleave"`
	IndexTopK      int      `json:"index_topk"`
	IndexHeads     int      `json:"index_n_heads"`
	IndexDim       int      `json:"index_head_dim"`
	IndexerTypes   []string `json:"indexer_types"`
	AttentionBias  bool     `json:"attention_bias"`
}

// MLA is a DeepSeek-V3-style decoder: multi-head latent attention (the
// queries through a low-rank projection, keys and values from a shared
// compressed latent of kv_lora_rank values plus a qk_rope_head_dim rotary
// key per token, which is all the cache holds), attention computed in the
// latent space (the key and value up-projections absorbed into the
// query and the output), dense first layers and then a MoE of routed
// experts with sigmoid scores, a correction bias for selection,
// group-limited routing and a routed scaling factor, beside shared
// experts. GLM-5 (glm_moe_dsa) adds DeepSeek Sparse Attention: an
// indexer scores every cached token per query and each query attends to
// its index_topk best.
type MLA struct {
	cfg    mlaConfig
	eos    []int
	dtype  tensor.DType
	Embed  *Embedding
	Blocks []*mlaBlock
	Norm   *RMSNorm
	Head   Projection
	// MTPBlocks are the checkpoint's multi-token-prediction blocks
	// (num_nextn_predict_layers; none when the checkpoint has dropped them).
	MTPBlocks []*mlaMTP
}

// mlaMTP is one DeepSeek-V3 / GLM multi-token-prediction block: the
// embedding of the next token and the model's hidden state, each
// RMS-normed, concatenated (embedding first) and projected back to the
// hidden size, then one decoder layer with its own cache, then a norm and
// the head (the block's own copies of the embedding and head where the
// checkpoint stores them, else the model's).
type mlaMTP struct {
	ENorm, HNorm, OutNorm *RMSNorm
	Proj                  Projection
	Embed                 *Embedding
	Head                  Projection
	Block                 *mlaBlock
}

type mlaBlock struct {
	InNorm, PostNorm *RMSNorm
	Attn             *mlaAttn
	MLP              *MLP // dense layers and the shared experts
	MoE              *mlaMoE
}

type mlaAttn struct {
	heads, nope, rope, vdim, rank int
	scale                         float32
	QA, QB, Q                     Projection // QA+QB with a q LoRA, else Q
	QANorm, KVANorm               *RMSNorm
	KVA, O                        Projection
	WK, WV                        *tensor.Array // kv_b_proj split per head: [H, nope, rank], [H, rank, vdim]
	// WKq, WVq: a quantized kv_b_proj split per head as stored, packed
	// along rank ([H, nope, ·], [H, vdim, ·]); WK and WV are then nil
	WKq, WVq   *packedHeads
	Rope       *ropeSpec
	Index      *dsaIndexer // nil without DSA
	shareIndex bool        // reuse the previous layer's selection
}

// packedHeads is one affine-quantized weight per head, [H, rows, ·].
type packedHeads struct {
	Weight, Scales, Biases *tensor.Array
	tensor.QuantSpec
}

// dsaIndexer is DeepSeek Sparse Attention's lightning indexer.
type dsaIndexer struct {
	heads, dim, topK int
	WQ, WK, Weights  Projection
	KNorm            *LayerNormBias
	Rope             *ropeSpec
}

type mlaMoE struct {
	Router       Projection
	Bias         *tensor.Array // e_score_correction_bias [E] float32
	Experts      *SwitchGLU
	Shared       *MLP
	topK, groups int
	topKGroup    int
	norm         bool
	scale        float64
}

func newMLA(c *Config, w *Weights) (Architecture, error) {
	cfg := mlaConfig{Eps: 1e-6, Groups: 1, TopKGroup: 1, RoutedScale: 1, MoEFreq: 1}
	if err := c.Decode(&cfg); err != nil {
		return nil, err
	}
	if cfg.Hidden <= 0 || cfg.Layers <= 0 || cfg.Heads <= 0 || cfg.Vocab <= 0 || cfg.KVLoRA <= 0 || cfg.RopeDim <= 0 {
		return nil, fmt.Errorf("%w: config.json: hidden_size %d, num_hidden_layers %d, num_attention_heads %d, vocab_size %d, kv_lora_rank %d, qk_rope_head_dim %d", ErrCheckpoint, cfg.Hidden, cfg.Layers, cfg.Heads, cfg.Vocab, cfg.KVLoRA, cfg.RopeDim)
	}
	if cfg.Routed > 0 && (cfg.Groups <= 0 || cfg.Routed%cfg.Groups != 0 || cfg.TopKGroup > cfg.Groups) {
		return nil, fmt.Errorf("%w: config.json: %d experts in %d groups, top %d groups", ErrCheckpoint, cfg.Routed, cfg.Groups, cfg.TopKGroup)
	}
	dsa := cfg.ModelType == "glm_moe_dsa"
	interleave := dsa || cfg.RopeInterleave == nil || *cfg.RopeInterleave
	ropes, err := genericRopes(c, &genericConfig{}, 10000)
	if err != nil {
		return nil, err
	}
	rf := ropes[""]
	maxPos := max(cfg.MaxPos, 1)
	rope, err := newRopeSpec(w, rf.p, rf.ex, cfg.RopeDim, cfg.RopeDim, maxPos, interleave)
	if err != nil {
		return nil, err
	}
	qd := cfg.NopeDim + cfg.RopeDim
	scale := 1 / math.Sqrt(float64(qd))
	if rf.p.Type != "default" && rf.ex.MscaleAllDim != 0 && rf.p.Factor > 1 { // yarn's softmax correction
		ms := 0.1*rf.ex.MscaleAllDim*math.Log(rf.p.Factor) + 1
		scale *= ms * ms
	}
	m := &MLA{cfg: cfg, eos: c.EOS}
	d := cfg.Hidden
	m.Embed = w.Embedding("embed_tokens", cfg.Vocab, d)
	m.dtype = m.Embed.DType
	block := func(i int) (*mlaBlock, error) {
		p := "layers." + strconv.Itoa(i) + "."
		b := &mlaBlock{InNorm: w.RMSNorm(p+"input_layernorm", d, cfg.Eps), PostNorm: w.RMSNorm(p+"post_attention_layernorm", d, cfg.Eps)}
		a := &mlaAttn{heads: cfg.Heads, nope: cfg.NopeDim, rope: cfg.RopeDim, vdim: cfg.VDim, rank: cfg.KVLoRA, scale: float32(scale), Rope: rope}
		sa := p + "self_attn."
		if cfg.QLoRA > 0 {
			a.QA = w.Linear(sa+"q_a_proj", d, cfg.QLoRA, cfg.AttentionBias)
			a.QANorm = w.RMSNorm(sa+"q_a_layernorm", cfg.QLoRA, 1e-6)
			a.QB = w.Linear(sa+"q_b_proj", cfg.QLoRA, cfg.Heads*qd, false)
		} else {
			a.Q = w.Linear(sa+"q_proj", d, cfg.Heads*qd, false)
		}
		a.KVA = w.Linear(sa+"kv_a_proj_with_mqa", d, cfg.KVLoRA+cfg.RopeDim, cfg.AttentionBias)
		a.KVANorm = w.RMSNorm(sa+"kv_a_layernorm", cfg.KVLoRA, 1e-6)
		a.WK, a.WV, a.WKq, a.WVq = absorbKVB(w, sa+"kv_b_proj", cfg)
		a.O = w.Linear(sa+"o_proj", cfg.Heads*cfg.VDim, d, cfg.AttentionBias)
		if dsa {
			if cfg.QLoRA <= 0 || cfg.IndexHeads <= 0 || cfg.IndexDim < cfg.RopeDim || cfg.IndexTopK <= 0 {
				return nil, fmt.Errorf("%w: config.json: DSA indexer with q_lora_rank %d, %d heads of %d, top %d", ErrCheckpoint, cfg.QLoRA, cfg.IndexHeads, cfg.IndexDim, cfg.IndexTopK)
			}
			kind := "full"
			if i < len(cfg.IndexerTypes) {
				kind = cfg.IndexerTypes[i]
			}
			switch {
			case kind == "shared" && i > 0:
				a.shareIndex = true
			case kind == "full" || kind == "shared":
				ir, err := newRopeSpec(w, rf.p, rf.ex, cfg.RopeDim, cfg.IndexDim, maxPos, true)
				if err != nil {
					return nil, err
				}
				ip := sa + "indexer."
				a.Index = &dsaIndexer{heads: cfg.IndexHeads, dim: cfg.IndexDim, topK: cfg.IndexTopK, Rope: ir,
					WQ:      w.Linear(ip+"wq_b", cfg.QLoRA, cfg.IndexHeads*cfg.IndexDim, false),
					WK:      w.Linear(ip+"wk", d, cfg.IndexDim, false),
					Weights: w.Linear(ip+"weights_proj", d, cfg.IndexHeads, false),
					KNorm:   &LayerNormBias{Weight: w.Tensor(ip+"k_norm.weight", cfg.IndexDim), Bias: w.Tensor(ip+"k_norm.bias", cfg.IndexDim), Eps: 1e-6},
				}
			default:
				return nil, fmt.Errorf("%w: config.json: indexer type %q at layer %d", ErrUnsupported, kind, i)
			}
		}
		b.Attn = a
		sparse := cfg.Routed > 0 && i >= cfg.FirstDense && i%max(cfg.MoEFreq, 1) == 0
		if i < len(cfg.MLPLayerTypes) {
			sparse = cfg.MLPLayerTypes[i] == "sparse"
		}
		if sparse {
			sm := w.SparseMoE(p+"mlp", d, cfg.MoEInter, cfg.Routed, cfg.TopK, cfg.NormTopK)
			mo := &mlaMoE{Router: sm.Router, Experts: sm.Experts, topK: cfg.TopK, groups: cfg.Groups, topKGroup: cfg.TopKGroup, norm: cfg.NormTopK, scale: cfg.RoutedScale}
			bias := w.Tensor(p+"mlp.gate.e_score_correction_bias", cfg.Routed)
			mo.Bias = w.Own(tensor.WithScope(func() []*tensor.Array { return []*tensor.Array{tensor.AsType(bias, tensor.Float32)} })[0])
			if cfg.Shared > 0 {
				mo.Shared = w.MLP(p+"mlp.shared_experts", d, cfg.MoEInter*cfg.Shared)
			}
			b.MoE = mo
		} else {
			b.MLP = w.MLP(p+"mlp", d, cfg.Intermediate)
		}
		return b, nil
	}
	for i := range cfg.Layers {
		b, err := block(i)
		if err != nil {
			return nil, err
		}
		m.Blocks = append(m.Blocks, b)
	}
	m.Norm = w.RMSNorm("norm", d, cfg.Eps)
	if w.Has("lm_head.weight") || w.Has("lm_head.scales") {
		m.Head = w.Linear("lm_head", d, cfg.Vocab, false)
	} else {
		m.Head = w.TiedHead("embed_tokens", m.Embed)
	}
	// multi-token prediction: the blocks after the last layer
	for k := 0; ; k++ {
		i := cfg.Layers + k
		p := "layers." + strconv.Itoa(i) + "."
		if !w.Has(p+"eh_proj.weight") && !w.Has(p+"eh_proj.scales") {
			break
		}
		b, err := block(i)
		if err != nil {
			return nil, err
		}
		mt := &mlaMTP{Block: b, Embed: m.Embed, Head: m.Head,
			ENorm: w.RMSNorm(p+"enorm", d, cfg.Eps), HNorm: w.RMSNorm(p+"hnorm", d, cfg.Eps),
			Proj:    w.Linear(p+"eh_proj", 2*d, d, false),
			OutNorm: w.RMSNorm(p+"shared_head.norm", d, cfg.Eps)}
		if w.Has(p+"embed_tokens.weight") || w.Has(p+"embed_tokens.scales") {
			mt.Embed = w.Embedding(p+"embed_tokens", cfg.Vocab, d)
		}
		if w.Has(p+"shared_head.head.weight") || w.Has(p+"shared_head.head.scales") {
			mt.Head = w.Linear(p+"shared_head.head", d, cfg.Vocab, false)
		}
		m.MTPBlocks = append(m.MTPBlocks, mt)
	}
	if err := auditWeights(w, cfg.ModelType); err != nil {
		return nil, err
	}
	return m, nil
}

// absorbKVB loads kv_b_proj ([H·(nope+v), rank]) as the per-head key and
// value up-projections attention absorbs: float [H, nope, rank] and
// [H, rank, v], or, quantized, its packed rows split per head as stored
// (the quantized matmul reads the key part untransposed and the value part
// transposed, so neither is dequantized).
func absorbKVB(w *Weights, name string, cfg mlaConfig) (wk, wv *tensor.Array, wkq, wvq *packedHeads) {
	p := w.Linear(name, cfg.KVLoRA, cfg.Heads*(cfg.NopeDim+cfg.VDim), false)
	l, ok := p.(*Linear)
	if !ok {
		fail(fmt.Errorf("%w: %s: a wrapped kv_b_proj cannot be absorbed", ErrUnsupported, name))
	}
	h, nope, vd := cfg.Heads, cfg.NopeDim, cfg.VDim
	if l.Scales != nil {
		wkq, wvq = splitPackedKVB(l, h, nope, vd)
		for _, a := range []*tensor.Array{wkq.Weight, wkq.Scales, wkq.Biases, wvq.Weight, wvq.Scales, wvq.Biases} {
			w.Own(a)
		}
		return nil, nil, wkq, wvq
	}
	out := tensor.WithScope(func() []*tensor.Array {
		wt := tensor.Reshape(l.Weight, h, nope+vd, cfg.KVLoRA)
		k := tensor.Contiguous(tensor.SliceAxis(wt, 1, 0, nope))
		v := tensor.Contiguous(tensor.SwapAxes(tensor.SliceAxis(wt, 1, nope, nope+vd), 1, 2))
		return []*tensor.Array{k, v}
	})
	return w.Own(out[0]), w.Own(out[1]), nil, nil
}

// splitPackedKVB splits a quantized kv_b_proj's packed rows per head into
// the key part [H, nope, ·] and the value part [H, vd, ·] (arrays in the
// caller's scope's parent).
func splitPackedKVB(l *Linear, h, nope, vd int) (*packedHeads, *packedHeads) {
	split := func(a *tensor.Array) (*tensor.Array, *tensor.Array) {
		r := tensor.Reshape(a, h, nope+vd, a.Dim(-1))
		return tensor.Contiguous(tensor.SliceAxis(r, 1, 0, nope)), tensor.Contiguous(tensor.SliceAxis(r, 1, nope, nope+vd))
	}
	out := tensor.WithScope(func() []*tensor.Array {
		kw, vw := split(l.Weight)
		ks, vs := split(l.Scales)
		kb, vb := split(l.Biases)
		return []*tensor.Array{kw, ks, kb, vw, vs, vb}
	})
	return &packedHeads{out[0], out[1], out[2], l.QuantSpec}, &packedHeads{out[3], out[4], out[5], l.QuantSpec}
}

// Info implements Architecture.
func (m *MLA) Info() Info {
	return Info{ModelType: m.cfg.ModelType, Vocab: m.cfg.Vocab, Hidden: m.cfg.Hidden, Layers: m.cfg.Layers, EOS: m.eos, DType: m.dtype}
}

// MakeCaches implements Architecture: one growing cache per layer holding
// the compressed latent as values and the rotary key (with DSA, the
// indexer's key beside it) as keys — one head, per token.
func (m *MLA) MakeCaches() []kv.Cache {
	out := make([]kv.Cache, len(m.Blocks))
	for i := range out {
		out[i] = kv.NewKVCache()
	}
	return out
}

// Forward implements Architecture.
func (m *MLA) Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	t := ids.Dim(1)
	h := EmbedInputs(m.Embed, ids, opts)
	mask := LayerMask(caches, 0, t, 0, h.Backend())
	var sel []*tensor.Array // the last DSA selection, per row
	out := outputRows(opts, t, h.Backend())
	for i, b := range m.Blocks {
		var c kv.Cache
		if caches != nil {
			c = caches[i]
		}
		h, sel = b.forward(h, c, mask, sel, lastRows(i, len(m.Blocks), out))
	}
	return sc.Keep(m.Norm.Forward(h))
}

// forward runs the block over x; with rows set (the last layer of a pass
// that wants only those positions) the feed-forward runs on them alone and
// the block returns them.
func (b *mlaBlock) forward(x *tensor.Array, c kv.Cache, mask kv.Mask, sel []*tensor.Array, rows *tensor.Array) (*tensor.Array, []*tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	a, sel := b.Attn.forwardRows(b.InNorm.Forward(x), c, mask, sel)
	r := takeRows(tensor.Add(x, a), rows)
	n := b.PostNorm.Forward(r)
	var f *tensor.Array
	if b.MoE != nil {
		f = b.MoE.forward(n)
	} else {
		f = b.MLP.Forward(n)
	}
	out := tensor.Add(r, f)
	sc.Keep(out)
	keepSome(sc, sel)
	return out, sel
}

// forwardRows runs attention over x with cache c; a batched pass's rows
// (kv.Rows) each attend through their own cache and mask.
func (a *mlaAttn) forwardRows(x *tensor.Array, c kv.Cache, mask kv.Mask, sel []*tensor.Array) (*tensor.Array, []*tensor.Array) {
	r, ok := c.(*kv.Rows)
	if !ok {
		var prev *tensor.Array
		if len(sel) > 0 {
			prev = sel[0]
		}
		o, s := a.forward(x, c, mask, prev)
		return o, []*tensor.Array{s}
	}
	sc := tensor.NewScope()
	defer sc.Close()
	spans := kv.Spans(c, x.Dim(1))
	parts := make([]*tensor.Array, len(spans))
	outSel := make([]*tensor.Array, len(spans))
	for i, s := range spans {
		var prev *tensor.Array
		if i < len(sel) {
			prev = sel[i]
		}
		parts[i], outSel[i] = a.forward(tensor.SliceAxis(x, 1, s.Start, s.Start+s.Len), r.Caches[i], mask.Rows[i], prev)
	}
	out := tensor.Concatenate(parts, 1)
	sc.Keep(out)
	keepSome(sc, outSel)
	return out, outSel
}

// forward is latent attention of x [B, T, D] through cache c (nil: x
// alone) with the causal mask the cache prescribed. It returns the output
// and, with DSA, the selection mask it used [B, 1, T, keys] (prev is the
// previous layer's, for layers that share it).
func (a *mlaAttn) forward(x *tensor.Array, c kv.Cache, mask kv.Mask, prev *tensor.Array) (*tensor.Array, *tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	bs, t := x.Dim(0), x.Dim(1)
	var q, qr *tensor.Array
	if a.QA != nil {
		qr = a.QANorm.Forward(a.QA.Forward(x))
		q = a.QB.Forward(qr)
	} else {
		q = a.Q.Forward(x)
	}
	q = tensor.Transpose(tensor.Reshape(q, bs, t, a.heads, a.nope+a.rope), 0, 2, 1, 3)
	qNope := tensor.SliceAxis(q, 3, 0, a.nope)
	qRot := tensor.SliceAxis(q, 3, a.nope, a.nope+a.rope)
	ckv := a.KVA.Forward(x)
	lat := tensor.Reshape(a.KVANorm.Forward(tensor.SliceAxis(ckv, 2, 0, a.rank)), bs, 1, t, a.rank)
	kRot := tensor.Reshape(tensor.SliceAxis(ckv, 2, a.rank, a.rank+a.rope), bs, 1, t, a.rope)
	spans := kv.Spans(c, t)
	qRot = a.Rope.applySpans(qRot, spans)
	kRot = a.Rope.applySpans(kRot, spans)
	keys := kRot
	var iq *tensor.Array
	if ix := a.Index; ix != nil {
		iq = tensor.Transpose(tensor.Reshape(ix.WQ.Forward(qr), bs, t, ix.heads, ix.dim), 0, 2, 1, 3)
		iq = ix.Rope.applySpans(iq, spans)
		ik := tensor.Reshape(ix.KNorm.Forward(ix.WK.Forward(x)), bs, 1, t, ix.dim)
		keys = tensor.Concatenate([]*tensor.Array{kRot, ix.Rope.applySpans(ik, spans)}, 3)
	}
	allKeys, allLat := keys, lat
	if c != nil {
		got := c.UpdateAndFetch(keys, lat)
		if got.Paged != nil && got.Paged.InOrder() {
			if _, _, q := got.Paged.Quantized(); !q {
				parts := got.Paged.Gather() // [1, 1, n, ·]: the latent cache is one head
				got.Keys, got.Values = parts[0], parts[1]
			}
		}
		if got.Keys == nil {
			panic(&tensor.Error{Op: "model.Forward", Err: fmt.Errorf("%w: latent attention needs a plain cache, got %T", tensor.ErrArgument, c)})
		}
		allKeys, allLat = got.Keys, got.Values
	}
	n := allKeys.Dim(2)
	sel := prev
	if a.Index != nil {
		sel = a.Index.selection(x, iq, tensor.SliceAxis(allKeys, 3, a.rope, a.rope+a.Index.dim), n-t)
	}
	opts := mask.Options(a.scale)
	if sel != nil {
		opts.MaskKind, opts.Mask = tensor.MaskArray, sel
	}
	// absorbed attention in the latent space: scores = (q_nope·W_k)·latᵀ + q_rot·k_rotᵀ
	var qLat *tensor.Array
	if q := a.WKq; q != nil {
		qLat = tensor.QuantizedMatmul(qNope, q.Weight, q.Scales, q.Biases, false, q.GroupSize, q.Bits)
	} else {
		qLat = tensor.Matmul(qNope, a.WK)
	}
	qq := tensor.Concatenate([]*tensor.Array{qLat, qRot}, 3)
	kk := tensor.Concatenate([]*tensor.Array{allLat, tensor.SliceAxis(allKeys, 3, 0, a.rope)}, 3)
	if qq.DType() != kk.DType() {
		kk = tensor.AsType(kk, qq.DType())
	}
	o := tensor.ScaledDotProductAttention(qq, kk, allLat, opts) // [B, H, T, rank]
	if q := a.WVq; q != nil {                                   // [B, H, T, v]
		o = tensor.QuantizedMatmul(o, q.Weight, q.Scales, q.Biases, true, q.GroupSize, q.Bits)
	} else {
		o = tensor.Matmul(o, a.WV)
	}
	o = tensor.Reshape(tensor.Transpose(o, 0, 2, 1, 3), bs, t, a.heads*a.vdim)
	out := a.O.Forward(o)
	sc.Keep(out)
	if sel != nil && sel != prev {
		sc.Keep(sel)
	}
	return out, sel
}

// selection returns DSA's attention mask [B, 1, T, keys] for queries at
// positions off.. : each query attends to the causal keys among its topK
// best by the indexer's score Σ_h w_h·relu(q_h·k/√dim), chosen as HF's
// torch.topk chooses them over the row with the future keys at float32's
// lowest value: the scores tie exactly (every head's ReLU zero, and the
// masked keys), and torch's CPU order among ties decides which tied keys
// make the cut (torchTopK). The scores come to the host for it.
func (ix *dsaIndexer) selection(x, iq, ik *tensor.Array, off int) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	bs, t, n := x.Dim(0), x.Dim(1), ik.Dim(2)
	raw := make([]byte, t*n)
	for i := range t {
		for j := range n {
			if j <= off+i {
				raw[i*n+j] = 1
			}
		}
	}
	causal := tensor.FromBytesOn(x.Backend(), raw, []int{t, n}, tensor.Bool, false)
	if ix.topK >= n {
		return sc.Keep(tensor.BroadcastTo(tensor.Reshape(causal, 1, 1, t, n), bs, 1, t, n))
	}
	dots := tensor.Matmul(tensor.AsType(iq, tensor.Float32), tensor.SwapAxes(tensor.AsType(ik, tensor.Float32), 2, 3)) // [B, Hi, T, n]
	scores := tensor.MaximumScalar(tensor.MulScalar(dots, 1/math.Sqrt(float64(ix.dim))), 0)
	wts := tensor.MulScalar(tensor.AsType(ix.Weights.Forward(x), tensor.Float32), 1/math.Sqrt(float64(ix.heads))) // [B, T, Hi]
	wts = tensor.ExpandDims(tensor.Transpose(wts, 0, 2, 1), -1)                                                   // [B, Hi, T, 1]
	index := tensor.Sum(tensor.Mul(scores, wts), []int{1}, false)                                                 // [B, T, n]
	index = tensor.WhereScalar(causal, index, -math.MaxFloat32)
	host := index.Float32s()
	picked := make([]byte, bs*t*n)
	for r := range bs * t {
		row := host[r*n : (r+1)*n]
		base := r * n
		i := r % t
		for _, j := range torchTopK(row, ix.topK) {
			if j <= off+i {
				picked[base+j] = 1
			}
		}
	}
	return sc.Keep(tensor.FromBytesOn(x.Backend(), picked, []int{bs, 1, t, n}, tensor.Bool, false))
}

// forward routes x [B, T, D]: sigmoid scores plus the correction bias
// choose the topKGroup groups (by the sum of each group's two best) and
// then the topK experts within them; the unbiased scores, renormalised
// when norm and times scale, weigh the experts; the shared experts add.
func (m *mlaMoE) forward(x *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	scores := tensor.Sigmoid(tensor.AsType(m.Router.Forward(x), tensor.Float32)) // [B, T, E]
	choice := tensor.Add(scores, m.Bias)
	e := choice.Dim(-1)
	if m.groups > 1 && m.topKGroup < m.groups {
		lead := choice.Shape()[:choice.NDim()-1]
		gs := append(append([]int(nil), lead...), m.groups, e/m.groups)
		grouped := tensor.Reshape(choice, gs...)
		best, _ := tensor.TopK(grouped, min(2, e/m.groups), -1)
		gScore := tensor.Sum(best, []int{-1}, false) // [B, T, G]
		_, gTop := tensor.TopK(gScore, m.topKGroup, -1)
		keep := tensor.PutAlongAxis(tensor.FullOn(x.Backend(), gScore.Shape(), 0, tensor.Bool), gTop, tensor.FullOn(x.Backend(), []int{1}, 1, tensor.Bool), -1)
		keepE := tensor.Reshape(tensor.BroadcastTo(tensor.ExpandDims(keep, -1), gs...), choice.Shape()...)
		choice = tensor.WhereScalar(keepE, choice, math.Inf(-1))
	}
	_, inds := tensor.TopK(choice, m.topK, -1)
	wts := tensor.TakeAlongAxis(scores, inds, -1)
	if m.norm {
		wts = tensor.Div(wts, tensor.AddScalar(tensor.Sum(wts, []int{-1}, true), 1e-20))
	}
	wts = tensor.MulScalar(wts, m.scale)
	y := m.Experts.Forward(x, inds) // [B, T, k, D]
	out := tensor.Sum(tensor.Mul(y, tensor.ExpandDims(tensor.AsType(wts, y.DType()), -1)), []int{-2}, false)
	if m.Shared != nil {
		out = tensor.Add(out, m.Shared.Forward(x))
	}
	return sc.Keep(out)
}

// keepSome keeps the non-nil arrays of a in sc's parent.
func keepSome(sc *tensor.Scope, a []*tensor.Array) {
	for _, x := range a {
		if x != nil {
			sc.Keep(x)
		}
	}
}

// Logits implements Architecture.
func (m *MLA) Logits(h *tensor.Array) *tensor.Array { return m.Head.Forward(h) }

// MTPDepth implements MTPArchitecture.
func (m *MLA) MTPDepth() int { return len(m.MTPBlocks) }

// MakeMTPCaches implements MTPArchitecture: one latent cache per block.
func (m *MLA) MakeMTPCaches() []kv.Cache {
	out := make([]kv.Cache, len(m.MTPBlocks))
	for i := range out {
		out[i] = kv.NewKVCache()
	}
	return out
}

// MTPStep implements MTPArchitecture.
func (m *MLA) MTPStep(k int, hidden, next *tensor.Array, cache kv.Cache) (*tensor.Array, *tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	b := m.MTPBlocks[k]
	x := b.Proj.Forward(tensor.Concatenate([]*tensor.Array{b.ENorm.Forward(b.Embed.Forward(next)), b.HNorm.Forward(hidden)}, -1))
	var caches []kv.Cache
	if cache != nil {
		caches = []kv.Cache{cache}
	}
	mask := LayerMask(caches, 0, x.Dim(1), 0, x.Backend())
	y, _ := b.Block.forward(x, cache, mask, nil, nil)
	logits := b.Head.Forward(b.OutNorm.Forward(y))
	return sc.Keep(y), sc.Keep(logits)
}
