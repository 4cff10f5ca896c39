package kv

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// codec is how a cache stores tokens: as given (bits 0) or affine-quantized.
type codec struct{ groupSize, bits int }

func (c codec) quantized() bool { return c.bits != 0 }

// encode turns new keys and values into the parts the buffers hold. Plain
// parts are the caller's arrays (owned false); quantized ones are new.
func (c codec) encode(op string, keys, values *tensor.Array) (parts []*tensor.Array, owned bool) {
	checkKV(op, keys, values)
	if !c.quantized() {
		return []*tensor.Array{keys, values}, false
	}
	if keys.Dim(3)%c.groupSize != 0 || values.Dim(3)%c.groupSize != 0 {
		throwf(op, tensor.ErrShape, "head dims %d/%d are not multiples of group size %d", keys.Dim(3), values.Dim(3), c.groupSize)
	}
	kq, ks, kb := tensor.Quantize(keys, c.groupSize, c.bits)
	vq, vs, vb := tensor.Quantize(values, c.groupSize, c.bits)
	return []*tensor.Array{kq, ks, kb, vq, vs, vb}, true
}

// kv wraps views of the parts as what attention reads.
func (c codec) kv(v []*tensor.Array) KV {
	if !c.quantized() {
		return KV{Keys: v[0], Values: v[1]}
	}
	return KV{Quant: &QuantKV{
		Keys:      Packed{v[0], v[1], v[2]},
		Values:    Packed{v[3], v[4], v[5]},
		GroupSize: c.groupSize, Bits: c.bits,
	}}
}

func (c codec) nparts() int {
	if c.quantized() {
		return 6
	}
	return 2
}

func checkQuantSpec(groupSize, bits int) error {
	okG, okB := false, false
	for _, g := range tensor.QuantGroupsSupported {
		okG = okG || g == groupSize
	}
	for _, b := range tensor.QuantBitsSupported {
		okB = okB || b == bits
	}
	if !okG || !okB {
		return fmt.Errorf("kv: quantization with group size %d and %d bits is not supported (groups %v, bits %v)",
			groupSize, bits, tensor.QuantGroupsSupported, tensor.QuantBitsSupported)
	}
	return nil
}

// linear is the buffer logic of KVCache and QuantizedKVCache: every token
// kept, in order, in buffers grown in Step-slot increments.
// Its capacity is parts[0].Dim(2).
type linear struct{ buffers }

// KVCache keeps every token, like mlx-lm's KVCache: buffers grow by Step
// slots (amortised), new tokens are written in place, and UpdateAndFetch
// hands out views of the live prefix.
type KVCache struct{ linear }

// NewKVCache returns an empty KVCache.
func NewKVCache() *KVCache { return &KVCache{linear{buffers{kind: KindKV}}} }

// QuantizedKVCache is KVCache with keys and values stored affine-quantized
// along the head dim (MLX's format: uint32 words, per-group scales and
// biases), about 1.9× (8 bits) or 3.6× (4 bits) smaller than bfloat16 at
// group size 64 (BenchmarkBytesPerToken). Attention reads it through
// quantized matmuls.
type QuantizedKVCache struct{ linear }

// NewQuantizedKVCache returns an empty quantized cache; the head dims of
// the keys and values written to it must be multiples of groupSize.
func NewQuantizedKVCache(groupSize, bits int) (*QuantizedKVCache, error) {
	if err := checkQuantSpec(groupSize, bits); err != nil {
		return nil, err
	}
	return &QuantizedKVCache{linear{buffers{kind: KindQuantized, c: codec{groupSize, bits}}}}, nil
}

// GroupSize and Bits describe the quantization.
func (q *QuantizedKVCache) GroupSize() int { return q.c.groupSize }

// Bits is the width of each quantized value.
func (q *QuantizedKVCache) Bits() int { return q.c.bits }

