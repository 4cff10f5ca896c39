package kv

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// PagedCache is one sequence's cache for one layer, over a Pool's blocks:
// a block table maps its token slots to blocks (slot s lies in block
// table[s/BlockSize] at s%BlockSize), new tokens are written into the
// blocks in place, and UpdateAndFetch hands attention the table rather
// than a contiguous copy (PagedKV).
//
// It reproduces the contiguous cache of its layer's kind exactly: the slots
// are those of KVCache (every token, in order) or of RotatingKVCache
// (mlx-lm's ring, with its concatenate and in-place rules, its masks and
// its keep prefix), so that attention sees the same keys in the same order
// and its output is bit-identical. A sliding-window layer holds only the
// blocks of its ring (about Window slots; a prefill chunk of n tokens
// briefly holds Window−1+n): blocks leaving the window are overwritten in
// place or freed when the ring is rebuilt.
//
// Blocks are shared by reference count: Clone and prefix adoption share
// every block, and a write into a shared block (or one the prefix index
// keeps) first copies it (copy-on-write), so a partial last block is copied
// once, on the next write. State returns contiguous copies, in the format
// of the equivalent contiguous cache, which Save writes and SetState reads.
type PagedCache struct {
	lp     *layerPool
	kind   Kind
	table  []int32
	offset int
	// rotating layers (lp.spec.Window > 0): the ring's length (the
	// contiguous cache's buffer length), next write slot, and whether slot
	// s still holds position s (no wrap, no drop) — needed to register
	// blocks for prefix reuse
	size, idx  int
	positional bool
	// written mirrors a contiguous cache having buffers (it was written or
	// restored since it was last emptied): its State then has arrays, if
	// of no tokens
	written bool
	// blocks dropped by Trim, released at the next write, SetState or Free
	// so that a KV fetched before the Trim stays readable (as views of a
	// contiguous cache do)
	deferred []int32
	// chain is the prefix entry of each leading full block, when registered
	// or adopted (see RegisterPrefix)
	chain []*prefixEntry
}

func newPagedCache(lp *layerPool) *PagedCache {
	c := &PagedCache{lp: lp, positional: true}
	switch {
	case lp.turbo():
		c.kind = lp.spec.Turbo.turboKind(lp.spec.Window > 0)
	case lp.spec.Window > 0 && lp.c.quantized():
		c.kind = KindQuantizedRotating
	case lp.spec.Window > 0:
		c.kind = KindRotating
	case lp.c.quantized():
		c.kind = KindQuantized
	default:
		c.kind = KindKV
	}
	return c
}

// PagedKV is keys and values attention reads from a pool's blocks: the
// layer's storage, a block table and the number of slots to read. Slot p
// is at block Table[p/BlockSize], position p%BlockSize; slots [0, Len) are
// what a contiguous cache would have handed out, in the same order.
type PagedKV struct {
	lp        *layerPool
	Table     []int32
	Len       int
	BlockSize int
	// order, when set, is the slots in the order attention reads them (a
	// wrapped sliding-window ring, oldest first): Gather and Attention
	// copy them out in that order
	order []span
}

// InOrder reports whether attention reads slots [0, Len) in slot order;
// otherwise (a wrapped sliding-window ring) Gather gives the order.
func (p *PagedKV) InOrder() bool { return p.order == nil }

// Parts returns the layer's storage arrays, [NumBlocks, Hkv, BlockSize, w]:
// keys and values for plain layers; packed keys, key scales, key biases,
// then the same for values, for quantized ones; the uint8 key and value
// codes for TurboQuant ones (see Turbo). The arrays are the pool's
// (do not free them) and are replaced when the pool grows, so call Parts
// after the writes of a step, not before.
func (p *PagedKV) Parts() []*tensor.Array { return p.lp.parts }

// Quantized reports whether the parts are affine-quantized, and how.
func (p *PagedKV) Quantized() (groupSize, bits int, ok bool) {
	return p.lp.c.groupSize, p.lp.c.bits, p.lp.c.quantized()
}

