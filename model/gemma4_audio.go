package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/mlxgo/mlxgo/model/media"
	"github.com/mlxgo/mlxgo/tensor"
)

// gemma4AudioConfig is Gemma4AudioConfig with transformers' defaults.
type gemma4AudioConfig struct {
	Hidden     int     `json:"hidden_size"`
	Layers     int     `json:"num_hidden_layers"`
	Heads      int     `json:"num_attention_heads"`
	Activation string  `json:"hidden_act"`
	Channels   []int   `json:"subsampling_conv_channels"`
	ConvKernel int     `json:"conv_kernel_size"`
	Residual   float64 `json:"residual_weight"`
	Chunk      int     `json:"attention_chunk_size"`
	Left       int     `json:"attention_context_left"`
	Right      int     `json:"attention_context_right"`
	LogitCap   float64 `json:"attention_logit_cap"`
	Invalid    float64 `json:"attention_invalid_logits_value"`
	Clipped    bool    `json:"use_clipped_linears"`
	Eps        float32 `json:"rms_norm_eps"`
	GradClip   float64 `json:"gradient_clipping"`
	OutputDims int     `json:"output_proj_dims"`
}

func parseGemma4AudioConfig(raw json.RawMessage) (*gemma4AudioConfig, error) {
	c := &gemma4AudioConfig{Hidden: 1024, Layers: 12, Heads: 8, Activation: "silu", Channels: []int{128, 32}, ConvKernel: 5,
		Residual: 0.5, Chunk: 12, Left: 13, LogitCap: 50, Invalid: -1e9, Clipped: true, Eps: 1e-6, GradClip: 1e10, OutputDims: 1536}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%w: config.json audio_config: %v", ErrCheckpoint, err)
	}
	if c.Hidden <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.Hidden%c.Heads != 0 || len(c.Channels) != 2 ||
		c.Channels[0] <= 0 || c.Channels[1] <= 0 || c.ConvKernel <= 0 || c.Left < 1 || c.OutputDims <= 0 || c.LogitCap <= 0 {
		return nil, fmt.Errorf("%w: config.json audio_config: hidden %d, layers %d, heads %d, channels %v, kernel %d, left context %d",
			ErrCheckpoint, c.Hidden, c.Layers, c.Heads, c.Channels, c.ConvKernel, c.Left)
	}
	if c.Right != 0 {
		return nil, fmt.Errorf("%w: gemma4 audio attention_context_right %d (only 0)", ErrUnsupported, c.Right)
	}
	if c.Activation != "silu" && c.Activation != "swish" {
		return nil, fmt.Errorf("%w: gemma4 audio hidden_act %q", ErrUnsupported, c.Activation)
	}
	return c, nil
}

// Gemma4Audio is Gemma 4's audio tower (Gemma4AudioModel, a USM-style
// Conformer) and its projection into the text model: two stride-2 3×3
// convolutions (each masked, layer-normed and ReLU'd) and a linear over
// the flattened frequency × channel features, then Conformer blocks
// (half-step feed-forward, local self-attention over the last
// attention_context_left-1 frames with relative position logits and a
// tanh softcap, a causal depthwise convolution block, another half-step
// feed-forward), an output projection, and the multimodal embedder. It
// computes in float32.
type Gemma4Audio struct {
	cfg        *gemma4AudioConfig
	be         tensor.Backend
	Conv0      [9]*tensor.Array // [1, c0] per kernel tap (dy·3+dx)
	Conv1      [9]*tensor.Array // [c0, c1]
	Norm0      *tensor.Array
	Norm1      *tensor.Array
	InputProj  Projection
	Layers     []*gemma4AudioLayer
	OutputProj Projection
	EmbedNorm  *RMSNorm
	EmbedProj  Projection
	relPos     *tensor.Array // [context/2+1, hidden] sinusoids, positions context/2 … 0
	freqOut    int
	// attnOverride, when set, stands in for a layer's attention (tests:
	// the fixture's reference ran transformers' eager attention, whose
	// float mask inverts the audio tower's, see gemma4_audio_test.go).
	attnOverride func(l *gemma4AudioLayer, x *tensor.Array, valid []bool) *tensor.Array
}

type gemma4AudioFF struct {
	Pre, Post *RMSNorm
	Up, Down  *clipLinear
}

