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
		Name:          "gemma4",
		ModelTypes:    []string{"gemma4", "gemma4_text"},
		Architectures: []string{"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"},
		New:           newGemma4,
	})
}

// Gemma4 is the Gemma 4 text decoder (transformers' Gemma4ForCausalLM, or
// the language model of Gemma4ForConditionalGeneration): sliding and full
// attention layers with their own head sizes and rotary embeddings, q/k
// norms and a weightless v norm, attention scale 1, sandwich norms around
// attention and feed-forward, and optionally per-layer input embeddings,
// KV sharing over the last layers, a MoE block beside the dense MLP, and a
// softcapped head tied to the embeddings.
type Gemma4 struct {
	cfg        *gemma4Config
	eos        []int
	dtype      tensor.DType
	embedScale float64
	Embed      *Embedding
	PLE        *gemma4PLE // nil without per-layer inputs
	Blocks     []*gemma4Block
	Norm       *RMSNorm
	Head       Projection // the lm_head, or the embedding table as a *TiedHead
}

// gemma4Block is one decoder layer.
type gemma4Block struct {
	spec                  gemma4Layer
	heads                 int
	InNorm, PostAttnNorm  *RMSNorm
	PreFFNorm, PostFFNorm *RMSNorm
	Q, K, V, O            Projection // K and V nil for shared layers; V nil when k_eq_v
	QNorm, KNorm, VNorm   *RMSNorm
	Rope                  *Rope
	MLP                   *MLP
	MoE                   *gemma4MoE // nil without a MoE block
	PLEGate, PLEProj      Projection // nil without per-layer inputs
	PLENorm               *RMSNorm
	Scalar                *tensor.Array // [1] in the activation dtype, or nil
	window                int           // attention window (0: full)
	attnScale             float32
	activation            func(*tensor.Array) *tensor.Array
}

func newGemma4(c *Config, w *Weights) (Architecture, error) {
	cfg, err := parseGemma4Config(c)
	if err != nil {
		return nil, err
	}
	act := tensor.GeluApprox
	if cfg.Activation == "gelu" {
		act = tensor.Gelu
	}
	m := &Gemma4{cfg: cfg, eos: c.EOS}
	if len(m.eos) == 0 {
		m.eos = []int{1}
	}
	d, eps := cfg.Hidden, cfg.Eps
	m.Embed = w.Embedding("embed_tokens", cfg.Vocab, d)
	m.dtype = m.Embed.DType
	m.embedScale = roundTo(math.Sqrt(float64(d)), m.dtype)
	if p := cfg.perLayerHidden(); p > 0 {
		m.PLE = &gemma4PLE{
			Embed:      w.Embedding("embed_tokens_per_layer", cfg.PerLayerVocab, cfg.Layers*p),
			embedScale: roundTo(math.Sqrt(float64(p)), m.dtype),
			Proj:       w.Linear("per_layer_model_projection", d, cfg.Layers*p, false),
			projScale:  1 / math.Sqrt(float64(d)),
			Norm:       w.RMSNorm("per_layer_projection_norm", p, eps),
			layers:     cfg.Layers,
			width:      p,
		}
	}
	ropes := map[string]*Rope{}
	for i := range cfg.Layers {
		spec := cfg.layer(i)
		p := "layers." + strconv.Itoa(i) + "."
		hd := spec.HeadDim
		b := &gemma4Block{
			spec: spec, heads: cfg.Heads, attnScale: 1, activation: act,
			InNorm:       w.RMSNorm(p+"input_layernorm", d, eps),
			PostAttnNorm: w.RMSNorm(p+"post_attention_layernorm", d, eps),
			PreFFNorm:    w.RMSNorm(p+"pre_feedforward_layernorm", d, eps),
			PostFFNorm:   w.RMSNorm(p+"post_feedforward_layernorm", d, eps),
			Q:            w.Linear(p+"self_attn.q_proj", d, cfg.Heads*hd, cfg.AttentionBias),
			QNorm:        w.RMSNorm(p+"self_attn.q_norm", hd, eps),
			O:            w.Linear(p+"self_attn.o_proj", cfg.Heads*hd, d, cfg.AttentionBias),
		}
		if spec.Sliding {
			b.window = cfg.SlidingWindow
		}
		if !spec.Shared {
			b.K = w.Linear(p+"self_attn.k_proj", d, spec.KVHeads*hd, cfg.AttentionBias)
			if !spec.KEqV {
				b.V = w.Linear(p+"self_attn.v_proj", d, spec.KVHeads*hd, cfg.AttentionBias)
			}
			b.KNorm = w.RMSNorm(p+"self_attn.k_norm", hd, eps)
			b.VNorm = &RMSNorm{Eps: eps}
		}
		key := spec.Type + "/" + strconv.Itoa(hd)
		if ropes[key] == nil {
			f, err := gemma4RopeFreqs(w.Backend(), cfg.RopeParameters[spec.Type], hd)
			if err != nil {
				return nil, err
			}
			ropes[key] = &Rope{Dims: hd, Scale: 1, Freqs: w.Own(f)}
		}
		b.Rope = ropes[key]
		b.MLP = w.MLP(p+"mlp", d, spec.MLPWidth)
		b.MLP.Act = act
		if cfg.EnableMoE {
			b.MoE = loadGemma4MoE(w, p, cfg, m.dtype, act)
		}
		if m.PLE != nil {
			b.PLEGate = w.Linear(p+"per_layer_input_gate", d, m.PLE.width, false)
			b.PLEProj = w.Linear(p+"per_layer_projection", m.PLE.width, d, false)
			b.PLENorm = w.RMSNorm(p+"post_per_layer_input_norm", d, eps)
		}
		if w.Has(p + "layer_scalar") {
			s := w.Tensor(p+"layer_scalar", 1)
			b.Scalar = w.Own(tensor.AsType(s, m.dtype))
		}
		m.Blocks = append(m.Blocks, b)
	}
	m.Norm = w.RMSNorm("norm", d, eps)
	if !cfg.tied() || !(w.Has("embed_tokens.weight") || w.Has("embed_tokens.scales")) {
		m.Head = w.Linear("lm_head", d, cfg.Vocab, false)
	} else {
		m.Head = w.TiedHead("embed_tokens", m.Embed)
	}
	return m, nil
}