// Gather returns the parts' Len slots (in attention's order, see
// InOrder) as contiguous [1, Hkv, Len, w] arrays, owned by the caller: the
// keys and values (or their quantized parts) a contiguous cache would
// have returned, bit for bit.
func (p *PagedKV) Gather() []*tensor.Array {
	order := p.order
	if order == nil {
		order = []span{{0, p.Len}}
	}
	return tensor.WithScope(func() []*tensor.Array {
		out := make([]*tensor.Array, len(p.lp.parts))
		for i := range p.lp.parts {
			out[i] = gatherSlots(p.lp, i, p.Table, order)
		}
		return out
	})
}

// span is a range of slots [lo, hi).
type span struct{ lo, hi int }

func spanLen(s []span) int {
	n := 0
	for _, x := range s {
		n += x.hi - x.lo
	}
	return n
}

// gatherSlots copies the slots of spans (in order) of part i into one
// contiguous [1, Hkv, n, w] array: block slabs joined along the token axis.
// The slab views it makes are freed by the time it returns (it runs in its
// own scope), so the storage has no live view when it is written next.
func gatherSlots(lp *layerPool, i int, table []int32, spans []span) *tensor.Array {
	bs := lp.pool.blockSize
	out := tensor.WithScope(func() []*tensor.Array {
		var slabs []*tensor.Array
		for _, s := range spans {
			for lo := s.lo; lo < s.hi; {
				j := lo / bs
				if j >= len(table) {
					throwf("gather", tensor.ErrArgument, "slot %d beyond %d blocks", lo, len(table))
				}
				hi := min(s.hi, (j+1)*bs)
				slabs = append(slabs, lp.slab(i, table[j], lo-j*bs, hi-j*bs))
				lo = hi
			}
		}
		if len(slabs) == 0 {
			p := lp.parts[i]
			return []*tensor.Array{tensor.FullOn(p.Backend(), []int{1, p.Dim(1), 0, p.Dim(3)}, 0, p.DType())}
		}
		return []*tensor.Array{tensor.Concatenate(slabs, 2)}
	})
	return out[0]
}

// pagedAttention is Attention over paged keys and values. Plain layers go
// to tensor.ScaledDotProductAttentionPaged, which reads the blocks through
// the table (in place on the CPU backend; other backends gather them) and
// equals SDPA on the gathered keys and values bit for bit. Quantized
// layers run quantizedAttention's products on their blocks through the
// table (pagedQuantizedAttention; a wrapped ring's slots are gathered
// into temporal order first), bit-identical to the contiguous quantized
// cache. TurboQuant layers gather their codes and run turboAttention on
// them (pagedTurboAttention), bit-identical to the contiguous TurboQuant
// cache.
func pagedAttention(q *tensor.Array, p *PagedKV, o tensor.SDPAOptions) *tensor.Array {
	if p.lp.turbo() {
		return pagedTurboAttention(q, p, o)
	}
	if !p.lp.c.quantized() && p.order == nil {
		return tensor.ScaledDotProductAttentionPaged(q, p.lp.parts[0], p.lp.parts[1], p.Table, p.Len, o)
	}
	if !p.lp.c.quantized() { // a wrapped ring: its slots in temporal order
		res := tensor.WithScope(func() []*tensor.Array {
			kv := p.Gather()
			return []*tensor.Array{tensor.ScaledDotProductAttention(q, kv[0], kv[1], o)}
		})
		return res[0]
	}
	if o.Sinks != nil {
		throwf("Attention", tensor.ErrArgument, "attention sinks with a quantized cache")
	}
	res := tensor.WithScope(func() []*tensor.Array {
		if p.order != nil { // a wrapped ring: its slots in temporal order
			return []*tensor.Array{quantizedAttention(q, p.lp.c.kv(p.Gather()).Quant, o)}
		}
		return []*tensor.Array{pagedQuantizedAttention(q, p, o)}
	})
	return res[0]
}

// pagedQuantizedAttention is quantizedAttention over an affine-quantized
// layer's blocks: both products read the packed blocks through the table
// (tensor.QuantizedMatmulPaged: in place on the CPU backend, gathered on
// others), bit for bit the contiguous quantized cache's result.
func pagedQuantizedAttention(q *tensor.Array, p *PagedKV, o tensor.SDPAOptions) *tensor.Array {
	parts, c := p.lp.parts, p.lp.c
	return quantizedAttend(q, parts[0].Dim(1), o,
		func(qs *tensor.Array) *tensor.Array {
			return tensor.QuantizedMatmulPaged(qs, parts[0], parts[1], parts[2], p.Table, p.Len, true, c.groupSize, c.bits)
		},
		func(pr *tensor.Array) *tensor.Array {
			return tensor.QuantizedMatmulPaged(pr, parts[3], parts[4], parts[5], p.Table, p.Len, false, c.groupSize, c.bits)
		})
}

