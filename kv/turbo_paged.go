package kv

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// Paged TurboQuant layers: a layer whose LayerSpec has Turbo set keeps
// two parts per block, the uint8 key codes [Hkv, BlockSize, KeyBytes] and
// value codes [Hkv, BlockSize, ValueBytes] of TurboQuantKVCache, so that
// the blocks' bytes are the contiguous cache's rows and attention over
// them (the same codes in the same order) is bit-identical to it.

// turbo reports whether the layer stores TurboQuant codes.
func (lp *layerPool) turbo() bool { return lp.spec.Turbo.KeyBits != 0 }

// nparts is the number of storage parts of the layer's codec.
func (lp *layerPool) nparts() int {
	if lp.turbo() {
		return 2
	}
	return lp.c.nparts()
}

// encode turns new keys and values into the parts the layer's blocks
// hold: the affine codec's, or the TurboQuant codes.
func (lp *layerPool) encode(op string, keys, values *tensor.Array) []*tensor.Array {
	if lp.turbo() {
		k, v := turboEncode(op, lp.spec.Turbo, keys, values)
		return []*tensor.Array{k, v}
	}
	enc, _ := lp.c.encode(op, keys, values)
	return enc
}

// checkTurbo validates a layer spec's TurboQuant scheme.
func (s LayerSpec) checkTurbo() error {
	if s.Turbo == (TurboSpec{}) {
		return nil
	}
	if s.Quant.Bits != 0 {
		return fmt.Errorf("kv: a layer cannot be both affine-quantized (%d bits) and TurboQuant (%s)", s.Quant.Bits, s.Turbo)
	}
	return s.Turbo.valid()
}

// Turbo reports whether the parts are TurboQuant codes, and the scheme.
func (p *PagedKV) Turbo() (TurboSpec, bool) { return p.lp.spec.Turbo, p.lp.turbo() }

// pagedTurboAttention is attention over a TurboQuant layer's blocks: the
// codes are gathered (in attention's order) into contiguous rows and read
// by turboAttention, the contiguous cache's path, so the output is the
// contiguous TurboQuantKVCache's bit for bit. The gather copies KeyBytes +
// ValueBytes per token and head (200 bytes at head dim 128, k8v3), small
// next to the attention that reads them.
func pagedTurboAttention(q *tensor.Array, p *PagedKV, o tensor.SDPAOptions) *tensor.Array {
	return tensor.WithScope(func() []*tensor.Array {
		parts := p.Gather()
		spec := p.lp.spec.Turbo
		t := &TurboKV{Keys: parts[0], Values: parts[1], Spec: spec,
			KeyDim: spec.keyDim(parts[0].Dim(3)), ValueDim: spec.valueDim(parts[1].Dim(3))}
		return []*tensor.Array{turboAttention(q, t, o)}
	})[0]
}

// TurboLayerSpecs returns specs with every layer that has a cache of its
// own and no affine quantization stored as TurboQuant codes of scheme t:
// the paged layout of a model whose contiguous caches --kv-quant would
// convert (full-attention and sliding-window layers alike).
func TurboLayerSpecs(specs []LayerSpec, t TurboSpec) ([]LayerSpec, error) {
	if err := t.valid(); err != nil {
		return nil, err
	}
	out := make([]LayerSpec, len(specs))
	for i, s := range specs {
		if !s.Shared && !s.Recurrent && s.Quant.Bits == 0 {
			s.Turbo = t
		}
		out[i] = s
	}
	return out, nil
}
