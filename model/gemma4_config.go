package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// Gemma 4 layer types as config.json names them.
const (
	gemma4Sliding = "sliding_attention"
	gemma4Full    = "full_attention"
)

// gemma4Config is Gemma4TextConfig: the text decoder's config.json fields
// with transformers' defaults. Multimodal checkpoints (model_type gemma4)
// nest it under text_config. Pointers mark fields whose absence means
// something other than their zero value.
type gemma4Config struct {
	ModelType     string   `json:"model_type"`
	Vocab         int      `json:"vocab_size"`
	Hidden        int      `json:"hidden_size"`
	Intermediate  int      `json:"intermediate_size"`
	Layers        int      `json:"num_hidden_layers"`
	Heads         int      `json:"num_attention_heads"`
	KVHeads       int      `json:"num_key_value_heads"`
	HeadDim       int      `json:"head_dim"`
	Activation    string   `json:"hidden_activation"`
	Eps           float32  `json:"rms_norm_eps"`
	Tie           *bool    `json:"tie_word_embeddings"`
	AttentionBias bool     `json:"attention_bias"`
	SlidingWindow int      `json:"sliding_window"`
	LayerTypes    []string `json:"layer_types"`
	Softcap       *float64 `json:"final_logit_softcapping"`
	Bidirectional *string  `json:"use_bidirectional_attention"`

	RopeParameters map[string]*RopeParams `json:"rope_parameters"`

	// Full-attention layers' own head size and KV heads. transformers
	// before 5.17 kept them as these two fields; 5.17 folds them into
	// per_layer_config (layer index → overrides) when it saves.
	GlobalHeadDim    *int                         `json:"global_head_dim"`
	GlobalKVHeads    *int                         `json:"num_global_key_value_heads"`
	PerLayerConfig   map[string]gemma4LayerConfig `json:"per_layer_config"`
	AttentionKEqV    bool                         `json:"attention_k_eq_v"`
	KVSharedLayers   int                          `json:"num_kv_shared_layers"`
	DoubleWideMLP    bool                         `json:"use_double_wide_mlp"`
	PerLayerVocab    int                          `json:"vocab_size_per_layer_input"`
	PerLayerHidden   *int                         `json:"hidden_size_per_layer_input"`
	EnableMoE        bool                         `json:"enable_moe_block"`
	Experts          *int                         `json:"num_experts"`
	TopKExperts      *int                         `json:"top_k_experts"`
	MoEIntermediate  *int                         `json:"moe_intermediate_size"`
	globalHeadDimSet bool
}

// gemma4LayerConfig is one per_layer_config entry.
type gemma4LayerConfig struct {
	HeadDim *int `json:"head_dim"`
	KVHeads *int `json:"num_key_value_heads"`
}

// gemma4Layer is what the config implies for one decoder layer.
type gemma4Layer struct {
	Type     string
	Sliding  bool
	HeadDim  int
	KVHeads  int
	KEqV     bool // values are the (un-normed) key projection
	Shared   bool // reuses Donor's keys and values and has no cache
	Donor    int  // for shared layers: the last earlier unshared layer of the same type
	MLPWidth int
}

// defaultGemma4Config returns Gemma4TextConfig's defaults.
func defaultGemma4Config() gemma4Config {
	ple := 256
	return gemma4Config{
		Vocab: 262144, Hidden: 2304, Intermediate: 9216, Layers: 30, Heads: 8, KVHeads: 4, HeadDim: 256,
		Activation: "gelu_pytorch_tanh", Eps: 1e-6, SlidingWindow: 512,
		PerLayerVocab: 262144, PerLayerHidden: &ple,
	}
}

