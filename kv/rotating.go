package kv

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// rotating is the buffer logic of RotatingKVCache and its quantized
// variant, with mlx-lm's RotatingKVCache semantics:
//
//   - A multi-token write (prefill chunk) concatenates. The first one keeps
//     all its tokens. Later ones first put the buffer in temporal order,
//     then drop the oldest tokens (after the keep prefix) so that at most
//     maxSize-1 old tokens remain, then append: every new token sees at
//     least maxSize-1 tokens of context, so the buffer may briefly hold up
//     to maxSize-1+n tokens.
//   - A single-token write works in place: the buffer grows by Step slots
//     (capped at maxSize) while it has not reached maxSize, is trimmed to
//     maxSize if a concatenation left it longer, and once full the write
//     position wraps to keep, overwriting the oldest token.
//   - offset counts every token ever written; idx is the next write slot.
type rotating struct {
	buffers
	maxSize int
	keepN   int
	idx     int
}

// RotatingKVCache is a sliding-window cache holding (about) the last
// maxSize tokens, for models with local attention layers; see mlx-lm's
// RotatingKVCache, whose buffer rules it reproduces step for step (what
// UpdateAndFetch hands over is in temporal order: see the package doc).
type RotatingKVCache struct{ rotating }

// NewRotatingKVCache returns an empty sliding-window cache of maxSize
// tokens whose first keep tokens are never evicted (0 for plain sliding
// windows).
func NewRotatingKVCache(maxSize, keep int) *RotatingKVCache {
	if maxSize <= 0 || keep < 0 || keep >= maxSize {
		throwf("NewRotatingKVCache", tensor.ErrArgument, "max size %d, keep %d", maxSize, keep)
	}
	return &RotatingKVCache{rotating{buffers: buffers{kind: KindRotating}, maxSize: maxSize, keepN: keep}}
}

// QuantizedRotatingKVCache is RotatingKVCache with quantized storage (the
// rotation logic applies to the packed words, scales and biases alike).
type QuantizedRotatingKVCache struct{ rotating }

// NewQuantizedRotatingKVCache returns an empty quantized sliding-window cache.
func NewQuantizedRotatingKVCache(maxSize, keep, groupSize, bits int) (*QuantizedRotatingKVCache, error) {
	if err := checkQuantSpec(groupSize, bits); err != nil {
		return nil, err
	}
	if maxSize <= 0 || keep < 0 || keep >= maxSize {
		return nil, fmt.Errorf("kv: rotating cache with max size %d, keep %d", maxSize, keep)
	}
	return &QuantizedRotatingKVCache{rotating{buffers: buffers{kind: KindQuantizedRotating, c: codec{groupSize, bits}}, maxSize: maxSize, keepN: keep}}, nil
}

// MaxSize is the window.
func (r *rotating) MaxSize() int { return r.maxSize }

// UpdateAndFetch writes one token in place or several by concatenation.
func (r *rotating) UpdateAndFetch(keys, values *tensor.Array) KV {
	r.freeViews()
	scoped(func() {
		enc, owned := r.c.encode("UpdateAndFetch", keys, values)
		if r.parts != nil && (enc[0].Dim(0) != r.parts[0].Dim(0) || enc[0].Dim(1) != r.parts[0].Dim(1)) {
			throwf("UpdateAndFetch", tensor.ErrShape, "keys %v for a cache of %v", keys.Shape(), r.parts[0].Shape())
		}
		if keys.Dim(2) == 1 {
			r.updateInPlace(enc)
		} else {
			r.updateConcat(enc, owned)
		}
		keep(r.views...)
	})
	out := r.c.kv(r.views)
	out.Start = windowStart(r.offset, r.views[0].Dim(2), r.keepN)
	return out
}

// windowStart is the position of the first of n keys in temporal order
// that end at position offset−1: offset−n when they are consecutive (no
// keep prefix, or nothing dropped yet), else 0 (see KV.Start).
func windowStart(offset, n, keepN int) int {
	if keepN == 0 || offset == n {
		return offset - n
	}
	return 0
}

// temporal returns v in temporal order, without unused slots.
func (r *rotating) temporal(v *tensor.Array) *tensor.Array {
	t := v.Dim(2)
	switch {
	case r.idx == t:
		return handle(v)
	case r.idx < r.offset:
		return tensor.Concatenate([]*tensor.Array{sliceT(v, 0, r.keepN), sliceT(v, r.idx, t), sliceT(v, r.keepN, r.idx)}, 2)
	default:
		return sliceT(v, 0, r.idx)
	}
}

