package model

import (
	"encoding/json"
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

func init() {
	Register(Arch{
		Name:          "gemma4_assistant",
		ModelTypes:    []string{"gemma4_assistant"},
		Architectures: []string{"Gemma4AssistantForCausalLM"},
		New:           newGemma4Assistant,
	})
}

// Gemma4Assistant is the Gemma 4 assistant drafter (transformers'
// Gemma4AssistantForCausalLM): a small Gemma 4 decoder whose every layer
// reads a Gemma 4 target's keys and values instead of its own (the
// target's last unshared sliding and full layers', see
// Gemma4.AssistantKV), fed at one constant position with the target's
// embedding of the last token beside a hidden state (the target's final
// one first, then its own projected back), drafting one token per Step.
// It has no Forward of its own over token ids.
type Gemma4Assistant struct {
	cfg      *gemma4Config
	backbone int
	window   int
	dtype    tensor.DType
	Embed    *Embedding // the head's table (tied)
	Blocks   []*gemma4Block
	Norm     *RMSNorm
	Pre      Projection // [2·backbone → hidden]
	Post     Projection // [hidden → backbone]
	Head     Projection
	// Masked is the centroid-routed head of use_ordered_embeddings
	// checkpoints, or nil.
	Masked *assistantMaskedHead
}

// assistantMaskedHead is Gemma4AssistantMaskedEmbedder: the hidden state
// picks its topK centroids, and only the tokens of those clusters (by a
// stored token ordering) get logits, h·E[token]; the others get the
// smallest of those minus one.
type assistantMaskedHead struct {
	Centroids  Projection
	ordering   []int32 // [centroids · perCluster] canonical token ids
	centroids  int
	perCluster int
	topK       int
}

// gemma4AssistantConfig is Gemma4AssistantConfig's own fields.
type gemma4AssistantConfig struct {
	Backbone   int  `json:"backbone_hidden_size"`
	Ordered    bool `json:"use_ordered_embeddings"`
	Centroids  *int `json:"num_centroids"`
	CentroidsK *int `json:"centroid_intermediate_top_k"`
}

func newGemma4Assistant(c *Config, w *Weights) (Architecture, error) {
	var ac gemma4AssistantConfig
	if err := c.Decode(&ac); err != nil {
		return nil, err
	}
	if ac.Backbone == 0 {
		ac.Backbone = 1536
	}
	// Every layer shares KV (num_kv_shared_layers = layers): parse the
	// text config as a plain decoder, then mark them all shared.
	var outer struct {
		Text map[string]any `json:"text_config"`
	}
	if err := c.Decode(&outer); err != nil {
		return nil, err
	}
	if outer.Text == nil {
		return nil, fmt.Errorf("%w: config.json: gemma4_assistant without text_config", ErrCheckpoint)
	}
	outer.Text["num_kv_shared_layers"] = 0
	raw, err := json.Marshal(map[string]any{"text_config": outer.Text})
	if err != nil {
		return nil, err
	}
	cfg, err := parseGemma4Config(&Config{Raw: raw})
	if err != nil {
		return nil, err
	}
	if cfg.perLayerHidden() != 0 || cfg.EnableMoE || cfg.DoubleWideMLP {
		return nil, fmt.Errorf("%w: gemma4_assistant with per-layer inputs, a MoE block or a double-wide MLP", ErrCheckpoint)
	}
	act := tensor.GeluApprox
	if cfg.Activation == "gelu" {
		act = tensor.Gelu
	}
	d, eps := cfg.Hidden, cfg.Eps
	a := &Gemma4Assistant{cfg: cfg, backbone: ac.Backbone, window: cfg.SlidingWindow}
	a.Embed = w.Embedding("embed_tokens", cfg.Vocab, d)
	a.dtype = a.Embed.DType
	ropes := map[string]*Rope{}
	for i := range cfg.Layers {
		spec := cfg.layer(i)
		spec.Shared = true
		p := fmt.Sprintf("layers.%d.", i)
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
		key := fmt.Sprintf("%s/%d", spec.Type, hd)
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
		if w.Has(p + "layer_scalar") {
			b.Scalar = w.Own(tensor.AsType(w.Tensor(p+"layer_scalar", 1), a.dtype))
		}
		a.Blocks = append(a.Blocks, b)
	}
	a.Norm = w.RMSNorm("norm", d, eps)
	a.Pre = w.Linear("pre_projection", 2*ac.Backbone, d, false)
	a.Post = w.Linear("post_projection", d, ac.Backbone, false)
	if w.Has("lm_head.weight") {
		a.Head = w.Linear("lm_head", d, cfg.Vocab, false)
	} else {
		a.Head = w.TiedHead("embed_tokens", a.Embed)
	}
	if ac.Ordered {
		n, k := 2048, 32
		if ac.Centroids != nil {
			n = *ac.Centroids
		}
		if ac.CentroidsK != nil {
			k = *ac.CentroidsK
		}
		if n <= 0 || cfg.Vocab%n != 0 || k <= 0 || k > n {
			return nil, fmt.Errorf("%w: config.json: %d centroids (top %d) over a vocabulary of %d", ErrCheckpoint, n, k, cfg.Vocab)
		}
		mh := &assistantMaskedHead{Centroids: w.Linear("masked_embedding.centroids", d, n, false), centroids: n, perCluster: cfg.Vocab / n, topK: k}
		ord := w.Tensor("masked_embedding.token_ordering", cfg.Vocab)
		for _, v := range ord.Int64s() {
			if v < 0 || int(v) >= cfg.Vocab {
				return nil, fmt.Errorf("%w: masked_embedding.token_ordering holds %d, outside the vocabulary", ErrCheckpoint, v)
			}
			mh.ordering = append(mh.ordering, int32(v))
		}
		a.Masked = mh
	}
	return a, nil
}

// Info implements Architecture (Layers is the drafter's own).
func (a *Gemma4Assistant) Info() Info {
	return Info{ModelType: "gemma4_assistant", Vocab: a.cfg.Vocab, Hidden: a.cfg.Hidden, Layers: a.cfg.Layers, DType: a.dtype, SlidingWindow: a.window}
}

// MakeCaches implements Architecture: the drafter keeps no caches.
func (a *Gemma4Assistant) MakeCaches() []kv.Cache { return make([]kv.Cache, len(a.Blocks)) }

// Forward implements Architecture by refusing: the drafter runs through
// Step, on a target's state.
func (a *Gemma4Assistant) Forward(*tensor.Array, []kv.Cache, *ForwardOptions) *tensor.Array {
	panic(&tensor.Error{Op: "gemma4_assistant.Forward", Err: fmt.Errorf("%w: the Gemma 4 assistant drafts through Step with a target's hidden state and K/V", ErrUnsupported)})
}

// Logits implements Architecture: the head over the drafter's
// final-normed hidden states (no softcap, as transformers).
func (a *Gemma4Assistant) Logits(h *tensor.Array) *tensor.Array {
	if a.Masked != nil {
		return a.Masked.forward(h, a.Embed)
	}
	return a.Head.Forward(h)
}

// Backbone is the hidden size of the target the drafter was trained with.
func (a *Gemma4Assistant) Backbone() int { return a.backbone }

// VocabSize is the assistant's vocabulary size (Info().Vocab).
func (a *Gemma4Assistant) VocabSize() int { return a.Info().Vocab }

// SlidingWindow is the drafter's sliding attention window: its sliding
// layers read the target's last window+1 sliding-layer keys.
func (a *Gemma4Assistant) SlidingWindow() int { return a.window }

// AssistantKV is the K/V a drafter step reads: the target's last unshared
// full-attention layer's keys and values over every cached token, and its
// last unshared sliding layer's over the last window+1 tokens (both
// [1, Hkv, n, D], RoPE applied, in the target's order of storage: the
// drafter's attention is over the set).
type AssistantKV struct {
	Full, Sliding kv.KV
	held          []*tensor.Array
}

// Free frees the arrays.
func (s *AssistantKV) Free() {
	tensor.Free(s.held...)
	s.held, s.Full, s.Sliding = nil, kv.KV{}, kv.KV{}
}

// Step runs one drafting step: x is [1, 1, 2·backbone], the target's
// embedding of the last token beside the hidden state (the target's
// final one for the first step, the previous step's projection after),
// at position pos, over the target's shared K/V. It returns the
// projected hidden state for the next step ([1, 1, backbone]) and the
// logits ([1, 1, V]).
func (a *Gemma4Assistant) Step(x *tensor.Array, shared AssistantKV, pos int) (proj, logits *tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	if x.NDim() != 3 || x.Dim(0) != 1 || x.Dim(1) != 1 || x.Dim(2) != 2*a.backbone {
		panic(&tensor.Error{Op: "gemma4_assistant.Step", Err: fmt.Errorf("%w: input %v, want [1, 1, %d]", tensor.ErrShape, x.Shape(), 2*a.backbone)})
	}
	h := a.Pre.Forward(x)
	spans := []kv.Span{{Start: 0, Len: 1, Offset: pos}}
	for _, b := range a.Blocks {
		src := shared.Full
		if b.spec.Sliding {
			src = shared.Sliding
		}
		if src.Keys == nil {
			panic(&tensor.Error{Op: "gemma4_assistant.Step", Err: fmt.Errorf("%w: no target K/V for the drafter's %s layers", tensor.ErrArgument, b.spec.Type)})
		}
		h, _ = b.forward(h, nil, kv.Mask{}, spans, src, nil, nil)
	}
	h = a.Norm.Forward(h)
	proj = a.Post.Forward(h)
	logits = a.Logits(h)
	sc.Keep(proj, logits)
	return proj, logits
}

// forward is the masked head over h [B, T, D] with the table emb.
func (mh *assistantMaskedHead) forward(h *tensor.Array, emb *Embedding) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	bs, t, d := h.Dim(0), h.Dim(1), h.Dim(2)
	vocab := mh.centroids * mh.perCluster
	cl := tensor.AsType(mh.Centroids.Forward(h), tensor.Float32).Float32s() // [B·T, C]
	rows := bs * t
	ids := make([]int32, 0, rows*mh.topK*mh.perCluster)
	for r := range rows {
		for _, c := range topIndices(cl[r*mh.centroids:(r+1)*mh.centroids], mh.topK) {
			ids = append(ids, mh.ordering[c*mh.perCluster:(c+1)*mh.perCluster]...)
		}
	}
	n := mh.topK * mh.perCluster
	sel := emb.Forward(tensor.FromInt32On(h.Backend(), ids, []int{rows, n})) // [rows, n, D]
	hr := tensor.Reshape(h, rows, 1, d)
	lg := tensor.Reshape(tensor.Matmul(hr, tensor.SwapAxes(sel, 1, 2)), rows, n) // [rows, n]
	vals := tensor.AsType(lg, tensor.Float32).Float32s()
	low := vals[0]
	for _, v := range vals {
		low = min(low, v)
	}
	out := make([]float32, rows*vocab)
	for i := range out {
		out[i] = low - 1
	}
	for r := range rows {
		for j := range n {
			out[r*vocab+int(ids[r*n+j])] = vals[r*n+j]
		}
	}
	res := tensor.AsType(tensor.Reshape(float32sOn(h.Backend(), out), bs, t, vocab), h.DType())
	return sc.Keep(res)
}

