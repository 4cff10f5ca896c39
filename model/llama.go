package model

import (
	"fmt"
	"math"
	"strconv"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// llamaConfig holds the config.json fields of Llama-shaped decoders
// (Llama, Mistral, SmolLM, Qwen3, Qwen3-MoE).
type llamaConfig struct {
	ModelType     string  `json:"model_type"`
	Hidden        int     `json:"hidden_size"`
	Layers        int     `json:"num_hidden_layers"`
	Intermediate  int     `json:"intermediate_size"`
	Heads         int     `json:"num_attention_heads"`
	KVHeads       int     `json:"num_key_value_heads"`
	HeadDim       int     `json:"head_dim"`
	Vocab         int     `json:"vocab_size"`
	Eps           float32 `json:"rms_norm_eps"`
	Tie           bool    `json:"tie_word_embeddings"`
	AttentionBias bool    `json:"attention_bias"`
	MLPBias       bool    `json:"mlp_bias"`

	// Qwen3-MoE
	Experts           int   `json:"num_experts"`
	LocalExperts      int   `json:"num_local_experts"` // transformers 5's name for num_experts
	TopK              int   `json:"num_experts_per_tok"`
	MoEIntermediate   int   `json:"moe_intermediate_size"`
	NormTopK          bool  `json:"norm_topk_prob"`
	DecoderSparseStep int   `json:"decoder_sparse_step"`
	MLPOnlyLayers     []int `json:"mlp_only_layers"`
}

// flavor is what distinguishes the Llama-shaped architectures.
type flavor struct {
	qkNorm bool // Qwen3: RMSNorm over each head of q and k before rope
	moe    bool // Qwen3-MoE: sparse MLP blocks
}

func init() {
	Register(Arch{
		Name:          "llama",
		ModelTypes:    []string{"llama", "smollm"},
		Architectures: []string{"LlamaForCausalLM"},
		New:           func(c *Config, w *Weights) (Architecture, error) { return newLlama(c, w, flavor{}) },
	})
	Register(Arch{
		Name:          "qwen3",
		ModelTypes:    []string{"qwen3"},
		Architectures: []string{"Qwen3ForCausalLM"},
		New:           func(c *Config, w *Weights) (Architecture, error) { return newLlama(c, w, flavor{qkNorm: true}) },
	})
	Register(Arch{
		Name:          "qwen3_moe",
		ModelTypes:    []string{"qwen3_moe"},
		Architectures: []string{"Qwen3MoeForCausalLM"},
		New: func(c *Config, w *Weights) (Architecture, error) {
			return newLlama(c, w, flavor{qkNorm: true, moe: true})
		},
	})
}

// Llama is a Llama-shaped decoder: pre-norm blocks of grouped-query
// attention with rope and a gated MLP (or a sparse MoE block).
type Llama struct {
	cfg    llamaConfig
	eos    []int
	Embed  *Embedding
	Layers []*llamaBlock
	Norm   *RMSNorm
	Head   Projection // the lm_head, or the embedding table as a *TiedHead
}

type llamaBlock struct {
	InNorm, PostNorm *RMSNorm
	Attn             *Attention
	MLP              *MLP
	MoE              *SparseMoE
}

func newLlama(c *Config, w *Weights, fl flavor) (Architecture, error) {
	cfg := llamaConfig{Eps: 1e-6, DecoderSparseStep: 1}
	if err := c.Decode(&cfg); err != nil {
		return nil, err
	}
	if cfg.Hidden <= 0 || cfg.Layers <= 0 || cfg.Heads <= 0 || cfg.Vocab <= 0 {
		return nil, fmt.Errorf("%w: config.json: hidden_size %d, num_hidden_layers %d, num_attention_heads %d, vocab_size %d", ErrCheckpoint, cfg.Hidden, cfg.Layers, cfg.Heads, cfg.Vocab)
	}
	if cfg.Experts == 0 {
		cfg.Experts = cfg.LocalExperts
	}
	if cfg.KVHeads == 0 {
		cfg.KVHeads = cfg.Heads
	}
	if cfg.HeadDim == 0 {
		cfg.HeadDim = cfg.Hidden / cfg.Heads
	}
	if cfg.Heads%cfg.KVHeads != 0 {
		return nil, fmt.Errorf("%w: config.json: %d heads not a multiple of %d KV heads", ErrCheckpoint, cfg.Heads, cfg.KVHeads)
	}
	rp, err := parseRope(c, 10000)
	if err != nil {
		return nil, err
	}
	rope, err := NewRope(w, rp, cfg.HeadDim)
	if err != nil {
		return nil, err
	}
	m := &Llama{cfg: cfg, eos: c.EOS}
	m.Embed = w.Embedding("embed_tokens", cfg.Vocab, cfg.Hidden)
	for i := range cfg.Layers {
		p := "layers." + strconv.Itoa(i) + "."
		b := &llamaBlock{
			InNorm:   w.RMSNorm(p+"input_layernorm", cfg.Hidden, cfg.Eps),
			PostNorm: w.RMSNorm(p+"post_attention_layernorm", cfg.Hidden, cfg.Eps),
		}
		a := &Attention{
			Heads: cfg.Heads, KVHeads: cfg.KVHeads, HeadDim: cfg.HeadDim,
			Scale: float32(1 / math.Sqrt(float64(cfg.HeadDim))), Rope: rope,
			Q: w.Linear(p+"self_attn.q_proj", cfg.Hidden, cfg.Heads*cfg.HeadDim, cfg.AttentionBias),
			K: w.Linear(p+"self_attn.k_proj", cfg.Hidden, cfg.KVHeads*cfg.HeadDim, cfg.AttentionBias),
			V: w.Linear(p+"self_attn.v_proj", cfg.Hidden, cfg.KVHeads*cfg.HeadDim, cfg.AttentionBias),
			O: w.Linear(p+"self_attn.o_proj", cfg.Heads*cfg.HeadDim, cfg.Hidden, cfg.AttentionBias),
		}
		if fl.qkNorm {
			a.QNorm = w.RMSNorm(p+"self_attn.q_norm", cfg.HeadDim, cfg.Eps)
			a.KNorm = w.RMSNorm(p+"self_attn.k_norm", cfg.HeadDim, cfg.Eps)
		}
		b.Attn = a
		sparse := fl.moe && cfg.Experts > 0 && !contains(cfg.MLPOnlyLayers, i) && (i+1)%max(cfg.DecoderSparseStep, 1) == 0
		if sparse {
			b.MoE = w.SparseMoE(p+"mlp", cfg.Hidden, cfg.MoEIntermediate, cfg.Experts, cfg.TopK, cfg.NormTopK)
		} else {
			b.MLP = &MLP{
				Gate: w.Linear(p+"mlp.gate_proj", cfg.Hidden, cfg.Intermediate, cfg.MLPBias),
				Up:   w.Linear(p+"mlp.up_proj", cfg.Hidden, cfg.Intermediate, cfg.MLPBias),
				Down: w.Linear(p+"mlp.down_proj", cfg.Intermediate, cfg.Hidden, cfg.MLPBias),
			}
		}
		m.Layers = append(m.Layers, b)
	}
	m.Norm = w.RMSNorm("norm", cfg.Hidden, cfg.Eps)
	if !cfg.Tie && (w.Has("lm_head.weight") || w.Has("lm_head.scales")) {
		m.Head = w.Linear("lm_head", cfg.Hidden, cfg.Vocab, false)
	} else {
		m.Head = w.TiedHead("embed_tokens", m.Embed)
	}
	return m, nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Info implements Architecture.
func (m *Llama) Info() Info {
	return Info{ModelType: m.cfg.ModelType, Vocab: m.cfg.Vocab, Hidden: m.cfg.Hidden, Layers: m.cfg.Layers, EOS: m.eos, DType: m.Embed.DType}
}

// MakeCaches implements Architecture: every layer attends to everything.
func (m *Llama) MakeCaches() []kv.Cache {
	c := make([]kv.Cache, len(m.Layers))
	for i := range c {
		c[i] = kv.NewKVCache()
	}
	return c
}

// Forward implements Architecture.
func (m *Llama) Forward(ids *tensor.Array, caches []kv.Cache, opts *ForwardOptions) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	h := EmbedInputs(m.Embed, ids, opts)
	mask := LayerMask(caches, 0, ids.Dim(1), 0, h.Backend())
	out := outputRows(opts, ids.Dim(1), h.Backend())
	for i, b := range m.Layers {
		var c kv.Cache
		if caches != nil {
			c = caches[i]
		}
		h = b.forward(h, c, mask, lastRows(i, len(m.Layers), out))
	}
	return sc.Keep(m.Norm.Forward(h))
}

// forward runs the block over x; with rows set (the last layer of a pass
// that wants only those positions) the feed-forward runs on them alone and
// the block returns them.
func (b *llamaBlock) forward(x *tensor.Array, c kv.Cache, mask kv.Mask, rows *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	r := takeRows(tensor.Add(x, b.Attn.Forward(b.InNorm.Forward(x), c, mask)), rows)
	n := b.PostNorm.Forward(r)
	var f *tensor.Array
	if b.MoE != nil {
		f = b.MoE.Forward(n)
	} else {
		f = b.MLP.Forward(n)
	}
	return sc.Keep(tensor.Add(r, f))
}

// Logits implements Architecture.
func (m *Llama) Logits(h *tensor.Array) *tensor.Array {
	return m.Head.Forward(h)
}