// ---- writes ----

// ensure makes the table cover slots [0, hi), allocating blocks.
func (c *PagedCache) ensure(hi int) {
	bs := c.lp.pool.blockSize
	for len(c.table)*bs < hi {
		c.table = append(c.table, c.lp.alloc())
	}
}

// blocksFor counts the blocks writing slots [at, at+n) may allocate (new
// table entries and copies of shared blocks), for reserve.
func (c *PagedCache) blocksFor(at, n int) int {
	bs := c.lp.pool.blockSize
	need := 0
	for j := at / bs; j <= (at+n-1)/bs; j++ {
		if j >= len(c.table) || !c.lp.exclusive(c.table[j]) {
			need++
		}
	}
	return need
}

// writeAt writes the parts enc ([1, Hkv, n, w]) into slots [at, at+n). A
// shared or registered block is replaced by a fresh one first, copied
// unless the write covers it whole or fresh says that the slots it does
// not cover are dead. Callers reserve.
func (c *PagedCache) writeAt(enc []*tensor.Array, at int, fresh bool) {
	lp := c.lp
	bs := lp.pool.blockSize
	n := enc[0].Dim(2)
	c.ensure(at + n)
	scoped(func() {
		for lo := at; lo < at+n; {
			j := lo / bs
			hi := min(at+n, (j+1)*bs)
			if b := c.table[j]; !lp.exclusive(b) {
				nb := lp.alloc()
				if !fresh && hi-lo < bs {
					lp.copyBlock(b, nb)
				}
				lp.unref(b)
				c.table[j] = nb
			}
			b := int(c.table[j])
			whole := lo == at && hi == at+n // the write in one span: no slice
			for i, p := range lp.parts {
				u := enc[i]
				if !whole {
					u = sliceT(enc[i], lo-at, hi-at)
				}
				p.SetSlice(u, []int{b, 0, lo - j*bs, 0}, []int{b + 1, p.Dim(1), hi - j*bs, p.Dim(3)}, nil)
				if !whole {
					u.Free()
				}
			}
			lo = hi
		}
	})
}

// truncate releases the table's blocks beyond the first nb.
func (c *PagedCache) truncate(nb int) {
	for len(c.table) > nb {
		c.lp.unref(c.table[len(c.table)-1])
		c.table = c.table[:len(c.table)-1]
	}
	if len(c.chain) > nb {
		c.chain = c.chain[:nb]
	}
}

func (c *PagedCache) releaseDeferred() {
	for _, b := range c.deferred {
		c.lp.unref(b)
	}
	c.deferred = nil
}

func (c *PagedCache) blocks(slots int) int {
	bs := c.lp.pool.blockSize
	return (slots + bs - 1) / bs
}

func (c *PagedCache) fetch(n int) KV {
	nb := c.blocks(n)
	return KV{Paged: &PagedKV{lp: c.lp, Table: c.table[:nb:nb], Len: n, BlockSize: c.lp.pool.blockSize}}
}

// UpdateAndFetch writes the new tokens into the sequence's blocks and
// returns a PagedKV of what a contiguous cache of the layer's kind would
// have returned. It panics with a PoolExhaustedError (inside a
// *tensor.Error) when the layer has no block left; the cache is then
// unchanged.
func (c *PagedCache) UpdateAndFetch(keys, values *tensor.Array) KV {
	c.lp.check("UpdateAndFetch")
	c.releaseDeferred()
	var out KV
	scoped(func() {
		enc := c.lp.encode("UpdateAndFetch", keys, values)
		c.lp.init("UpdateAndFetch", enc)
		if c.lp.spec.Window > 0 {
			out = c.rotatingUpdate(enc)
			return
		}
		n := enc[0].Dim(2)
		c.lp.reserve("UpdateAndFetch", c.blocksFor(c.offset, n))
		c.writeAt(enc, c.offset, false)
		c.offset += n
		c.written = true
		out = c.fetch(c.offset)
	})
	return out
}

