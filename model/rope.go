package model

import (
	"encoding/json"
	"fmt"
	"github.com/mlxgo/mlxgo/kv"
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// RopeParams is a rope configuration as config.json states it: the legacy
// rope_theta + rope_scaling pair, or transformers 5's rope_parameters
// (which holds the theta too).
type RopeParams struct {
	Type                 string  `json:"rope_type"`
	LegacyType           string  `json:"type"`
	Theta                float64 `json:"rope_theta"`
	Factor               float64 `json:"factor"`
	LowFreqFactor        float64 `json:"low_freq_factor"`
	HighFreqFactor       float64 `json:"high_freq_factor"`
	OriginalMaxPositions int     `json:"original_max_position_embeddings"`
	PartialRotaryFactor  float64 `json:"partial_rotary_factor"`
}

// ropeConfig collects rope settings from the three places configs keep them.
type ropeConfig struct {
	Theta      *float64        `json:"rope_theta"`
	Scaling    json.RawMessage `json:"rope_scaling"`
	Parameters json.RawMessage `json:"rope_parameters"`
}

// parseRope merges rope_parameters, rope_scaling and rope_theta (newest
// wins) with defaultTheta when none states it.
func parseRope(cfg *Config, defaultTheta float64) (RopeParams, error) {
	var rc ropeConfig
	if err := cfg.Decode(&rc); err != nil {
		return RopeParams{}, err
	}
	p := RopeParams{Theta: defaultTheta}
	for _, raw := range []json.RawMessage{rc.Scaling, rc.Parameters} {
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return p, fmt.Errorf("%w: rope parameters: %v", ErrCheckpoint, err)
		}
	}
	if rc.Theta != nil && (len(rc.Parameters) == 0 || string(rc.Parameters) == "null") {
		p.Theta = *rc.Theta
	}
	if p.Type == "" {
		p.Type = p.LegacyType
	}
	if p.Type == "" {
		p.Type = "default"
	}
	return p, nil
}

// Rope applies rotary embeddings with precomputed settings.
type Rope struct {
	Dims        int
	Base        float32
	Scale       float32
	Traditional bool
	Freqs       *tensor.Array // nil for plain base^(-2i/d) frequencies
}

// Apply rotates x [B, H, T, D] for positions offset, offset+1, ...
func (r *Rope) Apply(x *tensor.Array, offset int) *tensor.Array {
	return tensor.RoPE(x, tensor.RoPEOptions{Dims: r.Dims, Traditional: r.Traditional, Base: r.Base, Scale: r.Scale, Offset: offset, Freqs: r.Freqs})
}

// ApplySpans rotates x [B, H, T, D] whose tokens divide into spans (see
// kv.Spans): each span's tokens at its own offset, exactly as Apply
// rotates that span alone.
func (r *Rope) ApplySpans(x *tensor.Array, spans []kv.Span) *tensor.Array {
	if len(spans) == 1 {
		return r.Apply(x, spans[0].Offset)
	}
	ts := make([]tensor.RoPESpan, len(spans))
	for i, s := range spans {
		ts[i] = tensor.RoPESpan(s)
	}
	return tensor.RoPESpans(x, tensor.RoPEOptions{Dims: r.Dims, Traditional: r.Traditional, Base: r.Base, Scale: r.Scale, Freqs: r.Freqs}, ts)
}

// NewRope builds the rope for dims rotated features: "default" and
// "linear" scale positions, "llama3" computes per-frequency wavelengths
// (owned by w). Other types are refused rather than run wrong.
func NewRope(w *Weights, p RopeParams, dims int) (*Rope, error) {
	r := &Rope{Dims: dims, Base: float32(p.Theta), Scale: 1}
	switch p.Type {
	case "default":
	case "linear":
		if p.Factor != 0 {
			r.Scale = float32(1 / p.Factor)
		}
	case "llama3":
		freqs := llama3Freqs(p, dims)
		raw := make([]float32, len(freqs))
		for i, f := range freqs {
			raw[i] = float32(f)
		}
		var a *tensor.Array
		if err := tensor.Try(func() { a = float32sOn(w.Backend(), raw) }); err != nil {
			return nil, err
		}
		r.Freqs = w.Own(a)
	default:
		return nil, fmt.Errorf("%w: rope type %q (supported: default, linear, llama3)", ErrUnsupported, p.Type)
	}
	return r, nil
}

// llama3Freqs returns the wavelengths (1/inv_freq) of Llama 3.1's rope
// scaling: long wavelengths are stretched by factor, short ones kept, and
// the band between blended smoothly, computed as transformers does (in
// float32 for the base inverse frequencies).
func llama3Freqs(p RopeParams, dims int) []float64 {
	factor, low, high, old := p.Factor, p.LowFreqFactor, p.HighFreqFactor, float64(p.OriginalMaxPositions)
	if factor == 0 {
		factor = 8
	}
	if low == 0 {
		low = 1
	}
	if high == 0 {
		high = 4
	}
	if old == 0 {
		old = 8192
	}
	lowWave, highWave := old/low, old/high
	out := make([]float64, dims/2)
	for i := range out {
		inv := float64(float32(1 / math.Pow(p.Theta, float64(2*i)/float64(dims))))
		wave := 2 * math.Pi / inv
		scaled := inv
		if wave > lowWave {
			scaled = inv / factor
		}
		if !(wave < highWave) && !(wave > lowWave) {
			smooth := (old/wave - low) / (high - low)
			scaled = (1-smooth)*inv/factor + smooth*inv
		}
		out[i] = 1 / scaled
	}
	return out
}

// float32sOn makes a 1-D float32 array on be.
func float32sOn(be tensor.Backend, v []float32) *tensor.Array {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		bits := math.Float32bits(x)
		raw[4*i], raw[4*i+1], raw[4*i+2], raw[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	}
	return tensor.FromBytesOn(be, raw, []int{len(v)}, tensor.Float32, false)
}