// parseGemma4Config decodes config.json, flat (gemma4_text) or nested
// under text_config (gemma4), applying transformers' defaults and
// __post_init__ rules.
func parseGemma4Config(c *Config) (*gemma4Config, error) {
	var outer struct {
		Text json.RawMessage `json:"text_config"`
		Tie  *bool           `json:"tie_word_embeddings"`
	}
	if err := c.Decode(&outer); err != nil {
		return nil, err
	}
	raw := c.Raw
	if len(outer.Text) > 0 && string(outer.Text) != "null" {
		raw = outer.Text
	}
	cfg := defaultGemma4Config()
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: config.json: %v", ErrCheckpoint, err)
	}
	var probe map[string]json.RawMessage
	_ = json.Unmarshal(raw, &probe)
	_, cfg.globalHeadDimSet = probe["global_head_dim"]
	if cfg.Tie == nil {
		cfg.Tie = outer.Tie
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func (g *gemma4Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: config.json: %s", ErrCheckpoint, fmt.Sprintf(format, args...))
	}
	if g.Hidden <= 0 || g.Layers <= 0 || g.Heads <= 0 || g.Vocab <= 0 || g.HeadDim <= 0 || g.KVHeads <= 0 {
		return bad("hidden_size %d, num_hidden_layers %d, num_attention_heads %d, num_key_value_heads %d, head_dim %d, vocab_size %d",
			g.Hidden, g.Layers, g.Heads, g.KVHeads, g.HeadDim, g.Vocab)
	}
	if g.Bidirectional != nil && *g.Bidirectional == "all" {
		return fmt.Errorf("%w: gemma4 with use_bidirectional_attention \"all\"", ErrUnsupported)
	}
	if g.Activation != "gelu_pytorch_tanh" && g.Activation != "gelu_tanh" && g.Activation != "gelu" {
		return fmt.Errorf("%w: gemma4 hidden_activation %q", ErrUnsupported, g.Activation)
	}
	if g.LayerTypes == nil {
		// transformers' default: five sliding layers, then one full
		for i := range g.Layers {
			t := gemma4Sliding
			if (i+1)%6 == 0 {
				t = gemma4Full
			}
			g.LayerTypes = append(g.LayerTypes, t)
		}
	}
	if len(g.LayerTypes) != g.Layers {
		return bad("%d layer_types for %d layers", len(g.LayerTypes), g.Layers)
	}
	for i, t := range g.LayerTypes {
		if t != gemma4Sliding && t != gemma4Full {
			return fmt.Errorf("%w: gemma4 layer %d type %q", ErrUnsupported, i, t)
		}
	}
	// transformers forces the last layer to full attention
	g.LayerTypes[g.Layers-1] = gemma4Full
	if g.SlidingWindow <= 0 && gemma4HasType(g.LayerTypes, gemma4Sliding) {
		return bad("sliding_window %d", g.SlidingWindow)
	}
	if g.KVSharedLayers < 0 || g.KVSharedLayers >= g.Layers {
		return bad("num_kv_shared_layers %d for %d layers", g.KVSharedLayers, g.Layers)
	}
	if g.EnableMoE {
		if g.Experts == nil || g.TopKExperts == nil || g.MoEIntermediate == nil || *g.Experts <= 0 ||
			*g.TopKExperts <= 0 || *g.TopKExperts > *g.Experts || *g.MoEIntermediate <= 0 {
			return bad("enable_moe_block needs num_experts, top_k_experts (≤ experts) and moe_intermediate_size")
		}
	}
	if g.RopeParameters == nil {
		g.RopeParameters = map[string]*RopeParams{}
	}
	defaults := map[string]RopeParams{
		gemma4Sliding: {Type: "default", Theta: 10000},
		gemma4Full:    {Type: "proportional", PartialRotaryFactor: 0.25, Theta: 1e6},
	}
	for t, d := range defaults {
		if p := g.RopeParameters[t]; p == nil {
			d := d
			g.RopeParameters[t] = &d
		} else if p.Type == "" {
			p.Type = "default"
		}
	}
	for i := range g.Layers {
		l := g.layer(i)
		if g.Heads%l.KVHeads != 0 || l.HeadDim <= 0 || l.HeadDim%2 != 0 {
			return bad("layer %d: %d heads for %d KV heads of size %d", i, g.Heads, l.KVHeads, l.HeadDim)
		}
		if l.Shared && l.Donor < 0 {
			return bad("layer %d shares KV but no earlier layer has type %s", i, l.Type)
		}
	}
	return nil
}