// ---- sliding-window layers: RotatingKVCache's rules over slots ----

// temporal is the slots of a ring of size slots, write position idx and
// offset in the order they were written (oldest first, keep prefix
// included), as RotatingKVCache.temporal.
func temporal(size, idx, offset, keepN int) []span {
	switch {
	case idx == size:
		return []span{{0, size}}
	case idx < offset:
		return []span{{0, keepN}, {idx, size}, {keepN, idx}}
	default:
		return []span{{0, idx}}
	}
}

// dropSpans removes n slots after the first keepN of the sequence spans.
func dropSpans(spans []span, keepN, n int) []span {
	var out []span
	pos := 0
	for _, s := range spans {
		for lo := s.lo; lo < s.hi; {
			// the run of this span that is wholly kept or wholly dropped
			hi := s.hi
			switch {
			case pos < keepN:
				hi = min(hi, lo+keepN-pos)
			case pos < keepN+n:
				hi = min(hi, lo+keepN+n-pos)
			}
			if pos < keepN || pos >= keepN+n {
				out = append(out, span{lo, hi})
			}
			pos += hi - lo
			lo = hi
		}
	}
	return out
}

// identity reports whether spans are the slots [0, m) in order.
func identity(spans []span) (m int, ok bool) {
	for _, s := range spans {
		if s.lo == s.hi {
			continue
		}
		if s.lo != m {
			return 0, false
		}
		m = s.hi
	}
	return m, true
}

// rebuildNeed bounds the blocks rebuild(spans, n new tokens) allocates.
func (c *PagedCache) rebuildNeed(spans []span, n int) int {
	m, inPlace := identity(spans)
	if !inPlace {
		return c.blocks(spanLen(spans) + n) // every block may be replaced
	}
	if n == 0 {
		return 0
	}
	return c.blocksFor(m, n)
}

// rebuild makes the ring hold the given slots, in order, at slots [0, m)
// followed by app (if any): RotatingKVCache's concatenations. Slots
// already in place stay; otherwise they are gathered into contiguous
// copies, made before any write, and written back. Blocks past the new
// length are released. Callers reserve rebuildNeed.
func (c *PagedCache) rebuild(spans []span, app []*tensor.Array) {
	lp := c.lp
	m, inPlace := identity(spans)
	if !inPlace {
		m = spanLen(spans)
		gathered := make([]*tensor.Array, len(lp.parts))
		for i := range lp.parts {
			gathered[i] = gatherSlots(lp, i, c.table, spans)
		}
		if m > 0 {
			c.writeAt(gathered, 0, true)
		}
		tensor.Free(gathered...)
		c.positional = false
	}
	n := 0
	if app != nil {
		n = app[0].Dim(2)
		// slots [0, m) left in place are live: a shared block holding
		// some of them is copied, not just replaced
		c.writeAt(app, m, !inPlace)
	}
	c.truncate(c.blocks(m + n))
	c.size = m + n
}

// rotatingUpdate is RotatingKVCache.UpdateAndFetch over slots: a single
// token is written in place (the ring grows by Step slots up to the
// window, is cut back to the window after a concatenation left it longer,
// and wraps to the keep prefix), several tokens are appended to the ring
// put in temporal order with the oldest dropped so that maxSize−1 remain.
// The blocks it needs are reserved before anything changes.
func (c *PagedCache) rotatingUpdate(enc []*tensor.Array) KV {
	maxSize, keepN := c.lp.spec.Window, c.lp.spec.Keep
	n := enc[0].Dim(2)
	if n == 1 {
		size, idx := c.size, c.idx
		if size == 0 || (c.offset >= size && size < maxSize) {
			grow := min(Step, maxSize-c.offset)
			if grow <= 0 {
				throwf("UpdateAndFetch", tensor.ErrArgument, "rotating state: offset %d, %d slots, window %d", c.offset, size, maxSize)
			}
			size += grow
			idx = c.offset
		}
		var spans []span
		need := 0
		trim := size - maxSize
		if trim > 0 {
			spans = dropSpans([]span{{0, size}}, keepN, trim)
			need = c.rebuildNeed(spans, 0) + 1
			idx = maxSize
		}
		at := idx
		if at == maxSize {
			at = keepN
		}
		if trim <= 0 {
			need = c.blocksFor(at, 1)
		}
		c.lp.reserve("UpdateAndFetch", need)
		c.size = size
		if trim > 0 {
			c.rebuild(spans, nil)
		}
		if at != idx {
			c.positional = false
		}
		c.writeAt(enc, at, false)
		c.offset++
		c.idx = at + 1
		return c.windowFetch()
	}
	if c.size == 0 {
		c.lp.reserve("UpdateAndFetch", c.blocksFor(0, n))
		c.writeAt(enc, 0, true)
		c.truncate(c.blocks(n))
		c.size = n
	} else {
		spans := temporal(c.size, c.idx, c.offset, keepN)
		if trim := spanLen(spans) - maxSize + 1; trim > 0 {
			spans = dropSpans(spans, keepN, trim)
		}
		c.lp.reserve("UpdateAndFetch", c.rebuildNeed(spans, n))
		c.rebuild(spans, enc)
	}
	c.offset += n
	c.idx = c.size
	return c.windowFetch()
}