type gemma4AudioLayer struct {
	FF1, FF2                  *gemma4AudioFF
	Q, K, V, Post             *clipLinear
	RelK                      Projection
	QScale                    *tensor.Array // q_scale·softplus(per_dim_scale) [D]
	NormPreAttn, NormPostAttn *RMSNorm
	NormOut                   *RMSNorm
	ConvPre, ConvNorm         *RMSNorm
	Start, End                *clipLinear
	Depthwise                 []*tensor.Array // [1, hidden] per tap
}

func loadGemma4Audio(w *Weights, cfg *gemma4AudioConfig, towerPrefix, embedPrefix string, textHidden int) *Gemma4Audio {
	oldCast := w.cast
	w.cast = tensor.Float32
	defer func() { w.cast = oldCast }()
	w.prefix = towerPrefix
	d, c0, c1 := cfg.Hidden, cfg.Channels[0], cfg.Channels[1]
	a := &Gemma4Audio{cfg: cfg, be: w.Backend()}
	// conv weights are PyTorch's [out, in, kh, kw] or, converted for MLX,
	// [out, kh, kw, in]
	taps := func(name string, cout, cin int) [9]*tensor.Array {
		wt := w.Tensor(name, cout, -1, -1, -1)
		mlx := wt.Dim(1) == 3 && wt.Dim(2) == 3 && wt.Dim(3) == cin && !(wt.Dim(1) == cin && wt.Dim(3) == 3)
		if !mlx && (wt.Dim(1) != cin || wt.Dim(2) != 3 || wt.Dim(3) != 3) {
			w.failf(w.prefix+name, "shape %v, want [%d, %d, 3, 3] (or MLX's [%d, 3, 3, %d])", wt.Shape(), cout, cin, cout, cin)
		}
		var out [9]*tensor.Array
		for k := range 9 {
			dy, dx := k/3, k%3
			var s *tensor.Array
			if mlx {
				s = tensor.Slice(wt, []int{0, dy, dx, 0}, []int{cout, dy + 1, dx + 1, cin}, nil)
			} else {
				s = tensor.Slice(wt, []int{0, 0, dy, dx}, []int{cout, cin, dy + 1, dx + 1}, nil)
			}
			out[k] = w.Own(tensor.Contiguous(tensor.Transpose(tensor.Reshape(s, cout, cin))))
		}
		return out
	}
	p := "subsample_conv_projection."
	a.Conv0 = taps(p+"layer0.conv.weight", c0, 1)
	a.Conv1 = taps(p+"layer1.conv.weight", c1, c0)
	a.Norm0 = w.Tensor(p+"layer0.norm.weight", c0)
	a.Norm1 = w.Tensor(p+"layer1.norm.weight", c1)
	// the mel bins after two stride-2 convolutions (transformers sizes the
	// projection as channels[0]/4, which is the same for 128 bins)
	in, err := w.set.Info(w.prefix + p + "input_proj_linear.weight")
	if err != nil || len(in.Shape) != 2 || in.Shape[1]%c1 != 0 {
		w.failf(w.prefix+p+"input_proj_linear.weight", "want [%d, bins/4·%d]", d, c1)
	}
	a.freqOut = in.Shape[1] / c1
	a.InputProj = w.Linear(p+"input_proj_linear", in.Shape[1], d, false)
	hd := d / cfg.Heads
	qScale := math.Pow(float64(hd), -0.5) / math.Ln2
	ff := func(p string) *gemma4AudioFF {
		return &gemma4AudioFF{
			Pre:  w.RMSNorm(p+"pre_layer_norm", d, 1e-6),
			Post: w.RMSNorm(p+"post_layer_norm", d, 1e-6),
			Up:   loadClipLinear(w, p+"ffw_layer_1", d, 4*d, cfg.Clipped),
			Down: loadClipLinear(w, p+"ffw_layer_2", 4*d, d, cfg.Clipped),
		}
	}
	for i := range cfg.Layers {
		p := "layers." + strconv.Itoa(i) + "."
		l := &gemma4AudioLayer{
			FF1:          ff(p + "feed_forward1."),
			FF2:          ff(p + "feed_forward2."),
			Q:            loadClipLinear(w, p+"self_attn.q_proj", d, d, cfg.Clipped),
			K:            loadClipLinear(w, p+"self_attn.k_proj", d, d, cfg.Clipped),
			V:            loadClipLinear(w, p+"self_attn.v_proj", d, d, cfg.Clipped),
			Post:         loadClipLinear(w, p+"self_attn.post", d, d, cfg.Clipped),
			RelK:         w.Linear(p+"self_attn.relative_k_proj", d, d, false),
			NormPreAttn:  w.RMSNorm(p+"norm_pre_attn", d, 1e-6),
			NormPostAttn: w.RMSNorm(p+"norm_post_attn", d, 1e-6),
			NormOut:      w.RMSNorm(p+"norm_out", d, 1e-6),
			ConvPre:      w.RMSNorm(p+"lconv1d.pre_layer_norm", d, cfg.Eps),
			ConvNorm:     w.RMSNorm(p+"lconv1d.conv_norm", d, cfg.Eps),
			Start:        loadClipLinear(w, p+"lconv1d.linear_start", d, 2*d, cfg.Clipped),
			End:          loadClipLinear(w, p+"lconv1d.linear_end", d, d, cfg.Clipped),
		}
		pds := w.Tensor(p+"self_attn.per_dim_scale", hd)
		l.QScale = w.Own(tensor.MulScalar(tensor.Softplus(pds), qScale))
		// PyTorch's [d, 1, K], or MLX's [d, K, 1]
		dw := w.Tensor(p+"lconv1d.depthwise_conv1d.weight", d, -1, -1)
		kAxis := 2
		if dw.Dim(1) == cfg.ConvKernel && dw.Dim(2) == 1 && cfg.ConvKernel != 1 {
			kAxis = 1
		} else if dw.Dim(1) != 1 || dw.Dim(2) != cfg.ConvKernel {
			w.failf(w.prefix+p+"lconv1d.depthwise_conv1d.weight", "shape %v, want [%d, 1, %d]", dw.Shape(), d, cfg.ConvKernel)
		}
		for k := range cfg.ConvKernel {
			l.Depthwise = append(l.Depthwise, w.Own(tensor.Contiguous(tensor.Reshape(tensor.SliceAxis(dw, kAxis, k, k+1), 1, d))))
		}
		a.Layers = append(a.Layers, l)
	}
	a.OutputProj = w.Linear("output_proj", d, cfg.OutputDims, true)
	w.prefix = embedPrefix
	a.EmbedNorm = &RMSNorm{Eps: cfg.Eps}
	a.EmbedProj = w.Linear("embedding_projection", cfg.OutputDims, textHidden, false)

	// relative position sinusoids [sin | cos] for positions context/2 … 0,
	// in float32 as transformers computes them
	ctx := cfg.Chunk + cfg.Left - 1 + cfg.Right
	nt := d / 2
	inc := math.Log(10000) / float64(max(nt-1, 1))
	inv := make([]float32, nt)
	for i := range inv {
		inv[i] = float32(math.Exp(float64(float32(i) * float32(-inc))))
	}
	rows := ctx/2 + 1
	pe := make([]float32, rows*d)
	for r := range rows {
		pos := float32(ctx/2 - r)
		for i, f := range inv {
			st := pos * f
			pe[r*d+i] = float32(math.Sin(float64(st)))
			pe[r*d+nt+i] = float32(math.Cos(float64(st)))
		}
	}
	a.relPos = w.Own(tensor.Reshape(float32sOn(a.be, pe), rows, d))
	return a
}

