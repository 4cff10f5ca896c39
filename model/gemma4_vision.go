package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/mlxgo/mlxgo/model/media"
	"github.com/mlxgo/mlxgo/tensor"
)

// gemma4VisionConfig is Gemma4VisionConfig with transformers' defaults.
type gemma4VisionConfig struct {
	Hidden        int     `json:"hidden_size"`
	Intermediate  int     `json:"intermediate_size"`
	Layers        int     `json:"num_hidden_layers"`
	Heads         int     `json:"num_attention_heads"`
	KVHeads       int     `json:"num_key_value_heads"`
	HeadDim       int     `json:"head_dim"`
	Activation    string  `json:"hidden_activation"`
	Eps           float32 `json:"rms_norm_eps"`
	Pool          int     `json:"pooling_kernel_size"`
	Patch         int     `json:"patch_size"`
	PosEmbed      int     `json:"position_embedding_size"`
	Clipped       bool    `json:"use_clipped_linears"`
	Standardize   bool    `json:"standardize"`
	RopeParameter *struct {
		Type  string  `json:"rope_type"`
		Theta float64 `json:"rope_theta"`
	} `json:"rope_parameters"`
}

func parseGemma4VisionConfig(raw json.RawMessage) (*gemma4VisionConfig, error) {
	c := &gemma4VisionConfig{Hidden: 768, Intermediate: 3072, Layers: 16, Heads: 12, KVHeads: 12, HeadDim: 64,
		Activation: "gelu_pytorch_tanh", Eps: 1e-6, Pool: 3, Patch: 16, PosEmbed: 10240}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%w: config.json vision_config: %v", ErrCheckpoint, err)
	}
	if c.Hidden <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.KVHeads <= 0 || c.Heads%c.KVHeads != 0 ||
		c.HeadDim <= 0 || c.HeadDim%4 != 0 || c.Patch <= 0 || c.Pool <= 0 || c.PosEmbed <= 0 {
		return nil, fmt.Errorf("%w: config.json vision_config: hidden %d, layers %d, heads %d/%d of %d, patch %d, pool %d, positions %d",
			ErrCheckpoint, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Patch, c.Pool, c.PosEmbed)
	}
	if t := c.RopeParameter; t != nil && t.Type != "" && t.Type != "axial" && t.Type != "default" {
		return nil, fmt.Errorf("%w: gemma4 vision rope type %q", ErrUnsupported, t.Type)
	}
	if c.Activation != "gelu_pytorch_tanh" && c.Activation != "gelu_tanh" && c.Activation != "gelu" {
		return nil, fmt.Errorf("%w: gemma4 vision hidden_activation %q", ErrUnsupported, c.Activation)
	}
	return c, nil
}

func (c *gemma4VisionConfig) theta() float64 {
	if c.RopeParameter != nil && c.RopeParameter.Theta > 0 {
		return c.RopeParameter.Theta
	}
	return 100
}

// clipLinear is Gemma4ClippableLinear: a bias-free linear whose input and
// output are clamped to ranges stored in the checkpoint (±Inf: no clamp).
type clipLinear struct {
	L                            Projection
	inMin, inMax, outMin, outMax float64
	clipIn, clipOut              bool
}

// Forward clamps x, applies the linear and clamps the result.
func (c *clipLinear) Forward(x *tensor.Array) *tensor.Array {
	return scoped(func() *tensor.Array {
		if c.clipIn {
			x = tensor.MinimumScalar(tensor.MaximumScalar(x, c.inMin), c.inMax)
		}
		y := c.L.Forward(x)
		if c.clipOut {
			y = tensor.MinimumScalar(tensor.MaximumScalar(y, c.outMin), c.outMax)
		}
		return y
	})
}

// loadClipLinear loads name (name.linear.weight, or name.weight when a
// converter flattened it) and, when clipped, its four bounds.
func loadClipLinear(w *Weights, name string, in, out int, clipped bool) *clipLinear {
	lin := name
	if w.Has(name+".linear.weight") || w.Has(name+".linear.scales") {
		lin = name + ".linear"
	}
	c := &clipLinear{L: w.Linear(lin, in, out, false), inMin: math.Inf(-1), inMax: math.Inf(1), outMin: math.Inf(-1), outMax: math.Inf(1)}
	if !clipped {
		return c
	}
	bound := func(n string, def float64) float64 {
		if !w.Has(name + "." + n) {
			return def
		}
		t := w.Tensor(name + "." + n)
		if t.Size() != 1 {
			w.failf(name+"."+n, "shape %v, want a scalar", t.Shape())
		}
		return t.Item()
	}
	c.inMin, c.inMax = bound("input_min", c.inMin), bound("input_max", c.inMax)
	c.outMin, c.outMax = bound("output_min", c.outMin), bound("output_max", c.outMax)
	c.clipIn = !math.IsInf(c.inMin, -1) || !math.IsInf(c.inMax, 1)
	c.clipOut = !math.IsInf(c.outMin, -1) || !math.IsInf(c.outMax, 1)
	return c
}