// topIndices are the indices of the k largest values (ties: the lower
// index first); their order does not matter to the caller.
func topIndices(v []float32, k int) []int {
	idx := make([]int, 0, k)
	used := make([]bool, len(v))
	for range k {
		best := -1
		for i, x := range v {
			if !used[i] && (best < 0 || x > v[best]) {
				best = i
			}
		}
		used[best] = true
		idx = append(idx, best)
	}
	return idx
}

// AssistantKV returns what a Gemma 4 assistant drafter reads of this
// target with caches (MakeCaches' kind: contiguous, full and rotating):
// the keys and values of the last unshared full and sliding layers (as
// transformers' shared_kv_states), the sliding ones cut to the last
// window+1 tokens (the drafter's bidirectional sliding mask admits keys
// up to window positions away, inclusive). A rotating cache past its
// window holds only the last window tokens: the drafter then reads one
// key fewer than transformers' (whose cache keeps window−1 plus the
// verified pass's tokens). The arrays are the caller's (AssistantKV.Free).
func (m *Gemma4) AssistantKV(caches []kv.Cache, window int) (AssistantKV, error) {
	var out AssistantKV
	err := tensor.Try(func() {
		for _, want := range []bool{false, true} {
			donor := -1
			for i, b := range m.Blocks {
				if !b.spec.Shared && b.spec.Sliding == want {
					donor = i
				}
			}
			if donor < 0 {
				continue
			}
			c := caches[donor]
			if c == nil {
				panic(&tensor.Error{Op: "gemma4.AssistantKV", Err: fmt.Errorf("%w: layer %d has no cache", tensor.ErrArgument, donor)})
			}
			st := c.State()
			if len(st.Arrays) < 2 || st.Bits != 0 {
				st.Free()
				out.Free()
				panic(&tensor.Error{Op: "gemma4.AssistantKV", Err: fmt.Errorf("%w: layer %d's cache (%s) holds no plain keys and values", tensor.ErrArgument, donor, st.Kind)})
			}
			out.held = append(out.held, st.Arrays...)
			k, v := st.Arrays[0], st.Arrays[1]
			if n, w := k.Dim(2), window+1; want && window > 0 && n > w {
				// more slots than the window: the buffer is in temporal
				// order (a multi-token write's), the last ones are the
				// newest
				k, v = tensor.SliceAxis(k, 2, n-w, n), tensor.SliceAxis(v, 2, n-w, n)
				tensor.Detach(k, v)
				out.held = append(out.held, k, v)
			}
			if want {
				out.Sliding = kv.KV{Keys: k, Values: v}
			} else {
				out.Full = kv.KV{Keys: k, Values: v}
			}
		}
	})
	return out, err
}

// HiddenSize is the model's hidden size (Info().Hidden).
func (m *Gemma4) HiddenSize() int { return m.Info().Hidden }

// VocabSize is the model's vocabulary size (Info().Vocab).
func (m *Gemma4) VocabSize() int { return m.Info().Vocab }

// EmbedTokens is the target's scaled embedding of ids [B, T]: the first
// half of an assistant drafter's input.
func (m *Gemma4) EmbedTokens(ids *tensor.Array) (out *tensor.Array, err error) {
	err = tensor.Try(func() { out = m.embed(ids, nil) })
	return out, err
}
