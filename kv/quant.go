package kv

import (
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/mlxgo/mlxgo/tensor"
)

// quantizedAttention is mlx-lm's quantized_scaled_dot_product_attention:
// scores = q·scale @ Kᵀ and out = softmax(scores) @ V, both as quantized
// matmuls that read the packed cache directly. Grouped-query heads share
// their KV head by viewing q as [B, Hkv, rep·L, D] (mlx-lm broadcasts a
// [B, Hkv, rep, L, D] view instead; the result is the same).
func quantizedAttention(q *tensor.Array, kv *QuantKV, o tensor.SDPAOptions) *tensor.Array {
	k, v := kv.Keys, kv.Values
	return quantizedAttend(q, k.W.Dim(1), o,
		func(qs *tensor.Array) *tensor.Array {
			return tensor.QuantizedMatmul(qs, k.W, k.Scales, k.Biases, true, kv.GroupSize, kv.Bits)
		},
		func(p *tensor.Array) *tensor.Array {
			return tensor.QuantizedMatmul(p, v.W, v.Scales, v.Biases, false, kv.GroupSize, kv.Bits)
		})
}

// quantizedAttend is quantizedAttention's arithmetic with the two products
// given: scores(qs) is qs @ Kᵀ for qs [B, Hkv, rep·L, D], values(p) is p @
// V for the probabilities [B, Hkv, rep·L, Tk]; hkv is the number of KV
// heads. The contiguous cache runs them on its packed arrays, the paged
// pool on its blocks (pagedQuantizedAttention).
func quantizedAttend(q *tensor.Array, hkv int, o tensor.SDPAOptions, scoresOf, valuesOf func(*tensor.Array) *tensor.Array) *tensor.Array {
	if q.NDim() != 4 {
		throwf("Attention", tensor.ErrShape, "queries %v (want [B, H, L, D])", q.Shape())
	}
	b, hq, l, d := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	if hkv == 0 || hq%hkv != 0 {
		throwf("Attention", tensor.ErrShape, "%d query heads for %d kv heads", hq, hkv)
	}
	rep := hq / hkv
	scale := o.Scale
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(d)))
	}
	res := tensor.WithScope(func() []*tensor.Array {
		// The rep query heads of a KV head become rep·L rows of one
		// matrix, so each packed key and value row is decoded once per KV
		// head rather than once per query head.
		qs := tensor.Reshape(tensor.MulScalar(q, float64(scale)), b, hkv, rep*l, d)
		scores := scoresOf(qs)
		tk := scores.Dim(-1)
		scores = tensor.Reshape(scores, b, hkv, rep, l, tk)
		var mask *tensor.Array
		switch o.MaskKind {
		case tensor.MaskCausal:
			// queries aligned to the end of the keys
			mask = causalMask(q.Backend(), l, tk-l, 0)
		case tensor.MaskArray:
			mask = o.Mask
			if mask.NDim() == 4 {
				// [B|1, Hq|1, L, T] → [B|1, Hkv|1, rep|1, L, T]
				if mask.Dim(1) == hq && hq > 1 {
					mask = tensor.Reshape(mask, mask.Dim(0), hkv, rep, mask.Dim(2), mask.Dim(3))
				} else {
					mask = tensor.ExpandDims(mask, 2)
				}
			}
		}
		if mask != nil {
			if mask.DType() == tensor.Bool {
				scores = tensor.WhereScalar(mask, scores, lowest(scores.DType()))
			} else {
				scores = tensor.Add(scores, tensor.AsType(mask, scores.DType()))
			}
		}
		p := tensor.Reshape(tensor.Softmax(scores, -1), b, hkv, rep*l, tk)
		out := valuesOf(p)
		return []*tensor.Array{tensor.Reshape(out, b, hq, l, out.Dim(-1))}
	})
	return res[0]
}

// QuantSpec is one layer's KV quantization: Bits 0 leaves it
// unquantized. It is tensor.QuantSpec, the one description of a
// quantization that checkpoints and caches share, named here for the
// plans and kv_config.json entries that carry it.
type QuantSpec = tensor.QuantSpec