// trim drops trimSize tokens after the keep prefix and appends app (if any).
func (r *rotating) trim(trimSize int, v, app *tensor.Array) *tensor.Array {
	var cat []*tensor.Array
	if trimSize > 0 {
		cat = []*tensor.Array{sliceT(v, 0, r.keepN), sliceT(v, trimSize+r.keepN, v.Dim(2))}
	} else {
		cat = []*tensor.Array{v}
	}
	if app != nil {
		cat = append(cat, app)
	}
	return tensor.Concatenate(cat, 2)
}

func (r *rotating) setParts(next []*tensor.Array) {
	keep(next...)
	tensor.Free(r.parts...)
	r.parts = next
}

func (r *rotating) updateConcat(enc []*tensor.Array, owned bool) {
	n := enc[0].Dim(2)
	next := make([]*tensor.Array, len(enc))
	if r.parts == nil {
		for i, e := range enc {
			if owned {
				next[i] = e
			} else {
				next[i] = copyOf(e)
			}
		}
	} else {
		ordered := make([]*tensor.Array, len(enc))
		for i, p := range r.parts {
			ordered[i] = r.temporal(p)
		}
		r.idx = ordered[0].Dim(2)
		trimSize := r.idx - r.maxSize + 1
		for i, o := range ordered {
			next[i] = r.trim(trimSize, o, enc[i])
		}
	}
	r.setParts(next)
	r.offset += n
	r.idx = r.parts[0].Dim(2)
	r.views = handles(r.parts)
}

func (r *rotating) updateInPlace(enc []*tensor.Array) {
	prev := r.offset
	if r.parts == nil || (prev >= r.parts[0].Dim(2) && r.parts[0].Dim(2) < r.maxSize) {
		size := min(Step, r.maxSize-prev)
		be := enc[0].Backend()
		next := make([]*tensor.Array, len(enc))
		for i, e := range enc {
			z := zerosT(be, e, size)
			if r.parts == nil {
				next[i] = z
			} else {
				next[i] = tensor.Concatenate([]*tensor.Array{r.parts[i], z}, 2)
			}
		}
		r.setParts(next)
		r.idx = prev
	}
	if trimSize := r.parts[0].Dim(2) - r.maxSize; trimSize > 0 {
		next := make([]*tensor.Array, len(r.parts))
		for i, p := range r.parts {
			next[i] = r.trim(trimSize, p, nil)
		}
		r.setParts(next)
		r.idx = r.maxSize
	}
	if r.idx == r.maxSize {
		r.idx = r.keepN
	}
	for i, e := range enc {
		writeT(r.parts[i], e, r.idx)
	}
	r.offset++
	r.idx++
	r.views = make([]*tensor.Array, len(r.parts))
	for i, p := range r.parts {
		if r.offset < r.maxSize {
			r.views[i] = sliceT(p, 0, r.offset)
		} else {
			// temporal order (a copy once the ring has wrapped), so that
			// attention sees the keys in the order a chunked write hands
			// them over and sums them in the same pieces (KV.Start)
			r.views[i] = r.temporal(p)
		}
	}
}

// Temporal returns the keys and values the cache holds in the order they
// were written (oldest first, keep prefix included), without unused slots:
// the cache's view of the sequence, whatever its rotation. The caller owns
// (and frees) them; both are nil while the cache is empty.
func (c *RotatingKVCache) Temporal() (keys, values *tensor.Array) {
	if c.parts == nil {
		return nil, nil
	}
	out := tensor.WithScope(func() []*tensor.Array {
		return []*tensor.Array{c.temporal(c.parts[0]), c.temporal(c.parts[1])}
	})
	return out[0], out[1]
}

// MakeMask follows mlx-lm's RotatingKVCache.make_mask. For several tokens
// the mask is causal with a window (maxSize unless windowSize is smaller)
// at offset min(maxSize-1, offset), an array only when the window bites or
// one is asked for. A single token needs no mask unless windowSize is
// smaller than maxSize and the cache holds more than windowSize tokens:
// then a 1-D mask picks the newest windowSize keys (the last ones: unlike
// mlx-lm's, UpdateAndFetch hands a wrapped ring over in temporal order).
func (r *rotating) MakeMask(n, windowSize int, returnArray bool) Mask {
	return rotatingMask(r.backend(), n, windowSize, returnArray, r.maxSize, r.offset)
}