// conv2x applies a 3×3 stride-2 convolution with zero padding 1 to x [T,
// F, Cin] (channels last) with per-tap weights [Cin, Cout], then the layer
// norm over channels and ReLU: [ceil(T/2), ceil(F/2), Cout].
func conv2x(x *tensor.Array, taps [9]*tensor.Array, norm *tensor.Array, eps float32) *tensor.Array {
	t, f, cin := x.Dim(0), x.Dim(1), x.Dim(2)
	cout := taps[0].Dim(1)
	to, fo := (t+2-3)/2+1, (f+2-3)/2+1
	zr := tensor.FullOn(x.Backend(), []int{1, f, cin}, 0, x.DType())
	xp := tensor.Concatenate([]*tensor.Array{zr, x, zr}, 0)
	zc := tensor.FullOn(x.Backend(), []int{t + 2, 1, cin}, 0, x.DType())
	xp = tensor.Concatenate([]*tensor.Array{zc, xp, zc}, 1)
	var acc *tensor.Array
	for k, wk := range taps {
		dy, dx := k/3, k%3
		s := tensor.Slice(xp, []int{dy, dx, 0}, []int{dy + 2*(to-1) + 1, dx + 2*(fo-1) + 1, cin}, []int{2, 2, 1})
		y := tensor.Matmul(tensor.Reshape(s, to*fo, cin), wk)
		if acc == nil {
			acc = y
		} else {
			acc = tensor.Add(acc, y)
		}
	}
	y := tensor.LayerNorm(tensor.Reshape(acc, to, fo, cout), norm, nil, eps)
	return tensor.MaximumScalar(y, 0)
}