// roundTo rounds v to what dt can hold: transformers casts Gemma's
// embedding scales to the weights' dtype before multiplying.
func roundTo(v float64, dt tensor.DType) float64 {
	switch dt {
	case tensor.BFloat16:
		return float64(tensor.BF16ToF32(tensor.F32ToBF16(float32(v))))
	case tensor.Float16:
		return float64(tensor.F16ToF32(tensor.F32ToF16(float32(v))))
	case tensor.Float32:
		return float64(float32(v))
	}
	return v
}

// gemma4RopeFreqs returns a layer type's rotary wavelengths over the whole
// head for RoPE's Freqs: the rates transformers computes, inverted (a
// zero rate becomes an infinite wavelength: that pair never turns).
func gemma4RopeFreqs(be tensor.Backend, p *RopeParams, dim int) (*tensor.Array, error) {
	inv, err := gemma4InvFreqs(p, dim)
	if err != nil {
		return nil, err
	}
	waves := make([]float32, len(inv))
	for i, f := range inv {
		waves[i] = float32(math.Inf(1))
		if f != 0 {
			waves[i] = float32(1 / f)
		}
	}
	var a *tensor.Array
	if err := tensor.Try(func() { a = float32sOn(be, waves) }); err != nil {
		return nil, err
	}
	return a, nil
}

// Info implements Architecture.
func (m *Gemma4) Info() Info {
	win := 0
	for _, b := range m.Blocks {
		if b.window > 0 && (win == 0 || b.window < win) {
			win = b.window
		}
	}
	return Info{ModelType: m.cfg.ModelType, Vocab: m.cfg.Vocab, Hidden: m.cfg.Hidden, Layers: m.cfg.Layers,
		EOS: m.eos, DType: m.dtype, SlidingWindow: win}
}

// MakeCaches implements Architecture: sliding layers get a rotating cache
// of the window, full layers a growing one, and KV-sharing layers none
// (they read their donor's).
func (m *Gemma4) MakeCaches() []kv.Cache {
	out := make([]kv.Cache, len(m.Blocks))
	for i, b := range m.Blocks {
		switch {
		case b.spec.Shared:
		case b.spec.Sliding:
			out[i] = kv.NewRotatingKVCache(m.cfg.SlidingWindow, 0)
		default:
			out[i] = kv.NewKVCache()
		}
	}
	return out
}