// Gemma4Vision is Gemma 4's vision tower (Gemma4VisionModel) and its
// projection into the text model (Gemma4MultimodalEmbedder): patches are
// embedded with learned x and y position tables, run through
// bidirectional encoder layers with 2-D rotary positions, pooled k×k,
// scaled by √hidden, optionally standardised, then normed and projected to
// the text model's width.
type Gemma4Vision struct {
	cfg        *gemma4VisionConfig
	be         tensor.Backend
	dtype      tensor.DType
	PatchProj  Projection
	PosX, PosY *tensor.Array // [positions, hidden]
	Layers     []*gemma4VisionLayer
	StdBias    *tensor.Array // [hidden] float32, nil without standardisation
	StdScale   *tensor.Array
	EmbedNorm  *RMSNorm
	EmbedProj  Projection // hidden → text hidden
	invFreq    []float32
	act        func(*tensor.Array) *tensor.Array
}

type gemma4VisionLayer struct {
	InNorm, PostAttnNorm, PreFFNorm, PostFFNorm *RMSNorm
	Q, K, V, O                                  *clipLinear
	QNorm, KNorm, VNorm                         *RMSNorm
	Gate, Up, Down                              *clipLinear
}

// loadGemma4Vision builds the tower from w, whose prefix the caller set to
// the tower's (embedPrefix is the projection's).
func loadGemma4Vision(w *Weights, cfg *gemma4VisionConfig, towerPrefix, embedPrefix string, textHidden int) *Gemma4Vision {
	d, hd := cfg.Hidden, cfg.HeadDim
	v := &Gemma4Vision{cfg: cfg, be: w.Backend()}
	w.prefix = towerPrefix
	v.PatchProj = w.Linear("patch_embedder.input_proj", 3*cfg.Patch*cfg.Patch, d, false)
	table := w.Tensor("patch_embedder.position_embedding_table", 2, cfg.PosEmbed, d)
	v.dtype = table.DType()
	v.PosX = w.Own(tensor.Squeeze(tensor.SliceAxis(table, 0, 0, 1), 0))
	v.PosY = w.Own(tensor.Squeeze(tensor.SliceAxis(table, 0, 1, 2), 0))
	v.act = tensor.GeluApprox
	if cfg.Activation == "gelu" {
		v.act = tensor.Gelu
	}
	for i := range cfg.Layers {
		p := "encoder.layers." + strconv.Itoa(i) + "."
		l := &gemma4VisionLayer{
			InNorm:       w.RMSNorm(p+"input_layernorm", d, cfg.Eps),
			PostAttnNorm: w.RMSNorm(p+"post_attention_layernorm", d, cfg.Eps),
			PreFFNorm:    w.RMSNorm(p+"pre_feedforward_layernorm", d, cfg.Eps),
			PostFFNorm:   w.RMSNorm(p+"post_feedforward_layernorm", d, cfg.Eps),
			Q:            loadClipLinear(w, p+"self_attn.q_proj", d, cfg.Heads*hd, cfg.Clipped),
			K:            loadClipLinear(w, p+"self_attn.k_proj", d, cfg.KVHeads*hd, cfg.Clipped),
			V:            loadClipLinear(w, p+"self_attn.v_proj", d, cfg.KVHeads*hd, cfg.Clipped),
			O:            loadClipLinear(w, p+"self_attn.o_proj", cfg.Heads*hd, d, cfg.Clipped),
			QNorm:        w.RMSNorm(p+"self_attn.q_norm", hd, cfg.Eps),
			KNorm:        w.RMSNorm(p+"self_attn.k_norm", hd, cfg.Eps),
			VNorm:        &RMSNorm{Eps: cfg.Eps},
			Gate:         loadClipLinear(w, p+"mlp.gate_proj", d, cfg.Intermediate, cfg.Clipped),
			Up:           loadClipLinear(w, p+"mlp.up_proj", d, cfg.Intermediate, cfg.Clipped),
			Down:         loadClipLinear(w, p+"mlp.down_proj", cfg.Intermediate, d, cfg.Clipped),
		}
		v.Layers = append(v.Layers, l)
	}
	if cfg.Standardize {
		v.StdBias = w.Own(tensor.AsType(w.Tensor("std_bias", d), tensor.Float32))
		v.StdScale = w.Own(tensor.AsType(w.Tensor("std_scale", d), tensor.Float32))
	}
	w.prefix = embedPrefix
	v.EmbedNorm = &RMSNorm{Eps: cfg.Eps}
	v.EmbedProj = w.Linear("embedding_projection", d, textHidden, false)
	// axial rope: the same rates for x and y, over a quarter of the head each
	// (a rotate-half pair per half of the head), as transformers computes
	// them in float32
	spatial := hd / 2
	for i := 0; i < spatial; i += 2 {
		e := float32(i) / float32(spatial)
		v.invFreq = append(v.invFreq, float32(1/float32(math.Pow(cfg.theta(), float64(e)))))
	}
	return v
}