// windowFetch is what a sliding-window layer hands attention: the ring's
// tokens in temporal order (a wrapped ring's slots reordered, as
// RotatingKVCache hands them over) with the position of the first.
func (c *PagedCache) windowFetch() KV {
	n := c.size
	if c.offset < c.lp.spec.Window {
		n = c.offset
	}
	out := c.fetch(n)
	var order []span
	for _, s := range temporal(c.size, c.idx, c.offset, c.lp.spec.Keep) {
		if s.hi > s.lo {
			order = append(order, s)
		}
	}
	if len(order) > 1 || (len(order) == 1 && order[0] != span{0, n}) {
		out.Paged.order = order
	}
	out.Start = windowStart(c.offset, n, c.lp.spec.Keep)
	return out
}

// ---- the rest of Cache ----

// Offset is the number of tokens the cache has seen (its position).
func (c *PagedCache) Offset() int { return c.offset }

// MakeMask follows the contiguous cache of the layer's kind.
func (c *PagedCache) MakeMask(n, windowSize int, returnArray bool) Mask {
	be := c.lp.backend()
	if w := c.lp.spec.Window; w > 0 {
		return rotatingMask(be, n, windowSize, returnArray, w, c.offset)
	}
	return attentionMask(be, n, c.offset, windowSize, returnArray)
}

// IsTrimmable is true for full-attention layers, and for sliding-window
// ones until the window has been exceeded.
func (c *PagedCache) IsTrimmable() bool {
	return c.lp.spec.Window == 0 || c.offset < c.lp.spec.Window
}

// Trim drops up to n most recent tokens and returns how many it dropped;
// whole blocks no longer needed go back to the pool at the next write
// (a KV fetched before stays readable until then). A sliding-window layer
// keeps its blocks once the window has been exceeded (trimming it then is
// the caller's error, as for RotatingKVCache).
func (c *PagedCache) Trim(n int) int {
	n = max(min(c.offset, n), 0)
	trimmable := c.IsTrimmable()
	c.offset -= n
	if c.lp.spec.Window > 0 {
		c.idx -= n
		if !trimmable || c.idx != c.offset {
			return n
		}
	}
	nb := c.blocks(c.offset)
	for len(c.table) > nb {
		c.deferred = append(c.deferred, c.table[len(c.table)-1])
		c.table = c.table[:len(c.table)-1]
	}
	if full := c.offset / c.lp.pool.blockSize; len(c.chain) > full {
		c.chain = c.chain[:full]
	}
	return n
}

// State returns contiguous copies of the live slots in the format of the
// equivalent contiguous cache's State (same kind, arrays, offsets), so it
// stays valid whatever the cache does later and Save writes it as is.
func (c *PagedCache) State() State {
	st := State{Kind: c.kind, Offset: c.offset, GroupSize: c.lp.c.groupSize, Bits: c.lp.c.bits}
	if c.lp.turbo() {
		st = c.lp.spec.Turbo.state(st)
	}
	n := c.offset
	if w := c.lp.spec.Window; w > 0 {
		st.Idx, st.MaxSize, st.Keep = c.idx, w, c.lp.spec.Keep
		if c.size == 0 {
			return st
		}
		n = min(c.offset, c.size)
	}
	if !c.written && c.size == 0 {
		return st
	}
	st.Arrays = (&PagedKV{lp: c.lp, Table: c.table, Len: n}).Gather()
	return st
}

