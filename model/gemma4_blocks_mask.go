package model

import (
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// blockMask is a sliding layer's mask (window > 0) for a pass of t
// queries (B = 1) whose positions carry block ids (ForwardOptions.Blocks),
// as transformers 5.17's Gemma 4 builds it (create_masks_for_vision_model):
// (causal OR same block) AND the window's lower edge (a key no more than
// window-1 positions back), so a block's rows see one another, later ones
// included. Full-attention layers stay causal (their mask is LayerMask's).
// The keys are laid out as the layer's cache hands them over (its
// MakeMask array's columns: the newest last).
func blockMask(caches []kv.Cache, layer, t, window int, blocks []int32, be tensor.Backend) kv.Mask {
	if window <= 0 {
		return LayerMask(caches, layer, t, window, be)
	}
	if len(blocks) != t {
		panic(&tensor.Error{Op: "gemma4.Forward", Err: fmt.Errorf("%w: %d block ids for a %d-token pass", tensor.ErrShape, len(blocks), t)})
	}
	off, keys := 0, t
	if caches != nil && caches[layer] != nil {
		c := caches[layer]
		m := c.MakeMask(t, window, true)
		if m.Array == nil || len(m.Rows) > 0 {
			return m // one query (no block to widen), or a batched pass
		}
		keys = m.Array.Dim(m.Array.NDim() - 1)
		m.Free()
		off = c.Offset()
	}
	first := off + t - keys // the position of key column 0
	raw := make([]byte, t*keys)
	for i := range t {
		q := off + i
		for r := range keys {
			k := first + r
			same := k >= off && blocks[k-off] >= 0 && blocks[k-off] == blocks[i]
			ok := (k <= q || same) && q < k+window
			if ok {
				raw[i*keys+r] = 1
			}
		}
	}
	return kv.Mask{Kind: tensor.MaskArray, Array: tensor.FromBytesOn(be, raw, []int{t, keys}, tensor.Bool, false)}
}