// maskRows multiplies x [T, ...] by the 0/1 row mask.
func maskRows(x *tensor.Array, valid []bool) *tensor.Array {
	m := make([]float32, len(valid))
	for i, v := range valid {
		if v {
			m[i] = 1
		}
	}
	shape := []int{len(valid)}
	for range x.NDim() - 1 {
		shape = append(shape, 1)
	}
	return tensor.Mul(x, tensor.Reshape(float32sOn(x.Backend(), m), shape...))
}

func every2(v []bool) []bool {
	out := make([]bool, (len(v)+1)/2)
	for i := range out {
		out[i] = v[2*i]
	}
	return out
}

func (a *Gemma4Audio) gradClip(x *tensor.Array) *tensor.Array {
	g := min(a.cfg.GradClip, math.MaxFloat32)
	return tensor.MinimumScalar(tensor.MaximumScalar(x, -g), g)
}

func (f *gemma4AudioFF) forward(a *Gemma4Audio, x *tensor.Array) *tensor.Array {
	return scoped(func() *tensor.Array {
		h := f.Pre.Forward(a.gradClip(x))
		h = f.Down.Forward(tensor.Silu(f.Up.Forward(h)))
		h = f.Post.Forward(a.gradClip(h))
		return tensor.Add(x, tensor.MulScalar(h, a.cfg.Residual))
	})
}

// attend is the chunked local attention, computed densely: frame t sees
// frames t-left+2 … t (those valid), with logits q·k + q·relk(t-s),
// softcapped, and masked entries at the invalid-logits value.
func (l *gemma4AudioLayer) attend(a *Gemma4Audio, x *tensor.Array, allowed *tensor.Array, relIdx *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	cfg := a.cfg
	t, d := x.Dim(1), cfg.Hidden
	nh, hd := cfg.Heads, d/cfg.Heads
	split := func(y *tensor.Array) *tensor.Array {
		return tensor.Transpose(tensor.Reshape(y, 1, t, nh, hd), 0, 2, 1, 3)
	}
	q := split(tensor.Mul(l.Q.Forward(x), tensor.Reshape(tensor.BroadcastTo(l.QScale, nh, hd), 1, 1, d)))
	k := split(tensor.MulScalar(l.K.Forward(x), math.Log(1+math.E)/math.Ln2))
	v := split(l.V.Forward(x))
	rel := l.RelK.Forward(a.relPos) // [P, d]
	p := rel.Dim(0)
	relk := tensor.Transpose(tensor.Reshape(rel, p, nh, hd), 1, 2, 0) // [nh, hd, P]
	ac := tensor.Matmul(q, tensor.Transpose(k, 0, 1, 3, 2))           // [1, nh, t, t]
	bdSmall := tensor.Matmul(q, tensor.ExpandDims(relk, 0))           // [1, nh, t, P]
	bd := tensor.TakeAlongAxis(bdSmall, tensor.BroadcastTo(relIdx, 1, nh, t, t), 3)
	lg := tensor.MulScalar(tensor.Tanh(tensor.DivScalar(tensor.Add(ac, bd), cfg.LogitCap)), cfg.LogitCap)
	lg = tensor.Where(allowed, lg, tensor.FullOn(a.be, []int{1}, cfg.Invalid, tensor.Float32))
	w := tensor.Softmax(lg, -1)
	o := tensor.Matmul(w, v) // [1, nh, t, hd]
	o = tensor.Reshape(tensor.Transpose(o, 0, 2, 1, 3), 1, t, d)
	return sc.Keep(l.Post.Forward(o))
}

func (l *gemma4AudioLayer) lconv(a *Gemma4Audio, x *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	t, d := x.Dim(1), a.cfg.Hidden
	h := l.Start.Forward(l.ConvPre.Forward(x))
	parts := tensor.Split(h, []int{d, d}, 2)
	h = tensor.Mul(parts[0], tensor.Sigmoid(parts[1]))
	kk := len(l.Depthwise)
	hp := tensor.Concatenate([]*tensor.Array{tensor.FullOn(a.be, []int{1, kk - 1, d}, 0, h.DType()), h}, 1)
	var acc *tensor.Array
	for k, wk := range l.Depthwise {
		y := tensor.Mul(tensor.SliceAxis(hp, 1, k, k+t), wk)
		if acc == nil {
			acc = y
		} else {
			acc = tensor.Add(acc, y)
		}
	}
	h = tensor.Silu(l.ConvNorm.Forward(a.gradClip(acc)))
	return sc.Keep(tensor.Add(x, l.End.Forward(h)))
}