// UpdateAndFetch writes the new tokens at the offset, growing the buffers
// first when they are full: the live prefix is kept (trimmed to the offset
// when that is not a whole number of steps, as mlx-lm does) and joined with
// enough zeroed steps for the new tokens.
func (l *linear) UpdateAndFetch(keys, values *tensor.Array) KV {
	l.freeViews()
	scoped(func() {
		enc, _ := l.c.encode("UpdateAndFetch", keys, values)
		n := keys.Dim(2)
		prev := l.offset
		if l.parts != nil && (enc[0].Dim(0) != l.parts[0].Dim(0) || enc[0].Dim(1) != l.parts[0].Dim(1)) {
			throwf("UpdateAndFetch", tensor.ErrShape, "keys %v for a cache of %v", keys.Shape(), l.parts[0].Shape())
		}
		if l.parts == nil || prev+n > l.parts[0].Dim(2) {
			grow := (Step + n - 1) / Step * Step
			be := keys.Backend()
			next := make([]*tensor.Array, len(enc))
			for i, e := range enc {
				z := zerosT(be, e, grow)
				if l.parts == nil {
					next[i] = z
					continue
				}
				old := l.parts[i]
				if prev%Step != 0 {
					old = sliceT(old, 0, prev)
				}
				next[i] = tensor.Concatenate([]*tensor.Array{old, z}, 2)
			}
			tensor.Free(l.parts...)
			keep(next...)
			l.parts = next
		}
		l.offset += n
		for i, e := range enc {
			writeT(l.parts[i], e, prev)
		}
		l.views = make([]*tensor.Array, len(l.parts))
		for i, p := range l.parts {
			l.views[i] = sliceT(p, 0, l.offset)
		}
		keep(l.views...)
	})
	return l.c.kv(l.views)
}

// MakeMask follows mlx-lm's create_attention_mask at the cache's offset.
func (l *linear) MakeMask(n, windowSize int, returnArray bool) Mask {
	return attentionMask(l.backend(), n, l.offset, windowSize, returnArray)
}

// IsTrimmable is always true: every token is still there.
func (l *linear) IsTrimmable() bool { return true }

// Trim moves the offset back; the next write overwrites the dropped slots.
func (l *linear) Trim(n int) int {
	n = max(min(l.offset, n), 0)
	l.offset -= n
	return n
}

// State returns views of the live prefix.
func (l *linear) State() State {
	st := State{Kind: l.kind, Offset: l.offset, GroupSize: l.c.groupSize, Bits: l.c.bits}
	if l.parts != nil {
		for _, p := range l.parts {
			st.Arrays = append(st.Arrays, sliceT(p, 0, l.offset))
		}
	}
	return st
}

// SetState takes the arrays as the whole buffers; the offset becomes their
// length (mlx-lm's rule), so the next write grows them.
func (l *linear) SetState(st State) error {
	if err := l.checkState(st); err != nil {
		return err
	}
	if err := checkStateArrays(st, l.c.nparts()); err != nil {
		return err
	}
	l.release()
	if len(st.Arrays) > 0 {
		l.parts = handles(st.Arrays)
		keep(l.parts...)
		l.offset = l.parts[0].Dim(2)
	}
	return nil
}

func checkStateArrays(st State, nparts int) error {
	if len(st.Arrays) == 0 {
		return nil
	}
	if len(st.Arrays) != nparts {
		return fmt.Errorf("kv: %s state has %d arrays, want %d", st.Kind, len(st.Arrays), nparts)
	}
	s0 := st.Arrays[0].Shape()
	for _, a := range st.Arrays {
		if a.NDim() != 4 || a.Dim(0) != s0[0] || a.Dim(1) != s0[1] || a.Dim(2) != s0[2] {
			return fmt.Errorf("kv: %s state arrays %v and %v disagree", st.Kind, s0, a.Shape())
		}
	}
	return nil
}

// Free releases the buffers and empties the cache.
func (l *linear) Free() { l.release() }

// Clone returns an independent copy (copy-on-write).
func (c *KVCache) Clone() Cache { return &KVCache{linear{c.cloneBuffers()}} }

// Clone returns an independent copy (copy-on-write).
func (c *QuantizedKVCache) Clone() Cache { return &QuantizedKVCache{linear{c.cloneBuffers()}} }

// ToQuantized converts the cache to a QuantizedKVCache holding its live
// tokens, as mlx-lm's to_quantized does; c is left unchanged.
func (c *KVCache) ToQuantized(groupSize, bits int) (*QuantizedKVCache, error) {
	q, err := NewQuantizedKVCache(groupSize, bits)
	if err != nil {
		return nil, err
	}
	if err := c.quantizeInto(&q.buffers, c.offset); err != nil {
		return nil, err
	}
	q.offset = c.offset
	return q, nil
}
