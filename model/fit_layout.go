package model

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// KV cache kinds of a layer in a memory plan (LayerKV.Kind).
const (
	KVFull      = "full"      // keys and values of every token
	KVSliding   = "sliding"   // keys and values of the last Window tokens
	KVShared    = "shared"    // reads another layer's cache, holds none
	KVLatent    = "latent"    // MLA: the compressed latent and rotary key per token
	KVRecurrent = "recurrent" // a fixed-size state per sequence
)

// LayerKV is what one layer's cache holds, per sequence.
type LayerKV struct {
	Kind string `json:"kind"`
	// Window is a sliding layer's window in tokens.
	Window int `json:"window,omitempty"`
	// BytesPerToken is the cache bytes each token adds (full, sliding and
	// latent layers; sliding ones stop growing at Window).
	BytesPerToken int64 `json:"bytes_per_token,omitempty"`
	// FixedBytes is a recurrent layer's state.
	FixedBytes int64 `json:"fixed_bytes,omitempty"`
}

// kvLayout reads each layer's cache layout off a built architecture: the
// same fields its MakeCaches and attention use. es is the activation
// dtype's size, the caches' element size.
func kvLayout(a Architecture) ([]LayerKV, error) {
	es := int64(a.Info().DType.Size())
	kvFor := func(kvHeads, headDim, window int) LayerKV {
		l := LayerKV{Kind: KVFull, BytesPerToken: 2 * int64(kvHeads*headDim) * es}
		if window > 0 {
			l.Kind, l.Window = KVSliding, window
		}
		return l
	}
	switch m := a.(type) {
	case *Llama:
		out := make([]LayerKV, len(m.Layers))
		for i, b := range m.Layers {
			out[i] = kvFor(b.Attn.KVHeads, b.Attn.HeadDim, 0)
		}
		return out, nil
	case *Generic:
		out := make([]LayerKV, len(m.Blocks))
		for i, b := range m.Blocks {
			out[i] = kvFor(b.attn.kvHeads, b.attn.headDim, b.window)
		}
		return out, nil
	case *Gemma4:
		out := make([]LayerKV, len(m.Blocks))
		for i, b := range m.Blocks {
			switch {
			case b.spec.Shared:
				out[i] = LayerKV{Kind: KVShared}
			case b.spec.Sliding:
				out[i] = kvFor(b.spec.KVHeads, b.spec.HeadDim, max(b.window, m.cfg.SlidingWindow))
			default:
				out[i] = kvFor(b.spec.KVHeads, b.spec.HeadDim, 0)
			}
		}
		return out, nil
	case *Qwen35:
		out := make([]LayerKV, len(m.Blocks))
		for i, b := range m.Blocks {
			if n := b.Linear; n != nil {
				conv := int64((n.kernel-1)*n.convWidth) * es
				state := int64(n.vHeads*n.kDim*n.vDim) * int64(tensor.Float32.Size())
				out[i] = LayerKV{Kind: KVRecurrent, FixedBytes: conv + state}
				continue
			}
			out[i] = kvFor(b.Attn.kvHeads, b.Attn.headDim, 0)
		}
		return out, nil
	case *Gemma4Assistant:
		// the drafter attends over its target's caches and keeps none
		out := make([]LayerKV, len(m.Blocks))
		for i := range out {
			out[i] = LayerKV{Kind: KVShared}
		}
		return out, nil
	case *MLA:
		out := make([]LayerKV, len(m.Blocks))
		for i, b := range m.Blocks {
			a := b.Attn
			keys := a.rope
			if a.Index != nil {
				keys += a.Index.dim
			}
			out[i] = LayerKV{Kind: KVLatent, BytesPerToken: int64(keys+a.rank) * es}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: no cache layout for %T", ErrUnsupported, a)
}
