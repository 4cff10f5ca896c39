package kv

import (
	"fmt"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// Rows is one layer's cache for a batched forward pass over several
// sequences at once: the pass's tokens are the rows' tokens laid end to
// end along the token axis ([1, H, Σ Lens, D]; varlen, no padding), and
// row i owns the next Lens[i] of them and writes them to Caches[i].
//
// Model code that attends through Rows does per row exactly what a lone
// forward pass of that row does — its rotary offset (Spans), its mask
// (MakeMask gives one per row), its UpdateAndFetch and its attention
// (Attend) — so a row's result does not depend on the other rows. Rows
// is a view for one pass: it owns neither the caches nor their contents,
// and it has no single offset, state or clone (those methods panic or
// refuse; ask the row caches).
type Rows struct {
	Caches []Cache
	Lens   []int
}

// NewRows makes the view of caches[i] writing lens[i] tokens each.
func NewRows(caches []Cache, lens []int) *Rows {
	if len(caches) != len(lens) || len(caches) == 0 {
		panic(&tensor.Error{Op: "kv.NewRows", Err: fmt.Errorf("%w: %d caches for %d row lengths", tensor.ErrArgument, len(caches), len(lens))})
	}
	for i, n := range lens {
		if n <= 0 || caches[i] == nil {
			panic(&tensor.Error{Op: "kv.NewRows", Err: fmt.Errorf("%w: row %d: %d tokens, cache %v", tensor.ErrArgument, i, n, caches[i])})
		}
	}
	return &Rows{Caches: slices.Clone(caches), Lens: slices.Clone(lens)}
}

// Tokens is the number of tokens the pass holds (the sum of Lens).
func (r *Rows) Tokens() int {
	n := 0
	for _, l := range r.Lens {
		n += l
	}
	return n
}

// Span is one row's share of a pass: Len tokens at positions
// Offset..Offset+Len-1, starting at token Start of the pass.
type Span struct{ Start, Len, Offset int }

// Spans returns how the n tokens a pass gives a cache divide into rows:
// for Rows, one span per row at that row cache's offset (read before the
// update, as a lone pass reads Offset); for any other cache (or nil), a
// single span of n tokens at its offset.
func Spans(c Cache, n int) []Span {
	r, ok := c.(*Rows)
	if !ok {
		off := 0
		if c != nil {
			off = c.Offset()
		}
		return []Span{{0, n, off}}
	}
	if t := r.Tokens(); t != n {
		panic(&tensor.Error{Op: "kv.Spans", Err: fmt.Errorf("%w: %d tokens for rows holding %d", tensor.ErrShape, n, t)})
	}
	out := make([]Span, len(r.Lens))
	start := 0
	for i, l := range r.Lens {
		out[i] = Span{start, l, r.Caches[i].Offset()}
		start += l
	}
	return out
}

// UpdateAndFetch writes each row's slice of keys and values to its cache
// and returns the rows' KVs (KV.Rows).
func (r *Rows) UpdateAndFetch(keys, values *tensor.Array) KV {
	if t := r.Tokens(); keys.Dim(2) != t || values.Dim(2) != t {
		panic(&tensor.Error{Op: "kv.Rows.UpdateAndFetch", Err: fmt.Errorf("%w: keys %v, values %v for rows holding %d tokens", tensor.ErrShape, keys.Shape(), values.Shape(), t)})
	}
	out := &RowsKV{KV: make([]KV, len(r.Caches)), Lens: slices.Clone(r.Lens)}
	if len(r.Caches) == 1 {
		out.KV[0] = r.Caches[0].UpdateAndFetch(keys, values)
		return KV{Rows: out}
	}
	sc := tensor.NewScope() // the row slices; each cache copies what it keeps
	defer sc.Close()
	start := 0
	for i, c := range r.Caches {
		n := r.Lens[i]
		out.KV[i] = c.UpdateAndFetch(sliceT(keys, start, start+n), sliceT(values, start, start+n))
		start += n
	}
	return KV{Rows: out}
}

// Offset panics: rows have no single position (see Spans).
func (r *Rows) Offset() int {
	panic(&tensor.Error{Op: "kv.Rows.Offset", Err: fmt.Errorf("%w: a batched pass has one offset per row; use kv.Spans", tensor.ErrArgument)})
}

// MakeMask returns each row's mask for its tokens (Mask.Rows); n must be
// the pass's token count.
func (r *Rows) MakeMask(n, windowSize int, returnArray bool) Mask {
	if t := r.Tokens(); n != t {
		panic(&tensor.Error{Op: "kv.Rows.MakeMask", Err: fmt.Errorf("%w: mask for %d tokens, rows hold %d", tensor.ErrShape, n, t)})
	}
	m := Mask{Rows: make([]Mask, len(r.Caches))}
	for i, c := range r.Caches {
		m.Rows[i] = c.MakeMask(r.Lens[i], windowSize, returnArray)
	}
	return m
}

// IsTrimmable is false: trim the row caches.
func (r *Rows) IsTrimmable() bool { return false }

// Trim drops nothing: trim the row caches.
func (r *Rows) Trim(int) int { return 0 }

// State panics: a view has no state of its own; snapshot the row caches.
func (r *Rows) State() State {
	panic(&tensor.Error{Op: "kv.Rows.State", Err: fmt.Errorf("%w: snapshot the row caches, not the batch view", tensor.ErrArgument)})
}

// SetState refuses: restore the row caches.
func (r *Rows) SetState(State) error {
	return fmt.Errorf("kv: a batch view (Rows) has no state; restore the row caches")
}

// Clone panics: clone the row caches.
func (r *Rows) Clone() Cache {
	panic(&tensor.Error{Op: "kv.Rows.Clone", Err: fmt.Errorf("%w: clone the row caches, not the batch view", tensor.ErrArgument)})
}

// Bytes is the memory of the row caches.
func (r *Rows) Bytes() int {
	n := 0
	for _, c := range r.Caches {
		n += c.Bytes()
	}
	return n
}

// Free does nothing: the view owns none of the caches.
func (r *Rows) Free() {}

// RowsKV is what a batched pass's attention reads: each row's KV and its
// token count, in pass order.
type RowsKV struct {
	KV   []KV
	Lens []int
}

// Attend is attention with the mask as the cache prescribed it: o's scale
// and sinks, m's mask. For a batched pass (kv.Rows is KV.Rows, m.Rows its
// masks), each row's queries [1, Hq, Lens[i], D] attend to that row's KV
// with that row's mask, and the rows' outputs are laid end to end again,
// exactly as a lone pass of each row computes them.
func Attend(q *tensor.Array, kv KV, m Mask, o tensor.SDPAOptions) *tensor.Array {
	if kv.Rows == nil {
		o.MaskKind, o.Mask = m.Kind, m.Array
		return Attention(q, kv, o)
	}
	rk := kv.Rows
	if len(m.Rows) != len(rk.KV) {
		panic(&tensor.Error{Op: "kv.Attend", Err: fmt.Errorf("%w: %d row masks for %d rows", tensor.ErrArgument, len(m.Rows), len(rk.KV))})
	}
	if len(rk.KV) == 1 {
		return Attend(q, rk.KV[0], m.Rows[0], o)
	}
	outs := make([]*tensor.Array, len(rk.KV))
	start := 0
	sc := tensor.NewScope()
	defer sc.Close()
	for i, n := range rk.Lens {
		outs[i] = Attend(sliceT(q, start, start+n), rk.KV[i], m.Rows[i], o)
		start += n
	}
	return sc.Keep(tensor.Concatenate(outs, 2))
}
