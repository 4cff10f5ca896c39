package model

import (
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// Attention is grouped-query self-attention with rotary positions and
// optional per-head q/k norms, reading and extending a kv.Cache.
type Attention struct {
	Heads, KVHeads, HeadDim int
	Scale                   float32
	Q, K, V, O              Projection
	QNorm, KNorm            *RMSNorm // nil when absent
	Rope                    *Rope
}

// Forward attends x [B, T, D] to the cache's contents plus itself with the
// mask the caller computed for this layer's cache (LayerMask) and returns
// [B, T, D]. A nil cache attends within x only. With a batched pass's
// cache (kv.Rows), each row's tokens get their own positions, cache and
// mask.
func (a *Attention) Forward(x *tensor.Array, c kv.Cache, mask kv.Mask) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	b, t := x.Dim(0), x.Dim(1)
	heads := func(l Projection, n int, norm *RMSNorm) *tensor.Array {
		y := tensor.Reshape(l.Forward(x), b, t, n, a.HeadDim)
		if norm != nil {
			y = norm.Forward(y)
		}
		return tensor.Transpose(y, 0, 2, 1, 3)
	}
	q := heads(a.Q, a.Heads, a.QNorm)
	k := heads(a.K, a.KVHeads, a.KNorm)
	v := heads(a.V, a.KVHeads, nil)
	if a.Rope != nil {
		spans := kv.Spans(c, t) // a batched pass has one offset per row
		q = a.Rope.ApplySpans(q, spans)
		k = a.Rope.ApplySpans(k, spans)
	}
	o := Attend(q, k, v, c, mask, a.Scale)
	o = tensor.Reshape(tensor.Transpose(o, 0, 2, 1, 3), b, t, a.Heads*a.HeadDim)
	return sc.Keep(a.O.Forward(o))
}

// Attend writes k and v [B, Hkv, T, D] to the cache (when there is one)
// and computes attention of q [B, Hq, T, D] over what the cache returns.
func Attend(q, k, v *tensor.Array, c kv.Cache, mask kv.Mask, scale float32) *tensor.Array {
	if c == nil {
		return tensor.ScaledDotProductAttention(q, k, v, mask.Options(scale))
	}
	got := c.UpdateAndFetch(k, v)
	return kv.Attend(q, got, mask, tensor.SDPAOptions{Scale: scale})
}

// mergeEmbeddings returns emb (cast to h's dtype) where mask is set and h
// elsewhere (emb everywhere without a mask). h is consumed: it is freed
// unless it is returned.
func mergeEmbeddings(h, emb, mask *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	out := tensor.AsType(emb, h.DType())
	if mask != nil {
		out = tensor.Where(tensor.ExpandDims(mask, -1), out, h)
	}
	h.Free()
	return sc.Keep(out)
}

// LayerMask is the mask for t new tokens of the layer whose cache is
// caches[layer], computed before the cache is updated (call it once per
// forward for each distinct cache layout and share it). window 0 means
// full causal attention. Without caches it is the plain causal mask,
// windowed when asked. The mask array, if any, is made on be (the
// model's backend) in the current scope.
func LayerMask(caches []kv.Cache, layer, t, window int, be tensor.Backend) kv.Mask {
	if caches != nil && caches[layer] != nil {
		return caches[layer].MakeMask(t, window, false)
	}
	if window <= 0 || window >= t {
		if t == 1 {
			return kv.Mask{}
		}
		return kv.Mask{Kind: tensor.MaskCausal}
	}
	raw := make([]byte, t*t)
	for i := range t {
		for j := range t {
			if j <= i && i < j+window {
				raw[i*t+j] = 1
			}
		}
	}
	return kv.Mask{Kind: tensor.MaskArray, Array: tensor.FromBytesOn(be, raw, []int{t, t}, tensor.Bool, false)}
}

// EmbedInputs embeds ids [B, T] and merges precomputed embeddings from
// opts (multimodal inputs) where its mask says so.
func EmbedInputs(e *Embedding, ids *tensor.Array, opts *ForwardOptions) *tensor.Array {
	h := e.Forward(ids)
	if opts == nil || opts.Embeddings == nil {
		return h
	}
	emb := opts.Embeddings
	if emb.NDim() != 3 || emb.Dim(0) != h.Dim(0) || emb.Dim(1) != h.Dim(1) || emb.Dim(2) != h.Dim(2) {
		panic(&tensor.Error{Op: "model.Forward", Err: fmt.Errorf("%w: embeddings %v for hidden states %v", tensor.ErrShape, emb.Shape(), h.Shape())})
	}
	return mergeEmbeddings(h, emb, opts.EmbedMask)
}
