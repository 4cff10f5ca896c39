package model

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// ropeSpec is everything the generic tier needs to rotate one layer's
// queries and keys: the rotation (or two, for longrope's short and long
// factors) and the attention factor yarn and longrope multiply the
// rotated features by.
type ropeSpec struct {
	short *Rope
	// long, when set, replaces short for a forward whose last position is
	// beyond switchAt (longrope: transformers switches to the long
	// factors once the sequence outgrows original_max_position_embeddings).
	long     *Rope
	switchAt int
	// scale multiplies each head's features before rotation ([head_dim]:
	// the attention factor on the rotated dims, 1 on the rest), or nil.
	scale *tensor.Array
}

// applySpans rotates x [B, H, T, D] whose tokens divide into spans.
func (r *ropeSpec) applySpans(x *tensor.Array, spans []kv.Span) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	if r.scale != nil {
		s := r.scale
		if s.DType() != x.DType() {
			s = tensor.AsType(s, x.DType())
		}
		x = tensor.Mul(x, s)
	}
	pick := func(s kv.Span) *Rope {
		if r.long != nil && s.Offset+s.Len > r.switchAt {
			return r.long
		}
		return r.short
	}
	first := pick(spans[0])
	same := true
	for _, s := range spans[1:] {
		same = same && pick(s) == first
	}
	if same {
		return sc.Keep(first.ApplySpans(x, spans))
	}
	parts := make([]*tensor.Array, len(spans))
	for i, s := range spans {
		parts[i] = pick(s).Apply(tensor.SliceAxis(x, 2, s.Start, s.Start+s.Len), s.Offset)
	}
	return sc.Keep(tensor.Concatenate(parts, 2))
}

// ropeExtra holds the rope_parameters fields only yarn and longrope use.
type ropeExtra struct {
	AttentionFactor *float64  `json:"attention_factor"`
	BetaFast        float64   `json:"beta_fast"`
	BetaSlow        float64   `json:"beta_slow"`
	Mscale          float64   `json:"mscale"`
	MscaleAllDim    float64   `json:"mscale_all_dim"`
	Truncate        *bool     `json:"truncate"`
	ShortFactor     []float64 `json:"short_factor"`
	LongFactor      []float64 `json:"long_factor"`
}