// rope returns cos and sin [1, n, 1, headDim] for the patches: the first
// half of the head turns with x, the second with y, each half laid out as
// (rates, rates) for rotate-half.
func (v *Gemma4Vision) rope(img *media.Gemma4Image) (*tensor.Array, *tensor.Array) {
	n, hd, nf := img.Patches(), v.cfg.HeadDim, len(v.invFreq)
	cs := make([]float32, n*hd)
	sn := make([]float32, n*hd)
	for p := range n {
		for axis, pos := range [2]int32{img.X[p], img.Y[p]} {
			for i, f := range v.invFreq {
				a := float32(pos) * f
				c, s := float32(math.Cos(float64(a))), float32(math.Sin(float64(a)))
				base := p*hd + axis*2*nf
				cs[base+i], cs[base+nf+i] = c, c
				sn[base+i], sn[base+nf+i] = s, s
			}
		}
	}
	mk := func(x []float32) *tensor.Array {
		a := tensor.Reshape(float32sOn(v.be, x), 1, n, 1, hd)
		if v.dtype != tensor.Float32 {
			a = tensor.AsType(a, v.dtype)
		}
		return a
	}
	return mk(cs), mk(sn)
}

// applyAxialRope rotates x [1, n, heads, hd] by cos and sin: each half of
// the head is rotated with rotate-half inside it.
func applyAxialRope(x, cos, sin *tensor.Array) *tensor.Array {
	return scoped(func() *tensor.Array {
		hd := x.Dim(3)
		q := hd / 4
		p := tensor.Split(x, []int{q, q, q, q}, 3)
		rh := tensor.Concatenate([]*tensor.Array{tensor.Neg(p[1]), p[0], tensor.Neg(p[3]), p[2]}, 3)
		return tensor.Add(tensor.Mul(x, cos), tensor.Mul(rh, sin))
	})
}

func (l *gemma4VisionLayer) forward(x, cos, sin *tensor.Array, cfg *gemma4VisionConfig, act func(*tensor.Array) *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	n, hd := x.Dim(1), cfg.HeadDim
	h := l.InNorm.Forward(x)
	heads := func(p *clipLinear, nh int, norm *RMSNorm, rot bool) *tensor.Array {
		y := norm.Forward(tensor.Reshape(p.Forward(h), 1, n, nh, hd))
		if rot {
			y = applyAxialRope(y, cos, sin)
		}
		return tensor.Transpose(y, 0, 2, 1, 3)
	}
	q := heads(l.Q, cfg.Heads, l.QNorm, true)
	k := heads(l.K, cfg.KVHeads, l.KNorm, true)
	v := heads(l.V, cfg.KVHeads, l.VNorm, false)
	o := denseAttention(q, k, v, cfg.Heads/cfg.KVHeads)
	o = tensor.Reshape(tensor.Transpose(o, 0, 2, 1, 3), 1, n, cfg.Heads*hd)
	r := tensor.Add(x, l.PostAttnNorm.Forward(l.O.Forward(o)))
	f := l.PreFFNorm.Forward(r)
	f = l.Down.Forward(tensor.Mul(act(l.Gate.Forward(f)), l.Up.Forward(f)))
	return sc.Keep(tensor.Add(r, l.PostFFNorm.Forward(f)))
}

