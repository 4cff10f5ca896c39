package kv

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// KindRecurrent names a RecurrentCache in states and saved files.
const KindRecurrent Kind = "RecurrentCache"

// RecurrentCache is the memory of a linear-attention layer (Qwen3.5's
// and Qwen3-Next's gated DeltaNet): the last kernel−1 inputs of its
// causal convolution and its recurrent state, in place of keys and
// values. It answers the Cache contract as such a layer can:
//
//   - the state summarises every token seen, so it cannot drop the last
//     few: IsTrimmable is false and Trim drops nothing — take a State
//     before speculating and SetState it back instead (snapshot/restore);
//   - State, SetState, Clone and persistence (Save, Load) move both
//     arrays and the offset;
//   - UpdateAndFetch has no meaning and panics: the layer reads Conv and
//     Recurrent and hands the new pair to Update.
//
// Arrays are replaced, never written in place, so clones and states
// share storage safely.
type RecurrentCache struct {
	conv, state *tensor.Array // nil until the first Update
	offset      int
	pin         *mapping // the file a loaded cache borrows from
}

// NewRecurrentCache returns an empty recurrent cache.
func NewRecurrentCache() *RecurrentCache { return &RecurrentCache{} }

// Conv is the convolution's input history [B, kernel−1, channels] (nil
// while empty), owned by the cache and valid until its next Update,
// SetState or Free.
func (c *RecurrentCache) Conv() *tensor.Array { return c.conv }

// Recurrent is the recurrent state (for DeltaNet [B, heads, Dk, Dv] in
// float32; nil while empty), owned like Conv.
func (c *RecurrentCache) Recurrent() *tensor.Array { return c.state }

// Update replaces both arrays after n more tokens: the cache takes
// ownership of conv and state (they leave the caller's scope) and frees
// the previous pair.
func (c *RecurrentCache) Update(conv, state *tensor.Array, n int) {
	if conv == nil || state == nil || n < 0 {
		throwf("RecurrentCache.Update", tensor.ErrArgument, "conv %v, state %v, %d tokens", conv != nil, state != nil, n)
	}
	keep(conv, state)
	tensor.Free(c.conv, c.state)
	c.conv, c.state = conv, state
	c.offset += n
}

// UpdateAndFetch panics: a recurrent layer has no keys and values (use
// Conv, Recurrent and Update).
func (c *RecurrentCache) UpdateAndFetch(keys, values *tensor.Array) KV {
	throwf("RecurrentCache.UpdateAndFetch", tensor.ErrArgument, "a recurrent cache holds states, not keys and values")
	return KV{}
}

// Offset is the number of tokens the state has absorbed.
func (c *RecurrentCache) Offset() int { return c.offset }

// MakeMask returns no mask: a recurrent layer is causal by construction.
func (c *RecurrentCache) MakeMask(n, windowSize int, returnArray bool) Mask { return Mask{} }

// IsTrimmable is false: the state cannot forget the last tokens.
func (c *RecurrentCache) IsTrimmable() bool { return false }

// Trim drops nothing (see IsTrimmable) and returns 0.
func (c *RecurrentCache) Trim(int) int { return 0 }

// State returns the conv history and recurrent state (no arrays while
// empty) and the offset; the caller frees it.
func (c *RecurrentCache) State() State {
	st := State{Kind: KindRecurrent, Offset: c.offset}
	if c.conv != nil {
		// states hold [B, H, T, D] arrays (what Save writes): the conv
		// history travels as [B, 1, kernel−1, C]
		conv := tensor.Reshape(c.conv, c.conv.Dim(0), 1, c.conv.Dim(1), c.conv.Dim(2))
		keep(conv)
		st.Arrays = []*tensor.Array{conv, handle(c.state)}
		keep(st.Arrays[1])
	}
	return st
}

// SetState replaces the cache's contents with st (a RecurrentCache's
// state: two arrays, or none for an empty cache).
func (c *RecurrentCache) SetState(st State) error {
	if st.Kind != KindRecurrent {
		return fmt.Errorf("kv: %s state for a %s", st.Kind, KindRecurrent)
	}
	if len(st.Arrays) != 0 && len(st.Arrays) != 2 {
		return fmt.Errorf("kv: %s state has %d arrays, want 2", st.Kind, len(st.Arrays))
	}
	if st.Offset < 0 {
		return fmt.Errorf("kv: %s state at offset %d", st.Kind, st.Offset)
	}
	if len(st.Arrays) == 2 && (st.Arrays[0].NDim() != 4 || st.Arrays[0].Dim(1) != 1 || st.Arrays[0].Dim(0) != st.Arrays[1].Dim(0)) {
		return fmt.Errorf("kv: %s state arrays %v and %v (want [B, 1, kernel-1, C] and [B, ...])", st.Kind, st.Arrays[0].Shape(), st.Arrays[1].Shape())
	}
	tensor.Free(c.conv, c.state)
	c.conv, c.state = nil, nil
	c.pin.release()
	c.pin = nil
	if len(st.Arrays) == 2 {
		cv := st.Arrays[0]
		c.conv = tensor.Reshape(cv, cv.Dim(0), cv.Dim(2), cv.Dim(3))
		c.state = handle(st.Arrays[1])
		keep(c.conv, c.state)
	}
	c.offset = st.Offset
	return nil
}

// Clone returns an independent cache with the same contents (shared
// storage: neither side ever writes in place).
func (c *RecurrentCache) Clone() Cache {
	out := &RecurrentCache{offset: c.offset, pin: c.pin.acquire()}
	if c.conv != nil {
		a := handles([]*tensor.Array{c.conv, c.state})
		keep(a...)
		out.conv, out.state = a[0], a[1]
	}
	return out
}

// Bytes is the memory of the two arrays.
func (c *RecurrentCache) Bytes() int { return bytesOf([]*tensor.Array{c.conv, c.state}) }

// Free releases both arrays; the cache is empty after.
func (c *RecurrentCache) Free() {
	tensor.Free(c.conv, c.state)
	c.conv, c.state = nil, nil
	c.offset = 0
	c.pin.release()
	c.pin = nil
}

func (c *RecurrentCache) setPin(m *mapping) { c.pin = m }