// SetState replaces the contents with a snapshot (a contiguous cache's
// State or a PagedCache's), written into fresh blocks.
func (c *PagedCache) SetState(st State) error {
	c.lp.check("SetState")
	if st.Kind != c.kind {
		return fmt.Errorf("kv: %s state for a paged %s", st.Kind, c.kind)
	}
	if c.lp.c.quantized() && (st.GroupSize != c.lp.c.groupSize || st.Bits != c.lp.c.bits) {
		return fmt.Errorf("kv: state quantized with group %d, %d bits for a cache with group %d, %d bits",
			st.GroupSize, st.Bits, c.lp.c.groupSize, c.lp.c.bits)
	}
	if c.lp.turbo() {
		if err := c.lp.spec.Turbo.checkState(st); err != nil {
			return err
		}
	}
	if err := checkStateArrays(st, c.lp.nparts()); err != nil {
		return err
	}
	w := c.lp.spec.Window
	if w > 0 {
		if st.MaxSize != w || st.Keep != c.lp.spec.Keep {
			return fmt.Errorf("kv: rotating state with max size %d, keep %d for a paged layer with window %d, keep %d", st.MaxSize, st.Keep, w, c.lp.spec.Keep)
		}
		if st.Offset < 0 || st.Idx < 0 || (len(st.Arrays) > 0 && st.Idx > st.Arrays[0].Dim(2)) {
			return fmt.Errorf("kv: rotating state with offset %d, idx %d", st.Offset, st.Idx)
		}
	}
	return tensor.Try(func() {
		scoped(func() {
			if len(st.Arrays) > 0 {
				if st.Arrays[0].Dim(0) != 1 {
					throwf("SetState", tensor.ErrShape, "paged caches hold one sequence; state arrays %v", st.Arrays[0].Shape())
				}
				c.lp.init("SetState", st.Arrays)
				// reserve before releasing: a failed SetState leaves the cache as it was
				n := st.Arrays[0].Dim(2)
				c.lp.reserve("SetState", c.blocks(n))
			}
			c.release()
			if len(st.Arrays) == 0 {
				if w > 0 {
					c.offset, c.idx = st.Offset, st.Idx
				}
				return
			}
			n := st.Arrays[0].Dim(2)
			c.writeAt(st.Arrays, 0, true)
			c.offset = n
			c.written = true
			if w > 0 {
				c.size, c.offset, c.idx = n, st.Offset, st.Idx
				c.positional = c.idx == c.size && c.offset == c.size
			}
		})
	})
}

// Clone returns a cache sharing every block (reference counts); either
// side's next write into a shared block copies it first.
func (c *PagedCache) Clone() Cache {
	d := *c
	d.table = append([]int32(nil), c.table...)
	d.chain = append([]*prefixEntry(nil), c.chain...)
	d.deferred = nil
	for _, b := range d.table {
		c.lp.ref(b)
	}
	return &d
}

// Bytes is the storage of the blocks the cache holds (shared blocks are
// counted by every cache holding them).
func (c *PagedCache) Bytes() int { return (len(c.table) + len(c.deferred)) * c.lp.blockBytes }

// Blocks is the number of blocks the cache holds.
func (c *PagedCache) Blocks() int { return len(c.table) }

// release returns every block and empties the cache.
func (c *PagedCache) release() {
	c.releaseDeferred()
	c.truncate(0)
	c.chain = nil
	c.offset, c.size, c.idx = 0, 0, 0
	c.positional, c.written = true, false
}

// Free returns the cache's blocks to the pool (those shared stay with
// their other holders); the cache is empty after.
func (c *PagedCache) Free() {
	if c.lp.pool.closed {
		c.table, c.deferred, c.chain = nil, nil, nil
		return
	}
	c.release()
}

// Pool is the pool the cache's blocks come from.
func (c *PagedCache) Pool() *Pool { return c.lp.pool }

// Layer is the model layer the cache serves.
func (c *PagedCache) Layer() int { return c.lp.index }

// Table returns a copy of the block table.
func (c *PagedCache) Table() []int32 { return append([]int32(nil), c.table...) }