// newRopeSpec builds the rotation of dims features of heads headDim wide
// for one rope type (default, linear, llama3, yarn, longrope), computed
// as transformers' rope initialisers compute their inverse frequencies.
// maxPos is config.json's max_position_embeddings.
func newRopeSpec(w *Weights, p RopeParams, ex ropeExtra, dims, headDim, maxPos int, traditional bool) (*ropeSpec, error) {
	if dims <= 0 || dims%2 != 0 || dims > headDim {
		return nil, fmt.Errorf("%w: config.json: %d rotary dims for head dim %d", ErrCheckpoint, dims, headDim)
	}
	own := func(inv []float64) (*tensor.Array, error) {
		waves := make([]float32, len(inv))
		for i, f := range inv {
			waves[i] = float32(1 / f)
		}
		var a *tensor.Array
		if err := tensor.Try(func() { a = float32sOn(w.Backend(), waves) }); err != nil {
			return nil, err
		}
		return w.Own(a), nil
	}
	// base inverse frequencies, in float32 as torch computes them
	base := make([]float64, dims/2)
	for i := range base {
		base[i] = float64(float32(math.Pow(p.Theta, float64(2*i)/float64(dims))))
	}
	spec := &ropeSpec{}
	factor := 1.0
	switch p.Type {
	case "default", "linear", "llama3":
		r, err := NewRope(w, p, dims)
		if err != nil {
			return nil, err
		}
		r.Traditional = traditional
		spec.short = r
		return spec, nil
	case "yarn":
		orig := float64(p.OriginalMaxPositions)
		if orig == 0 {
			orig = float64(maxPos)
		}
		factor = p.Factor
		if factor == 0 {
			factor = float64(maxPos) / orig
		}
		mscale := func(s, m float64) float64 {
			if s <= 1 {
				return 1
			}
			return 0.1*m*math.Log(s) + 1
		}
		att := mscale(factor, 1)
		if ex.Mscale != 0 && ex.MscaleAllDim != 0 {
			att = mscale(factor, ex.Mscale) / mscale(factor, ex.MscaleAllDim)
		}
		if ex.AttentionFactor != nil {
			att = *ex.AttentionFactor
		}
		fast, slow := ex.BetaFast, ex.BetaSlow
		if fast == 0 {
			fast = 32
		}
		if slow == 0 {
			slow = 1
		}
		corr := func(rot float64) float64 {
			return float64(dims) * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(p.Theta))
		}
		low, high := corr(fast), corr(slow)
		if ex.Truncate == nil || *ex.Truncate {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = math.Max(low, 0), math.Min(high, float64(dims-1))
		if low == high {
			high += 0.001
		}
		inv := make([]float64, len(base))
		for i, b := range base {
			ramp := float64(float32((float64(i) - low) / (high - low)))
			ramp = math.Min(math.Max(ramp, 0), 1)
			extra := 1 - ramp
			extrap := float64(float32(1 / b))
			interp := float64(float32(1 / (factor * b)))
			inv[i] = float64(float32(interp*(1-extra) + extrap*extra))
		}
		f, err := own(inv)
		if err != nil {
			return nil, err
		}
		spec.short = &Rope{Dims: dims, Scale: 1, Freqs: f, Traditional: traditional}
		return spec, spec.setScale(w, att, dims, headDim)
	case "longrope", "su":
		orig := p.OriginalMaxPositions
		if orig == 0 {
			return nil, fmt.Errorf("%w: config.json: longrope without original_max_position_embeddings", ErrCheckpoint)
		}
		if len(ex.ShortFactor) != dims/2 || len(ex.LongFactor) != dims/2 {
			return nil, fmt.Errorf("%w: config.json: longrope factors of %d and %d entries for %d rotary dims", ErrCheckpoint, len(ex.ShortFactor), len(ex.LongFactor), dims)
		}
		factor = p.Factor
		if factor == 0 {
			factor = float64(maxPos) / float64(orig)
		}
		att := 1.0
		if factor > 1 {
			att = math.Sqrt(1 + math.Log(factor)/math.Log(float64(orig)))
		}
		if ex.AttentionFactor != nil {
			att = *ex.AttentionFactor
		}
		mk := func(fs []float64) (*Rope, error) {
			inv := make([]float64, len(base))
			for i, b := range base {
				inv[i] = float64(float32(1 / (float64(float32(fs[i])) * b)))
			}
			f, err := own(inv)
			if err != nil {
				return nil, err
			}
			return &Rope{Dims: dims, Scale: 1, Freqs: f, Traditional: traditional}, nil
		}
		var err error
		if spec.short, err = mk(ex.ShortFactor); err != nil {
			return nil, err
		}
		if spec.long, err = mk(ex.LongFactor); err != nil {
			return nil, err
		}
		spec.switchAt = orig
		return spec, spec.setScale(w, att, dims, headDim)
	}
	return nil, fmt.Errorf("%w: rope type %q (supported: default, linear, llama3, yarn, longrope)", ErrUnsupported, p.Type)
}

// setScale records the attention factor att for the first dims of each
// head (none when it is 1).
func (r *ropeSpec) setScale(w *Weights, att float64, dims, headDim int) error {
	if float32(att) == 1 {
		return nil
	}
	v := make([]float32, headDim)
	for i := range v {
		v[i] = 1
		if i < dims {
			v[i] = float32(att)
		}
	}
	var a *tensor.Array
	if err := tensor.Try(func() { a = float32sOn(w.Backend(), v) }); err != nil {
		return err
	}
	r.scale = w.Own(a)
	return nil
}