// Forward implements Architecture.
func (m *Gemma4) Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	t := ids.Dim(1)
	h := m.embed(ids, opts)
	var ple *tensor.Array
	if m.PLE != nil {
		ple = m.PLE.inputs(ids, h) // [B, T, layers, width]
	}
	var first kv.Cache // every cache is at the same position (per row, for a batched pass)
	for _, c := range caches {
		if c != nil {
			first = c
			break
		}
	}
	spans := kv.Spans(first, t)
	out := outputRows(opts, t, h.Backend())
	// one mask per layer type, from the first layer of that type that
	// owns a cache (all of them are in the same state)
	masks := map[string]kv.Mask{}
	for i, b := range m.Blocks {
		if _, ok := masks[b.spec.Type]; !ok && !b.spec.Shared {
			if opts != nil && opts.Blocks != nil {
				masks[b.spec.Type] = blockMask(caches, i, t, b.window, opts.Blocks, h.Backend())
			} else {
				masks[b.spec.Type] = LayerMask(caches, i, t, b.window, h.Backend())
			}
		}
	}
	// a pass that wants its last position alone: the trailing KV-sharing
	// layers write no keys or values, so from the first of them on the
	// other positions' states feed nothing and those layers run the last
	// position only (its own position, and its row of each mask)
	cut := len(m.Blocks)
	if out != nil && len(opts.Outputs) == 1 && int(opts.Outputs[0]) == t-1 && len(spans) == 1 && lastMasksOK(masks, t) {
		for cut > 0 && m.Blocks[cut-1].spec.Shared {
			cut--
		}
	}
	kvs := make([]kv.KV, len(m.Blocks))
	for i, b := range m.Blocks {
		var c kv.Cache
		if caches != nil {
			c = caches[i]
		}
		rows := lastRows(i, len(m.Blocks), out)
		if i == cut {
			h = takeRows(h, out)
			if ple != nil {
				ple = takeRows(ple, out)
			}
			spans = []kv.Span{{Start: 0, Len: 1, Offset: spans[0].Offset + t - 1}}
			for k, mk := range masks {
				masks[k] = lastMask(mk, t)
			}
		}
		if i >= cut {
			rows = nil // the last position is all there is
		}
		var pli *tensor.Array
		if ple != nil {
			pli = tensor.Squeeze(tensor.SliceAxis(ple, 2, i, i+1), 2)
		}
		var donor kv.KV
		if b.spec.Shared {
			donor = kvs[b.spec.Donor]
		}
		h, kvs[i] = b.forward(h, c, masks[b.spec.Type], spans, donor, pli, rows)
	}
	return sc.Keep(m.Norm.Forward(h))
}

// lastMasksOK reports whether every mask of a t-token pass has a row for
// its last query that lastMask can give: no per-row masks, and arrays
// whose query axis is the pass's.
func lastMasksOK(masks map[string]kv.Mask, t int) bool {
	for _, mk := range masks {
		switch {
		case mk.Rows != nil:
			return false
		case mk.Kind == tensor.MaskArray && (mk.Array.NDim() < 2 || mk.Array.Dim(-2) != t):
			return false
		case mk.Kind != tensor.MaskNone && mk.Kind != tensor.MaskCausal && mk.Kind != tensor.MaskArray:
			return false
		}
	}
	return true
}

// lastMask is the mask of the last query of a t-token pass alone: none
// for a causal mask (the last query sees every key), the array's last row.
func lastMask(mk kv.Mask, t int) kv.Mask {
	if mk.Kind != tensor.MaskArray {
		return kv.Mask{}
	}
	return kv.Mask{Kind: tensor.MaskArray, Array: tensor.SliceAxis(mk.Array, mk.Array.NDim()-2, t-1, t)}
}