// QuantPlan decides how each layer's cache is quantized: Default for every
// layer, overridden per layer (from kv_config.json).
type QuantPlan struct {
	Default  QuantSpec
	PerLayer map[int]QuantSpec
	// Start is the offset from which a plain cache is converted
	// (mlx-lm's quantized_kv_start): short contexts stay exact.
	Start int
	// Turbo, when set, converts every plain cache (full-attention and
	// sliding-window layers alike) to TurboQuant instead; Default and
	// PerLayer are then ignored.
	Turbo *TurboSpec
}

// Quantizes reports whether the plan converts any layer.
func (p QuantPlan) Quantizes() bool {
	if p.Turbo != nil || p.Default.Bits != 0 {
		return true
	}
	for _, s := range p.PerLayer {
		if s.Bits != 0 {
			return true
		}
	}
	return false
}

// For returns the spec of a layer.
func (p QuantPlan) For(layer int) QuantSpec {
	if s, ok := p.PerLayer[layer]; ok {
		return s
	}
	return p.Default
}

// ReadKVConfig parses a kv_config.json file, a list of
// {"layer_idx", "bits", "group_size"} objects, into per-layer overrides.
// A missing group size means 64, as everywhere in MLX.
func ReadKVConfig(path string) (map[int]QuantSpec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kv config: %w", err)
	}
	var entries []struct {
		Layer     *int `json:"layer_idx"`
		Bits      int  `json:"bits"`
		GroupSize int  `json:"group_size"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("kv config %s: %w", path, err)
	}
	out := make(map[int]QuantSpec, len(entries))
	for i, e := range entries {
		if e.Layer == nil || *e.Layer < 0 {
			return nil, fmt.Errorf("kv config %s: entry %d has no valid layer_idx", path, i)
		}
		if e.GroupSize == 0 {
			e.GroupSize = 64
		}
		if e.Bits != 0 {
			if err := checkQuantSpec(e.GroupSize, e.Bits); err != nil {
				return nil, fmt.Errorf("kv config %s: layer %d: %w", path, *e.Layer, err)
			}
		}
		if _, dup := out[*e.Layer]; dup {
			return nil, fmt.Errorf("kv config %s: layer %d listed twice", path, *e.Layer)
		}
		out[*e.Layer] = QuantSpec{Bits: e.Bits, GroupSize: e.GroupSize}
	}
	return out, nil
}

// MaybeQuantize converts, in place, each plain cache (KVCache or
// RotatingKVCache) whose offset has reached plan.Start to its quantized
// form, following mlx-lm's maybe_quantize_kv_cache. Layers are converted
// one at a time and the plain cache is freed before the next is touched,
// so the extra memory is one layer's. Caches of other kinds, and layers
// whose spec has zero bits, are left alone. With plan.Turbo, plain caches
// become TurboQuant ones (ToTurbo). It reports how many converted.
func MaybeQuantize(caches []Cache, plan QuantPlan) (int, error) {
	n := 0
	for i, c := range caches {
		spec := plan.For(i)
		if (spec.Bits == 0 && plan.Turbo == nil) || c == nil || c.Offset() < plan.Start {
			continue
		}
		var q Cache
		var err error
		switch p := c.(type) {
		case *KVCache:
			if plan.Turbo != nil {
				q, err = p.ToTurbo(*plan.Turbo)
			} else {
				q, err = p.ToQuantized(spec.GroupSize, spec.Bits)
			}
		case *RotatingKVCache:
			if plan.Turbo != nil {
				q, err = p.ToTurbo(*plan.Turbo)
			} else {
				q, err = p.ToQuantized(spec.GroupSize, spec.Bits)
			}
		default:
			continue
		}
		if err != nil {
			return n, fmt.Errorf("kv: quantize layer %d: %w", i, err)
		}
		c.Free()
		caches[i] = q
		n++
	}
	return n, nil
}

// lowest is the most negative finite value of a float dtype: masked scores
// get it (as mlx-lm does) so that a fully masked row stays finite.
func lowest(dt tensor.DType) float64 {
	switch dt {
	case tensor.Float16:
		return -65504
	case tensor.BFloat16:
		return float64(tensor.BF16ToF32(0xff7f))
	default:
		return -math.MaxFloat32
	}
}
