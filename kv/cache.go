package kv

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// Step is the number of token slots a cache grows by at a time, as in
// mlx-lm: growing in whole steps amortises the copy of the old buffer, and
// writes between growths are in-place and cost only the new tokens.
const Step = 256

// Cache is one attention layer's key/value memory. Keys and values are
// [B, heads, T, head_dim] arrays (head dims of keys and values may differ).
//
// A cache owns everything it holds. The KV returned by UpdateAndFetch is a
// set of views owned by the cache too: they stay valid until the cache's
// next UpdateAndFetch, SetState or Free, which frees them (Trim leaves
// them). Freeing them earlier is allowed (it is a no-op for the cache). The
// cache frees them itself because a live view of its buffer would force
// the next in-place write to copy the whole buffer (copy-on-write), turning
// an O(new tokens) decode step into O(context).
//
// Caches are not safe for concurrent use; one engine goroutine owns them.
type Cache interface {
	// UpdateAndFetch appends keys and values ([B, Hkv, n, D] and
	// [B, Hkv, n, Dv]) and returns what attention should read.
	UpdateAndFetch(keys, values *tensor.Array) KV
	// Offset is the number of tokens the cache has seen (its position).
	Offset() int
	// MakeMask returns the attention mask for n new tokens about to be
	// written, with mlx-lm's rules: windowSize 0 means no extra window, and
	// returnArray asks for an explicit array instead of MaskCausal.
	MakeMask(n, windowSize int, returnArray bool) Mask
	// IsTrimmable reports whether Trim can drop tokens.
	IsTrimmable() bool
	// Trim drops up to n most recent tokens and returns how many it dropped.
	Trim(n int) int
	// State returns a snapshot the caller owns (and frees): views that keep
	// their values whatever the cache does later.
	State() State
	// SetState replaces the cache's contents with a snapshot. The caller
	// keeps ownership of st; the cache takes its own references.
	SetState(st State) error
	// Clone returns an independent cache with the same contents. It shares
	// storage until either side writes (copy-on-write), so it is cheap.
	Clone() Cache
	// Bytes is the memory the cache holds, capacity included.
	Bytes() int
	// Free releases everything the cache holds; the cache is empty after.
	Free()
}

// Kind names a cache type in states and saved files.
type Kind string

// Cache kinds.
const (
	KindKV                Kind = "KVCache"
	KindRotating          Kind = "RotatingKVCache"
	KindQuantized         Kind = "QuantizedKVCache"
	KindQuantizedRotating Kind = "QuantizedRotatingKVCache"
)

// State is a cache's contents as plain values: what snapshot/restore
// (SetState) and persistence (Save, Load) move around. Arrays are the
// live part of the buffers along the token axis: keys then values for
// plain caches; packed keys, key scales, key biases, then the same for
// values, for quantized ones. An empty cache has no arrays.
type State struct {
	Kind      Kind
	Arrays    []*tensor.Array
	Offset    int // tokens seen
	Idx       int // rotating caches: the next write position
	MaxSize   int // rotating caches: the window
	Keep      int // rotating caches: leading tokens never evicted
	GroupSize int // quantized caches
	Bits      int // quantized caches (TurboQuant: the key bits)
	ValueBits int // TurboQuant caches: the value bits
}

// Free frees the state's arrays.
func (s State) Free() { tensor.Free(s.Arrays...) }

// KV is what attention reads from a cache after an update: plain keys and
// values, their quantized form, or a paged cache's blocks (Paged).
// Attention takes any of them; Attend also takes the per-row KVs of a
// batched pass (Rows).
type KV struct {
	Keys, Values *tensor.Array // plain caches
	Quant        *QuantKV      // quantized caches (Keys and Values are nil)
	Rows         *RowsKV       // a batched pass through kv.Rows (the others are nil)
	Paged        *PagedKV      // paged caches (the others are nil)
	Turbo        *TurboKV      // TurboQuant caches (the others are nil)
	// Start is the sequence position of the first key when the keys are
	// consecutive positions not starting at 0 (a sliding window's, in
	// temporal order); Attention passes it on as SDPAOptions.KeyStart.
	Start int
}

// QuantKV holds quantized keys and values in MLX's affine format, as
// QuantizedMatmul reads them.
type QuantKV struct {
	Keys, Values Packed
	GroupSize    int
	Bits         int
}

// Packed is one affine-quantized array: uint32 words, per-group scales
// and biases.
type Packed struct{ W, Scales, Biases *tensor.Array }

// Len is the number of key positions attention will see.
func (kv KV) Len() int {
	if kv.Paged != nil {
		return kv.Paged.Len
	}
	if kv.Quant != nil {
		return kv.Quant.Keys.W.Dim(2)
	}
	if kv.Turbo != nil {
		return kv.Turbo.Keys.Dim(2)
	}
	if kv.Keys == nil {
		return 0
	}
	return kv.Keys.Dim(2)
}