// embed returns the scaled token embeddings, with precomputed embeddings
// (multimodal features, already in the model's space) merged per opts.
func (m *Gemma4) embed(ids *tensor.Array, opts *ForwardOptions) *tensor.Array {
	h := scoped(func() *tensor.Array { return tensor.MulScalar(m.Embed.Forward(ids), m.embedScale) })
	if opts == nil || opts.Embeddings == nil {
		return h
	}
	emb := opts.Embeddings
	if emb.NDim() != 3 || emb.Dim(0) != h.Dim(0) || emb.Dim(1) != h.Dim(1) || emb.Dim(2) != h.Dim(2) {
		panic(&tensor.Error{Op: "gemma4.Forward", Err: fmt.Errorf("%w: embeddings %v for hidden states %v", tensor.ErrShape, emb.Shape(), h.Shape())})
	}
	return mergeEmbeddings(h, emb, opts.EmbedMask)
}

// forward runs the layer on x [B, T, D]. shared is the donor's keys and
// values for KV-sharing layers. It returns the new hidden states and the
// keys and values this layer attended to (cache views, or arrays left in
// the caller's scope when there is no cache) for layers that share them.
// With rows set (the last layer of a pass that wants only those
// positions) the feed-forward and the per-layer input run on them alone
// and the new hidden states are theirs.
func (b *gemma4Block) forward(x *tensor.Array, c kv.Cache, mask kv.Mask, spans []kv.Span, shared kv.KV, pli, rows *tensor.Array) (*tensor.Array, kv.KV) {
	sc := tensor.NewScope()
	defer sc.Close()
	bs, t := x.Dim(0), x.Dim(1)
	hd := b.spec.HeadDim
	n := b.InNorm.Forward(x)
	q := tensor.Reshape(b.Q.Forward(n), bs, t, b.heads, hd)
	q = b.Rope.ApplySpans(tensor.Transpose(b.QNorm.Forward(q), 0, 2, 1, 3), spans)
	got := shared
	var keepKV []*tensor.Array
	if !b.spec.Shared {
		kr := tensor.Reshape(b.K.Forward(n), bs, t, b.spec.KVHeads, hd)
		vr := kr // k_eq_v: values are the raw key projection, v-normed
		if b.V != nil {
			vr = tensor.Reshape(b.V.Forward(n), bs, t, b.spec.KVHeads, hd)
		}
		k := b.Rope.ApplySpans(tensor.Transpose(b.KNorm.Forward(kr), 0, 2, 1, 3), spans)
		v := tensor.Transpose(b.VNorm.Forward(vr), 0, 2, 1, 3)
		if c != nil {
			got = c.UpdateAndFetch(k, v)
		} else {
			got = kv.KV{Keys: k, Values: v}
			keepKV = []*tensor.Array{k, v}
		}
	}
	o := kv.Attend(q, got, mask, tensor.SDPAOptions{Scale: b.attnScale})
	o = tensor.Reshape(tensor.Transpose(o, 0, 2, 1, 3), bs, t, b.heads*hd)
	r := takeRows(tensor.Add(x, b.PostAttnNorm.Forward(b.O.Forward(o))), rows)
	if pli != nil {
		pli = takeRows(pli, rows)
	}

	f := b.MLP.Forward(b.PreFFNorm.Forward(r))
	if b.MoE != nil {
		f = tensor.Add(b.MoE.PostNorm1.Forward(f), b.MoE.forward(r))
	}
	h := tensor.Add(r, b.PostFFNorm.Forward(f))
	if pli != nil {
		g := tensor.Mul(b.activation(b.PLEGate.Forward(h)), pli)
		h = tensor.Add(h, b.PLENorm.Forward(b.PLEProj.Forward(g)))
	}
	if b.Scalar != nil {
		h = tensor.Mul(h, b.Scalar)
	}
	sc.Keep(h)
	if keepKV != nil {
		sc.Keep(keepKV...)
	}
	return h, got
}

// Logits implements Architecture: the head (tied or not), then
// cap·tanh(logits/cap) when the config softcaps.
func (m *Gemma4) Logits(h *tensor.Array) *tensor.Array {
	y := m.Head.Forward(h)
	if m.cfg.Softcap == nil || *m.cfg.Softcap <= 0 {
		return y
	}
	sc := tensor.NewScope()
	defer sc.Close()
	capv := *m.cfg.Softcap
	return sc.Keep(tensor.MulScalar(tensor.Tanh(tensor.DivScalar(y, capv)), capv))
}