// denseAttention is unmasked attention with scale 1 over q [1, H, n, D]
// and k, v [1, Hkv, n, D] as transformers' eager attention computes it
// (scores in the activation dtype, softmax in float32), by matmuls over
// blocks of queries: an image's thousands of patches all attend to one
// another, which the fused SDPA kernels, built for causal prefill and
// decode, do far more slowly.
func denseAttention(q, k, v *tensor.Array, groups int) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	if groups > 1 {
		rep := func(x *tensor.Array) *tensor.Array {
			b, h, n, d := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3)
			x = tensor.BroadcastTo(tensor.ExpandDims(x, 2), b, h, groups, n, d)
			return tensor.Reshape(x, b, h*groups, n, d)
		}
		k, v = rep(k), rep(v)
	}
	kt := tensor.Transpose(k, 0, 1, 3, 2)
	n := q.Dim(2)
	const block = 1024
	var outs []*tensor.Array
	for s := 0; s < n; s += block {
		qb := tensor.SliceAxis(q, 2, s, min(s+block, n))
		w := tensor.Softmax(tensor.AsType(tensor.Matmul(qb, kt), tensor.Float32), -1)
		o := tensor.Matmul(tensor.AsType(w, v.DType()), v)
		tensor.Eval(o)
		outs = append(outs, o)
	}
	if len(outs) == 1 {
		return sc.Keep(outs[0])
	}
	return sc.Keep(tensor.Concatenate(outs, 2))
}

// SoftTokens is the number of soft tokens an image gives.
func (v *Gemma4Vision) SoftTokens(img *media.Gemma4Image) int {
	k := v.cfg.Pool
	return (img.GridW / k) * (img.GridH / k)
}

// Tower runs the vision tower on one preprocessed image and returns its
// pooled soft tokens [soft, hidden] in float32 (Gemma4VisionModel's output:
// padding patches, which only the processor's fixed-size batches carry,
// are never formed).
func (v *Gemma4Vision) Tower(img *media.Gemma4Image) (out *tensor.Array, err error) {
	k := v.cfg.Pool
	if img.PatchDim != 3*v.cfg.Patch*v.cfg.Patch {
		return nil, fmt.Errorf("%w: patches of %d values for a tower of %d-pixel patches", ErrUnsupported, img.PatchDim, v.cfg.Patch)
	}
	if img.GridW%k != 0 || img.GridH%k != 0 || img.Patches() != img.GridW*img.GridH {
		return nil, fmt.Errorf("%w: a %dx%d patch grid does not pool by %d", ErrUnsupported, img.GridW, img.GridH, k)
	}
	for i := range img.X {
		if int(img.X[i]) >= v.cfg.PosEmbed || int(img.Y[i]) >= v.cfg.PosEmbed || img.X[i] < 0 || img.Y[i] < 0 {
			return nil, fmt.Errorf("%w: patch position (%d,%d) outside the tower's %d positions", ErrUnsupported, img.X[i], img.Y[i], v.cfg.PosEmbed)
		}
	}
	err = tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		n, d := img.Patches(), v.cfg.Hidden
		px := tensor.Reshape(float32sOn(v.be, img.Pixels), 1, n, img.PatchDim)
		px = tensor.MulScalar(tensor.SubScalar(px, 0.5), 2)
		if v.dtype != tensor.Float32 {
			px = tensor.AsType(px, v.dtype)
		}
		h := v.PatchProj.Forward(px)
		xs := tensor.FromInt32On(v.be, img.X, []int{n})
		ys := tensor.FromInt32On(v.be, img.Y, []int{n})
		h = tensor.Add(h, tensor.ExpandDims(tensor.Add(tensor.Take(v.PosX, xs, 0), tensor.Take(v.PosY, ys, 0)), 0))
		cos, sin := v.rope(img)
		for _, l := range v.Layers {
			h = l.forward(h, cos, sin, v.cfg, v.act)
		}
		// k×k average pooling over the row-major grid, in float32
		h = tensor.AsType(h, tensor.Float32)
		h = tensor.Reshape(h, img.GridH/k, k, img.GridW/k, k, d)
		h = tensor.MulScalar(tensor.Sum(h, []int{1, 3}, false), float64(float32(1)/float32(k*k)))
		h = tensor.Reshape(h, -1, d)
		h = tensor.MulScalar(h, math.Sqrt(float64(d)))
		if v.StdBias != nil {
			h = tensor.Mul(tensor.Sub(h, v.StdBias), v.StdScale)
		}
		if v.dtype != tensor.Float32 {
			h = tensor.AsType(h, v.dtype)
		}
		out = sc.Keep(h)
	})
	return out, err
}

// Project maps tower output [soft, hidden] into the text model's
// embedding space [soft, text hidden] (Gemma4MultimodalEmbedder).
func (v *Gemma4Vision) Project(t *tensor.Array) (out *tensor.Array, err error) {
	err = tensor.Try(func() { out = scoped(func() *tensor.Array { return v.EmbedProj.Forward(v.EmbedNorm.Forward(t)) }) })
	return out, err
}