func (kv KV) arrays() []*tensor.Array {
	if kv.Quant != nil {
		q := kv.Quant
		return []*tensor.Array{q.Keys.W, q.Keys.Scales, q.Keys.Biases, q.Values.W, q.Values.Scales, q.Values.Biases}
	}
	if kv.Turbo != nil {
		return []*tensor.Array{kv.Turbo.Keys, kv.Turbo.Values}
	}
	return []*tensor.Array{kv.Keys, kv.Values}
}

// Mask is the mask a cache prescribes for the next n tokens, in the form
// tensor.SDPAOptions takes: no mask, the built-in causal mask, or an
// explicit bool array (true = attend) broadcastable to [B, H, n, T]. The
// array, when present, is owned by the caller, who frees it after the
// forward pass; one mask usually serves every layer that shares a cache
// layout.
//
// A batched pass (kv.Rows) prescribes one mask per row instead (Rows);
// Attend applies them.
type Mask struct {
	Kind  tensor.MaskKind
	Array *tensor.Array
	Rows  []Mask
}

// Options returns SDPA options with this mask and scale.
func (m Mask) Options(scale float32) tensor.SDPAOptions {
	return tensor.SDPAOptions{Scale: scale, MaskKind: m.Kind, Mask: m.Array}
}

// Free frees the mask array, if any (every row's, for a batched pass).
func (m Mask) Free() {
	m.Array.Free()
	for _, r := range m.Rows {
		r.Free()
	}
}

// causalMask is mlx-lm's create_causal_mask: n queries at positions
// offset..offset+n-1 against keys 0..offset+n-1; query l sees key r when
// r ≤ l and, with a window, l < r + window.
func causalMask(be tensor.Backend, n, offset, window int) *tensor.Array {
	t := offset + n
	raw := make([]byte, n*t)
	for i := range n {
		l := offset + i
		for r := range t {
			if r <= l && (window <= 0 || l < r+window) {
				raw[i*t+r] = 1
			}
		}
	}
	return tensor.FromBytesOn(be, raw, []int{n, t}, tensor.Bool, false)
}

// attentionMask is mlx-lm's create_attention_mask for caches that keep
// every token: a window always needs an array, a single query needs no
// mask, and otherwise the built-in causal mask does unless an array is asked for.
func attentionMask(be tensor.Backend, n, offset, window int, returnArray bool) Mask {
	switch {
	case window > 0:
		return Mask{Kind: tensor.MaskArray, Array: causalMask(be, n, offset, window)}
	case n == 1:
		return Mask{}
	case returnArray:
		return Mask{Kind: tensor.MaskArray, Array: causalMask(be, n, offset, 0)}
	default:
		return Mask{Kind: tensor.MaskCausal}
	}
}

// Attention computes scaled dot-product attention of q [B, Hq, L, D]
// against what a cache returned, so that model code does not care which
// kind of cache a layer has: plain caches go to
// tensor.ScaledDotProductAttention, quantized ones to quantized matmuls
// that never dequantize the cache, paged ones to the same over the pool's
// blocks (pagedAttention). o carries the scale, the mask (see
// Mask.Options) and optional sinks (plain caches only).
func Attention(q *tensor.Array, kv KV, o tensor.SDPAOptions) *tensor.Array {
	o.KeyStart = kv.Start
	if kv.Rows != nil {
		panic(&tensor.Error{Op: "kv.Attention", Err: fmt.Errorf("%w: a batched pass's KV needs its row masks: use kv.Attend", tensor.ErrArgument)})
	}
	if kv.Paged != nil {
		return pagedAttention(q, kv.Paged, o)
	}
	if kv.Turbo != nil {
		return turboAttention(q, kv.Turbo, o)
	}
	if kv.Quant != nil {
		if o.Sinks != nil {
			panic(&tensor.Error{Op: "kv.Attention", Err: fmt.Errorf("%w: attention sinks with a quantized cache", tensor.ErrArgument)})
		}
		return quantizedAttention(q, kv.Quant, o)
	}
	return tensor.ScaledDotProductAttention(q, kv.Keys, kv.Values, o)
}

// ---- state shared by the cache types ----

// buffers is what every cache holds, whatever its layout (linear or
// rotating): its kind and codec, the buffers themselves, the offset, the
// views the last UpdateAndFetch handed out and the file mapping borrowed
// arrays come from.
type buffers struct {
	kind   Kind
	c      codec
	parts  []*tensor.Array // nil while empty
	offset int
	views  []*tensor.Array // handed out by the last UpdateAndFetch
	pin    *mapping        // the file mapping borrowed arrays come from, if any
}

// Offset is the number of tokens the cache has seen (its position).
func (b *buffers) Offset() int { return b.offset }

// Bytes counts the buffers' capacity.
func (b *buffers) Bytes() int { return bytesOf(b.parts) }

func (b *buffers) freeViews() {
	tensor.Free(b.views...)
	b.views = nil
}