func (l *gemma4AudioLayer) forward(a *Gemma4Audio, x, allowed, relIdx *tensor.Array, valid []bool) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	h := l.FF1.forward(a, x)
	r := h
	h = l.NormPreAttn.Forward(a.gradClip(h))
	if a.attnOverride != nil {
		h = a.attnOverride(l, h, valid)
	} else {
		h = l.attend(a, h, allowed, relIdx)
	}
	h = tensor.Add(r, l.NormPostAttn.Forward(a.gradClip(h)))
	h = l.lconv(a, h)
	h = l.FF2.forward(a, h)
	return sc.Keep(l.NormOut.Forward(a.gradClip(h)))
}

// subsample runs the two convolution stages and the input projection:
// [1, frames/4, hidden] and the subsampled frames' validity.
func (a *Gemma4Audio) subsample(f *media.Gemma4Features) (*tensor.Array, []bool) {
	x := tensor.Reshape(float32sOn(a.be, f.Mel), f.Frames, f.Bins, 1)
	valid := f.Valid
	x = conv2x(maskRows(x, valid), a.Conv0, a.Norm0, a.cfg.Eps)
	valid = every2(valid)
	x = conv2x(maskRows(x, valid), a.Conv1, a.Norm1, a.cfg.Eps)
	valid = every2(valid)
	t := x.Dim(0)
	if x.Dim(1) != a.freqOut {
		panic(&tensor.Error{Op: "gemma4 audio", Err: fmt.Errorf("%w: %d bins after subsampling, the projection takes %d", tensor.ErrShape, x.Dim(1), a.freqOut)})
	}
	return tensor.ExpandDims(a.InputProj.Forward(tensor.Reshape(x, t, -1)), 0), valid
}

// bandMasks returns the attention's allowed keys [1, 1, t, t] (frame q
// sees s when 0 ≤ q-s < left-1 and s is valid) and each pair's row of the
// relative position table (context/2 - (q-s), clamped: entries outside the
// band are masked).
func (a *Gemma4Audio) bandMasks(t int, valid []bool) (*tensor.Array, *tensor.Array) {
	cfg := a.cfg
	win := cfg.Left - 1
	half := (cfg.Chunk + cfg.Left - 1 + cfg.Right) / 2
	allow := make([]byte, t*t)
	idx := make([]int32, t*t)
	for q := range t {
		for s := range t {
			dist := q - s
			if dist >= 0 && dist < win && valid[s] {
				allow[q*t+s] = 1
			}
			idx[q*t+s] = int32(min(max(half-dist, 0), half))
		}
	}
	return tensor.FromBytesOn(a.be, allow, []int{1, 1, t, t}, tensor.Bool, false), tensor.FromInt32On(a.be, idx, []int{1, 1, t, t})
}

// Tower runs the audio tower on a clip's features and returns the valid
// frames' outputs [soft tokens, output_proj_dims] in float32
// (Gemma4AudioModel's last_hidden_state with the padding frames dropped).
func (a *Gemma4Audio) Tower(f *media.Gemma4Features) (out *tensor.Array, err error) {
	if ((f.Bins+1)/2+1)/2 != a.freqOut {
		return nil, fmt.Errorf("%w: %d mel bins for an audio tower of %d subsampled bins", ErrUnsupported, f.Bins, a.freqOut)
	}
	n := f.SoftTokens()
	if n == 0 {
		return nil, fmt.Errorf("%w: audio too short for one soft token", media.ErrCorrupt)
	}
	err = tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		h, valid := a.subsample(f)
		t := h.Dim(1)
		allowed, relIdx := a.bandMasks(t, valid)
		for _, l := range a.Layers {
			h = l.forward(a, h, allowed, relIdx, valid)
		}
		h = a.OutputProj.Forward(h)
		h = tensor.Squeeze(tensor.SliceAxis(h, 1, 0, n), 0)
		out = sc.Keep(h)
	})
	return out, err
}

// Project maps tower output [soft, output dims] into the text model's
// embedding space (Gemma4MultimodalEmbedder).
func (a *Gemma4Audio) Project(t *tensor.Array) (out *tensor.Array, err error) {
	err = tensor.Try(func() { out = scoped(func() *tensor.Array { return a.EmbedProj.Forward(a.EmbedNorm.Forward(t)) }) })
	return out, err
}