func gemma4HasType(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// tied reports whether the output head is the embedding table.
func (g *gemma4Config) tied() bool { return g.Tie == nil || *g.Tie }

// perLayerHidden is the per-layer input width (0: no per-layer inputs).
func (g *gemma4Config) perLayerHidden() int {
	if g.PerLayerHidden == nil {
		return 0
	}
	return *g.PerLayerHidden
}

// firstShared is the index of the first KV-sharing layer (Layers when none).
func (g *gemma4Config) firstShared() int { return g.Layers - g.KVSharedLayers }

// layer resolves layer i's shapes exactly as Gemma4TextAttention and
// Gemma4TextMLP do.
func (g *gemma4Config) layer(i int) gemma4Layer {
	t := g.LayerTypes[i]
	l := gemma4Layer{Type: t, Sliding: t == gemma4Sliding, HeadDim: g.HeadDim, KVHeads: g.KVHeads, Donor: -1}
	l.KEqV = g.AttentionKEqV && !l.Sliding
	if g.PerLayerConfig != nil {
		if o, ok := g.PerLayerConfig[strconv.Itoa(i)]; ok {
			if o.HeadDim != nil {
				l.HeadDim = *o.HeadDim
			}
			if o.KVHeads != nil {
				l.KVHeads = *o.KVHeads
			}
		}
	} else if !l.Sliding {
		// global_head_dim defaults to 512 when absent; an explicit null
		// falls back to head_dim
		switch {
		case g.GlobalHeadDim != nil && *g.GlobalHeadDim > 0:
			l.HeadDim = *g.GlobalHeadDim
		case !g.globalHeadDimSet:
			l.HeadDim = 512
		}
		if l.KEqV && g.GlobalKVHeads != nil {
			l.KVHeads = *g.GlobalKVHeads
		}
	}
	first := g.firstShared()
	l.Shared = g.KVSharedLayers > 0 && i >= first
	if l.Shared {
		for j := first - 1; j >= 0; j-- {
			if g.LayerTypes[j] == t {
				l.Donor = j
				break
			}
		}
	}
	l.MLPWidth = g.Intermediate
	if g.DoubleWideMLP && l.Shared {
		l.MLPWidth *= 2
	}
	return l
}

// gemma4InvFreqs returns a layer type's rotary angular rates for head
// size dim as transformers computes them in float32: "default" rotates
// every pair at base^(-2i/dim); "proportional" rotates only the first
// partial_rotary_factor·dim/2 pairs (exponents still over the full dim)
// and leaves the rest at rate 0, so rotate-half pairs feature i with
// i+dim/2 across the whole head. "linear" divides default rates by factor.
func gemma4InvFreqs(p *RopeParams, dim int) ([]float64, error) {
	half := dim / 2
	rotated := half
	factor := 1.0
	switch p.Type {
	case "default":
	case "linear":
		if p.Factor != 0 {
			factor = p.Factor
		}
	case "proportional":
		prf := p.PartialRotaryFactor
		if prf == 0 {
			prf = 1
		}
		rotated = int(math.Floor(prf * float64(dim) / 2))
		if p.Factor != 0 {
			factor = p.Factor
		}
	default:
		return nil, fmt.Errorf("%w: gemma4 rope type %q (supported: default, linear, proportional)", ErrUnsupported, p.Type)
	}
	if p.Theta <= 0 {
		return nil, fmt.Errorf("%w: config.json: rope_theta %v", ErrCheckpoint, p.Theta)
	}
	out := make([]float64, half)
	for i := range min(rotated, half) {
		e := float32(float32(2*i) / float32(dim))
		inv := float32(1 / float32(math.Pow(p.Theta, float64(e))))
		out[i] = float64(float32(inv / float32(factor)))
	}
	return out, nil
}