// rotatingMask is RotatingKVCache.MakeMask for a ring of maxSize slots at
// the given offset (shared with paged sliding layers).
func rotatingMask(be tensor.Backend, n, windowSize int, returnArray bool, maxSize, offset int) Mask {
	if n > 1 {
		if windowSize <= 0 {
			windowSize = maxSize
		}
		off := min(maxSize-1, offset)
		if off+n > windowSize || returnArray {
			return Mask{Kind: tensor.MaskArray, Array: causalMask(be, n, off, windowSize)}
		}
		return Mask{Kind: tensor.MaskCausal}
	}
	if windowSize <= 0 || offset < windowSize || maxSize <= windowSize {
		return Mask{}
	}
	size := maxSize
	if offset < maxSize {
		size = offset + 1
	}
	raw := make([]byte, size)
	for j := size - windowSize; j < size; j++ {
		raw[j] = 1 // the keys come in temporal order: the newest are last
	}
	return Mask{Kind: tensor.MaskArray, Array: tensor.FromBytesOn(be, raw, []int{size}, tensor.Bool, false)}
}

// IsTrimmable is true until the window has been exceeded: after that the
// dropped tokens are gone.
func (r *rotating) IsTrimmable() bool { return r.offset < r.maxSize }

// Trim moves the offset and write position back by up to n tokens. Call it
// only when IsTrimmable.
func (r *rotating) Trim(n int) int {
	n = max(min(r.offset, n), 0)
	r.offset -= n
	r.idx -= n
	return n
}

// State returns views of the buffers, cut to the offset while it is
// smaller than them (mlx-lm's rule).
func (r *rotating) State() State {
	st := State{Kind: r.kind, Offset: r.offset, Idx: r.idx, MaxSize: r.maxSize, Keep: r.keepN,
		GroupSize: r.c.groupSize, Bits: r.c.bits}
	for _, p := range r.parts {
		if r.offset < p.Dim(2) {
			st.Arrays = append(st.Arrays, sliceT(p, 0, r.offset))
		} else {
			st.Arrays = append(st.Arrays, handle(p))
		}
	}
	return st
}

// SetState restores buffers, offset, write position, window and keep.
func (r *rotating) SetState(st State) error {
	if err := r.checkState(st); err != nil {
		return err
	}
	if st.MaxSize <= 0 || st.Keep < 0 || st.Keep >= st.MaxSize || st.Offset < 0 || st.Idx < 0 {
		return fmt.Errorf("kv: rotating state with max size %d, keep %d, offset %d, idx %d", st.MaxSize, st.Keep, st.Offset, st.Idx)
	}
	if err := checkStateArrays(st, r.c.nparts()); err != nil {
		return err
	}
	if len(st.Arrays) > 0 && st.Idx > st.Arrays[0].Dim(2) {
		return fmt.Errorf("kv: rotating state write position %d beyond %d slots", st.Idx, st.Arrays[0].Dim(2))
	}
	r.release()
	r.maxSize, r.keepN, r.offset, r.idx = st.MaxSize, st.Keep, st.Offset, st.Idx
	if len(st.Arrays) > 0 {
		r.parts = handles(st.Arrays)
		keep(r.parts...)
	}
	return nil
}

func (r *rotating) clone() rotating {
	c := *r
	c.buffers = r.cloneBuffers()
	return c
}

// release empties the cache, write position included.
func (r *rotating) release() {
	r.buffers.release()
	r.idx = 0
}

// Free releases the buffers and empties the cache.
func (r *rotating) Free() { r.release() }

// Clone returns an independent copy (copy-on-write).
func (c *RotatingKVCache) Clone() Cache { return &RotatingKVCache{c.clone()} }

// Clone returns an independent copy (copy-on-write).
func (c *QuantizedRotatingKVCache) Clone() Cache { return &QuantizedRotatingKVCache{c.clone()} }

// ToQuantized converts the cache to a QuantizedRotatingKVCache with the
// same buffer layout (rotation included); c is left unchanged.
func (c *RotatingKVCache) ToQuantized(groupSize, bits int) (*QuantizedRotatingKVCache, error) {
	q, err := NewQuantizedRotatingKVCache(c.maxSize, c.keepN, groupSize, bits)
	if err != nil {
		return nil, err
	}
	q.offset, q.idx = c.offset, c.idx
	if c.parts == nil {
		return q, nil
	}
	if err := c.quantizeInto(&q.buffers, c.parts[0].Dim(2)); err != nil {
		return nil, err
	}
	return q, nil
}