func (b *buffers) backend() tensor.Backend {
	if b.parts != nil {
		return b.parts[0].Backend()
	}
	return tensor.Default()
}

// checkState refuses a state of another kind or quantization.
func (b *buffers) checkState(st State) error {
	if st.Kind != b.kind {
		return fmt.Errorf("kv: %s state for a %s", st.Kind, b.kind)
	}
	if b.c.quantized() && (st.GroupSize != b.c.groupSize || st.Bits != b.c.bits) {
		return fmt.Errorf("kv: state quantized with group %d, %d bits for a cache with group %d, %d bits",
			st.GroupSize, st.Bits, b.c.groupSize, b.c.bits)
	}
	return nil
}

// cloneBuffers returns a copy sharing the buffers copy-on-write (and the
// mapping), without views.
func (b *buffers) cloneBuffers() buffers {
	c := *b
	c.views = nil
	c.pin = b.pin.acquire()
	c.parts = handles(b.parts)
	keep(c.parts...)
	return c
}

// release frees everything and empties the buffers.
func (b *buffers) release() {
	b.freeViews()
	tensor.Free(b.parts...)
	b.parts = nil
	b.offset = 0
	b.pin.release()
	b.pin = nil
}

func (b *buffers) setPin(m *mapping) { b.pin = m }

// quantizeInto fills q, an empty quantized cache, with the first n token
// slots of b's plain keys and values, encoded with q's codec.
func (b *buffers) quantizeInto(q *buffers, n int) error {
	if b.parts == nil {
		return nil
	}
	k, v := b.parts[0], b.parts[1]
	if g := q.c.groupSize; k.Dim(3)%g != 0 || v.Dim(3)%g != 0 {
		return fmt.Errorf("kv: head dims %d/%d are not multiples of group size %d", k.Dim(3), v.Dim(3), g)
	}
	return tensor.Try(func() {
		scoped(func() {
			if n < k.Dim(2) {
				k, v = sliceT(k, 0, n), sliceT(v, 0, n)
			}
			enc, _ := q.c.encode("ToQuantized", k, v)
			keep(enc...)
			q.parts = enc
		})
	})
}

// ---- helpers shared by the cache types ----

// keep detaches arrays from the caller's scope: the cache owns them.
func keep(arrs ...*tensor.Array) { tensor.Detach(arrs...) }

// scoped runs f in a scope of its own, freeing its temporaries.
func scoped(f func()) {
	s := tensor.NewScope()
	defer s.Close()
	f()
}

func throwf(op string, sentinel error, format string, args ...any) {
	panic(&tensor.Error{Op: "kv." + op, Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))})
}

func checkKV(op string, keys, values *tensor.Array) {
	if keys.NDim() != 4 || values.NDim() != 4 {
		throwf(op, tensor.ErrShape, "keys %v, values %v (want [B, H, T, D])", keys.Shape(), values.Shape())
	}
	for i := range 3 {
		if keys.Dim(i) != values.Dim(i) {
			throwf(op, tensor.ErrShape, "keys %v and values %v disagree", keys.Shape(), values.Shape())
		}
	}
	if keys.Dim(2) == 0 {
		throwf(op, tensor.ErrShape, "no new tokens")
	}
}

// sliceT is a[..., lo:hi, :] along the token axis (a view where the backend can).
func sliceT(a *tensor.Array, lo, hi int) *tensor.Array { return tensor.SliceAxis(a, 2, lo, hi) }

// handle returns a new handle to all of a (a view sharing its storage).
func handle(a *tensor.Array) *tensor.Array { return tensor.SliceAxis(a, 2, 0, a.Dim(2)) }

// copyOf returns a fresh copy of a that shares no storage with it.
func copyOf(a *tensor.Array) *tensor.Array { return tensor.Concatenate([]*tensor.Array{a}, 2) }

// zerosT returns zeros of like's shape with t token slots, on be.
func zerosT(be tensor.Backend, like *tensor.Array, t int) *tensor.Array {
	s := append([]int(nil), like.Shape()...)
	s[2] = t
	return tensor.FullOn(be, s, 0, like.DType())
}

// writeT writes u into a[..., at:at+n, :] in place.
func writeT(a, u *tensor.Array, at int) {
	n := u.Dim(2)
	a.SetSlice(u, []int{0, 0, at}, []int{a.Dim(0), a.Dim(1), at + n}, nil)
}

func bytesOf(arrs []*tensor.Array) int {
	n := 0
	for _, a := range arrs {
		if a != nil && !a.Freed() {
			n += a.NBytes()
		}
	}
	return n
}

// handles returns new handles to every array (shared storage).
func handles(arrs []*tensor.Array) []*tensor.Array {
	if arrs == nil {
		return nil
	}
	out := make([]*tensor.Array, len(arrs))
	for i, a := range arrs {
		out[i] = handle(a)
	}
	return out
}
