package kv

import (
	"errors"
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// DefaultBlockSize is the number of token slots in a pool block when the
// configuration names none. Chosen by measurement: decode attention over
// paged KV ran within noise of contiguous KV at every block size from 16
// to 256 (BENCHMARKS.md, 1k/8k/32k context), so the size is decided by
// what a small block saves: the partial last block a sequence wastes, and
// the granularity of prefix sharing (a later request reuses whole blocks:
// at 16, all but at most 15 tokens of a shared prefix). vLLM's default is
// 16 for the same reasons.
const DefaultBlockSize = 16

// initialBlocks is how many blocks a layer's storage starts with when the
// pool grows lazily; it then doubles up to the capacity.
const initialBlocks = 64

// ErrPoolExhausted is what a write into a full pool fails with (wrapped in
// a *PoolExhaustedError, inside the *tensor.Error the write panics with):
// every block of the layer is held by some sequence.
var ErrPoolExhausted = errors.New("kv pool exhausted")

// PoolExhaustedError names the numbers of an exhausted pool layer, so that
// the caller can tell a request that can never fit from one that must wait.
type PoolExhaustedError struct {
	Layer     int // the model layer
	Need      int // blocks the write needed
	Available int // blocks that were free or evictable
	Capacity  int // the layer's capacity in blocks
}

// Error names the layer and the numbers.
func (e *PoolExhaustedError) Error() string {
	return fmt.Sprintf("%v: layer %d needs %d blocks, %d of %d available", ErrPoolExhausted, e.Layer, e.Need, e.Available, e.Capacity)
}

// Unwrap returns ErrPoolExhausted.
func (e *PoolExhaustedError) Unwrap() error { return ErrPoolExhausted }

// LayerSpec is how one model layer's paged caches store and evict tokens.
// The zero value is a plain full-attention layer.
type LayerSpec struct {
	// Shared marks a layer without a cache of its own (Gemma 4's KV-sharing
	// layers read another layer's keys and values): NewCaches gives it nil.
	Shared bool
	// Window, when positive, makes the layer sliding-window with the
	// semantics of RotatingKVCache(Window, Keep), token for token.
	Window, Keep int
	// Quant stores the layer affine-quantized (Bits 0: as written), with
	// the codec of QuantizedKVCache.
	Quant QuantSpec
	// Turbo, when its KeyBits are set, stores the layer as TurboQuant codes
	// (TurboQuantKVCache's bytes, one key and one value part, from the
	// first token on); it excludes Quant.
	Turbo TurboSpec
	// Blocks is the layer's capacity in blocks; 0 takes PoolConfig.Blocks.
	Blocks int
	// Recurrent marks a linear-attention layer (RecurrentCache): its state
	// has a fixed size per sequence and is not paged — NewCaches gives
	// each sequence a RecurrentCache of its own and the layer holds no
	// blocks. A pool with such a layer caches no prefixes (a prefix's
	// blocks would come without the state after it).
	Recurrent bool
}

// LayerSpecOf is the paged equivalent of a contiguous cache, so that a
// model's MakeCaches (which decides each layer's kind) also decides its
// paged layout. A nil cache is a shared layer.
func LayerSpecOf(c Cache) (LayerSpec, error) {
	switch c := c.(type) {
	case nil:
		return LayerSpec{Shared: true}, nil
	case *KVCache:
		return LayerSpec{}, nil
	case *QuantizedKVCache:
		return LayerSpec{Quant: QuantSpec{Bits: c.c.bits, GroupSize: c.c.groupSize}}, nil
	case *RotatingKVCache:
		return LayerSpec{Window: c.maxSize, Keep: c.keepN}, nil
	case *QuantizedRotatingKVCache:
		return LayerSpec{Window: c.maxSize, Keep: c.keepN, Quant: QuantSpec{Bits: c.c.bits, GroupSize: c.c.groupSize}}, nil
	case *TurboQuantKVCache:
		return LayerSpec{Turbo: c.spec}, nil
	case *TurboQuantRotatingKVCache:
		return LayerSpec{Window: c.maxSize, Keep: c.keepN, Turbo: c.spec}, nil
	case *PagedCache:
		return c.lp.spec, nil
	case *RecurrentCache:
		return LayerSpec{Recurrent: true}, nil
	}
	return LayerSpec{}, fmt.Errorf("kv: no paged equivalent of a %T", c)
}

// LayerSpecs maps every cache of a model's MakeCaches to its paged spec
// (the caches are only inspected; the caller still frees them).
func LayerSpecs(caches []Cache) ([]LayerSpec, error) {
	out := make([]LayerSpec, len(caches))
	for i, c := range caches {
		s, err := LayerSpecOf(c)
		if err != nil {
			return nil, fmt.Errorf("kv: layer %d: %w", i, err)
		}
		out[i] = s
	}
	return out, nil
}

// PoolConfig describes a pool: its block size, each layer's spec and the
// capacity in blocks.
type PoolConfig struct {
	// BlockSize is the number of token slots per block (DefaultBlockSize when 0).
	BlockSize int
	// Blocks is each layer's capacity in blocks unless its spec says otherwise.
	Blocks int
	// Layers holds one spec per model layer.
	Layers []LayerSpec
	// Preallocate allocates each layer's whole capacity at its first write.
	// Otherwise storage starts at 64 blocks and doubles as needed up to the
	// capacity: memory the sequences never used is never taken, at the cost
	// of a copy of the layer's storage at each doubling (amortised: every
	// block is copied about once).
	Preallocate bool
	// OnEvict, when set, is called when the pool evicts cached prefixes to
	// make room for a write, before their blocks are freed: once for each
	// longest prefix the eviction removes from the index. It runs on the
	// goroutine using the pool, inside the write that needs the block (so
	// within a forward pass): it must not use the pool other than through
	// its argument, and should only copy what it keeps (Evicted.States)
	// and hand the rest of the work to another goroutine.
	OnEvict func(*Evicted)
}

// Pool is paged key/value storage for every layer of one model: per layer,
// fixed-size blocks of BlockSize token slots in arrays
// [NumBlocks, Hkv, BlockSize, D] (one per stored part: keys and values, or
// the packed words, scales and biases of both when quantized), so that
// each block holds, for each head, a contiguous BlockSize×D slab — the
// layout a block-table attention kernel reads. Each layer has its own
// block numbering, free list and reference counts: layers differ in head
// count and head dim (Gemma 4), and a sliding-window layer needs a window's
// worth of blocks where a full layer needs the whole context.
//
// Sequences hold blocks through PagedCaches (NewCaches); blocks are
// reference-counted so that clones and sequences with a common prefix share
// them, and full blocks can be kept, keyed by their tokens, for later
// sequences with the same prefix (RegisterPrefix, AdoptPrefix). A pool is
// not safe for concurrent use.
type Pool struct {
	blockSize   int
	preallocate bool
	layers      []*layerPool
	prefix      prefixIndex
	closed      bool
	onEvict     func(*Evicted)
}

// NewPool returns an empty pool; no storage is allocated before the first
// write (storage shapes and dtypes come from the first keys and values
// each layer receives).
func NewPool(cfg PoolConfig) (*Pool, error) {
	bs := cfg.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if bs < 1 {
		return nil, fmt.Errorf("kv: pool block size %d", bs)
	}
	p := &Pool{blockSize: bs, preallocate: cfg.Preallocate, onEvict: cfg.OnEvict}
	p.prefix.init(p)
	for i, s := range cfg.Layers {
		if s.Blocks == 0 {
			s.Blocks = cfg.Blocks
		}
		if !s.Shared && !s.Recurrent {
			if s.Blocks <= 0 {
				return nil, fmt.Errorf("kv: pool layer %d: capacity %d blocks", i, s.Blocks)
			}
			if s.Window < 0 || (s.Window > 0 && (s.Keep < 0 || s.Keep >= s.Window)) {
				return nil, fmt.Errorf("kv: pool layer %d: window %d, keep %d", i, s.Window, s.Keep)
			}
			if s.Quant.Bits != 0 {
				if err := checkQuantSpec(s.Quant.GroupSize, s.Quant.Bits); err != nil {
					return nil, fmt.Errorf("kv: pool layer %d: %w", i, err)
				}
			}
			if err := s.checkTurbo(); err != nil {
				return nil, fmt.Errorf("kv: pool layer %d: %w", i, err)
			}
		}
		p.layers = append(p.layers, &layerPool{pool: p, index: i, spec: s, c: codec{s.Quant.GroupSize, s.Quant.Bits}, capacity: s.Blocks})
	}
	return p, nil
}

// BlockSize is the number of token slots per block.
func (p *Pool) BlockSize() int { return p.blockSize }

// Layers is the number of model layers the pool serves.
func (p *Pool) Layers() int { return len(p.layers) }

// NewCaches returns one empty PagedCache per layer over the pool, in the
// form a model's Forward takes (nil for shared layers). Free them (or
// model.FreeCaches) to return their blocks.
func (p *Pool) NewCaches() []Cache {
	out := make([]Cache, len(p.layers))
	for i, lp := range p.layers {
		switch {
		case lp.spec.Recurrent:
			out[i] = NewRecurrentCache()
		case !lp.spec.Shared:
			out[i] = newPagedCache(lp)
		}
	}
	return out
}

// NewCache returns an empty PagedCache for one layer.
func (p *Pool) NewCache(layer int) (*PagedCache, error) {
	if layer < 0 || layer >= len(p.layers) || p.layers[layer].spec.Shared || p.layers[layer].spec.Recurrent {
		return nil, fmt.Errorf("kv: pool has no cache for layer %d", layer)
	}
	return newPagedCache(p.layers[layer]), nil
}

// BlocksNeeded is, per layer, the most blocks one sequence holds at any
// time while it is fed tokens tokens in writes of at most chunk tokens
// (shared layers: 0): what admission reserves so that a running sequence
// never runs out. A full layer holds every token; a sliding-window one
// holds its ring, at most Window−1+chunk slots (blocks it shares with
// other sequences count for each of them: a shared block written is
// replaced by a fresh one, not added to).
func (p *Pool) BlocksNeeded(tokens, chunk int) []int {
	bs := p.blockSize
	out := make([]int, len(p.layers))
	for i, lp := range p.layers {
		switch w := lp.spec.Window; {
		case lp.spec.Shared, lp.spec.Recurrent:
		case w > 0:
			slots := min(tokens, max(w-1+chunk, w))
			out[i] = (slots + bs - 1) / bs
		default:
			out[i] = (tokens + bs - 1) / bs
		}
	}
	return out
}

// LayerStats is one layer's block accounting.
type LayerStats struct {
	Capacity   int // blocks the layer may hold
	Allocated  int // blocks of storage allocated so far
	Used       int // blocks held by at least one sequence
	Cached     int // blocks held by no sequence but kept for prefix reuse (evictable)
	Free       int // blocks a write can get: Capacity − Used (cached blocks are evicted on demand)
	Peak       int // the most blocks ever used at once
	BlockBytes int // bytes per block (0 before the layer's first write)
}

// PoolStats is the pool's accounting, per layer and in all.
type PoolStats struct {
	Layers                             []LayerStats // nil-spec (shared) layers are all zeros
	Capacity, Used, Cached, Free, Peak int          // block sums over layers
	Bytes                              int          // storage allocated
	CapacityBytes                      int          // storage at full capacity, for layers whose block size is known
	PrefixEntries                      int          // token blocks in the prefix index
}

// Stats returns the pool's block and byte accounting.
func (p *Pool) Stats() PoolStats {
	var s PoolStats
	for _, lp := range p.layers {
		ls := LayerStats{Capacity: lp.capacity, Allocated: lp.nAlloc, Used: lp.used, Cached: lp.lru.n,
			Peak: lp.peak, BlockBytes: lp.blockBytes}
		if lp.spec.Shared || lp.spec.Recurrent {
			ls = LayerStats{}
		}
		ls.Free = ls.Capacity - ls.Used
		s.Layers = append(s.Layers, ls)
		s.Capacity += ls.Capacity
		s.Used += ls.Used
		s.Cached += ls.Cached
		s.Free += ls.Free
		s.Peak += ls.Peak
		s.Bytes += ls.Allocated * ls.BlockBytes
		s.CapacityBytes += ls.Capacity * ls.BlockBytes
	}
	s.PrefixEntries = len(p.prefix.entries)
	return s
}

// Free releases the pool's storage and its prefix index. Every cache over
// the pool must have been freed first; using one afterwards panics.
func (p *Pool) Free() {
	p.prefix.init(p)
	for _, lp := range p.layers {
		tensor.Free(lp.parts...)
		*lp = layerPool{pool: p, index: lp.index, spec: lp.spec, c: lp.c, capacity: lp.capacity}
	}
	p.closed = true
}

// layerPool is one layer's storage and block bookkeeping.
type layerPool struct {
	pool     *Pool
	index    int
	spec     LayerSpec
	c        codec
	capacity int

	parts      []*tensor.Array // nil until the first write: [nAlloc, Hkv, BlockSize, width]
	nAlloc     int
	blockBytes int

	free    []int32        // LIFO; popped from the end
	refs    []int32        // per block: sequences (caches) holding it
	entries []*prefixEntry // per block: the prefix entry it is registered under
	lru     blockList      // idle registered blocks, oldest first
	used    int            // blocks with refs > 0
	peak    int
}

func (lp *layerPool) backend() tensor.Backend {
	if lp.parts != nil {
		return lp.parts[0].Backend()
	}
	return tensor.Default()
}

func (lp *layerPool) check(op string) {
	if lp.pool.closed {
		throwf(op, tensor.ErrFreed, "pool freed")
	}
}

// init fixes the storage layout from a first write's encoded parts, or
// checks a later write against it.
func (lp *layerPool) init(op string, enc []*tensor.Array) {
	if enc[0].Dim(0) != 1 {
		throwf(op, tensor.ErrShape, "paged caches hold one sequence; keys %v", enc[0].Shape())
	}
	if lp.parts != nil {
		for i, e := range enc {
			p := lp.parts[i]
			if e.Dim(1) != p.Dim(1) || e.Dim(3) != p.Dim(3) || e.DType() != p.DType() {
				throwf(op, tensor.ErrShape, "part %d %s%v for pool layer %d storage %s%v", i, e.DType(), e.Shape(), lp.index, p.DType(), p.Shape())
			}
		}
		return
	}
	bs := lp.pool.blockSize
	lp.blockBytes = 0
	for _, e := range enc {
		lp.blockBytes += e.Dim(1) * bs * e.Dim(3) * e.DType().Size()
	}
	// zero-block arrays record the layout until the first growth
	lp.parts = make([]*tensor.Array, len(enc))
	for i, e := range enc {
		lp.parts[i] = tensor.FullOn(e.Backend(), []int{0, e.Dim(1), bs, e.Dim(3)}, 0, e.DType())
	}
	keep(lp.parts...)
}

// available is how many blocks allocations can get now: free ones,
// storage not yet allocated and idle cached blocks (evicted on demand).
func (lp *layerPool) available() int {
	return len(lp.free) + (lp.capacity - lp.nAlloc) + lp.lru.n
}

// reserve panics with a PoolExhaustedError unless n blocks can be allocated.
func (lp *layerPool) reserve(op string, n int) {
	if a := lp.available(); n > a {
		panic(&tensor.Error{Op: "kv." + op, Err: &PoolExhaustedError{Layer: lp.index, Need: n, Available: a, Capacity: lp.capacity}})
	}
}

// grow extends the storage by at least n blocks (doubling, capped at the
// capacity); the new blocks are zero and go on the free list so that they
// are handed out in ascending order.
func (lp *layerPool) grow(n int) {
	target := max(lp.nAlloc*2, lp.nAlloc+n, initialBlocks)
	if lp.pool.preallocate {
		target = lp.capacity
	}
	target = min(target, lp.capacity)
	add := target - lp.nAlloc
	if add <= 0 {
		return
	}
	next := make([]*tensor.Array, len(lp.parts))
	scoped(func() {
		for i, p := range lp.parts {
			s := append([]int(nil), p.Shape()...)
			s[0] = add
			z := tensor.FullOn(p.Backend(), s, 0, p.DType())
			if lp.nAlloc == 0 {
				next[i] = z
			} else {
				next[i] = tensor.Concatenate([]*tensor.Array{p, z}, 0)
			}
		}
		keep(next...)
	})
	tensor.Free(lp.parts...)
	if lp.nAlloc > 0 {
		releaseCached(next[0].Backend())
	}
	lp.parts = next
	for b := target - 1; b >= lp.nAlloc; b-- {
		lp.free = append(lp.free, int32(b))
	}
	lp.refs = append(lp.refs, make([]int32, add)...)
	lp.entries = append(lp.entries, make([]*prefixEntry, add)...)
	lp.lru.extend(add)
	lp.nAlloc = target
}

// releaseCached hands the buffers a backend keeps for reuse back to the
// system (a backend with a buffer cache, as MLX and the CPU backend have):
// the storage a layer just outgrew would otherwise stay cached, unused —
// the pool grows by doubling, so about as many bytes again as it holds —
// while the memory it reports is only the new storage.
func releaseCached(be tensor.Backend) {
	if c, ok := be.(interface{ ClearCache() error }); ok {
		_ = c.ClearCache()
	}
}

// alloc returns a block held once by the caller. Callers reserve first.
func (lp *layerPool) alloc() int32 {
	if len(lp.free) == 0 && lp.nAlloc < lp.capacity {
		lp.grow(1)
	}
	if len(lp.free) == 0 && lp.lru.n > 0 {
		// evicting the oldest idle cached block drops its prefix entry (and
		// the entry's descendants), returning their idle blocks, this one
		// included, to the free lists (OnEvict sees them first)
		e := lp.entries[lp.lru.head]
		lp.pool.evicting(e)
		lp.pool.prefix.drop(e)
	}
	if len(lp.free) == 0 {
		lp.reserve("alloc", 1) // panics: callers reserve, so this is a bug
	}
	b := lp.free[len(lp.free)-1]
	lp.free = lp.free[:len(lp.free)-1]
	lp.refs[b] = 1
	lp.used++
	lp.peak = max(lp.peak, lp.used)
	return b
}

// ref adds a holder to a block (sharing it), taking an idle cached block
// off the eviction list.
func (lp *layerPool) ref(b int32) {
	if lp.refs[b] == 0 {
		lp.lru.remove(b)
		lp.used++
		lp.peak = max(lp.peak, lp.used)
	}
	lp.refs[b]++
}

// unref drops a holder; an unheld block goes back to the free list, or to
// the eviction list when the prefix index keeps it.
func (lp *layerPool) unref(b int32) {
	lp.refs[b]--
	switch {
	case lp.refs[b] > 0:
	case lp.refs[b] < 0:
		throwf("unref", tensor.ErrArgument, "block %d of layer %d freed twice", b, lp.index)
	case lp.entries[b] != nil:
		lp.used--
		lp.lru.pushBack(b)
	default:
		lp.used--
		lp.free = append(lp.free, b)
	}
}

// exclusive reports whether a block may be written in place: one holder
// and not kept by the prefix index (whose blocks never change).
func (lp *layerPool) exclusive(b int32) bool { return lp.refs[b] == 1 && lp.entries[b] == nil }

// unregister takes a block out of the prefix index; an idle one is freed.
func (lp *layerPool) unregister(b int32) {
	lp.entries[b] = nil
	if lp.refs[b] == 0 {
		lp.lru.remove(b)
		lp.free = append(lp.free, b)
	}
}

// slab is a view of block b's slots [lo, hi) of part i: [1, Hkv, hi-lo, w].
func (lp *layerPool) slab(i int, b int32, lo, hi int) *tensor.Array {
	p := lp.parts[i]
	return tensor.Slice(p, []int{int(b), 0, lo, 0}, []int{int(b) + 1, p.Dim(1), hi, p.Dim(3)}, nil)
}

// copyBlock copies every part of block src into dst. The source views
// are freed before the writes: a live view of the storage would make the
// in-place write copy the whole layer (copy-on-write).
func (lp *layerPool) copyBlock(src, dst int32) {
	bs := lp.pool.blockSize
	scoped(func() {
		for i, p := range lp.parts {
			v := lp.slab(i, src, 0, bs)
			c := copyOf(v)
			v.Free()
			p.SetSlice(c, []int{int(dst), 0, 0, 0}, []int{int(dst) + 1, p.Dim(1), bs, p.Dim(3)}, nil)
			c.Free()
		}
	})
}

// blockList is a doubly linked list of block ids (the idle cached blocks
// in eviction order), with O(1) removal.
type blockList struct {
	prev, next []int32
	in         []bool
	head, tail int32
	n          int
}

func (l *blockList) extend(n int) {
	if l.prev == nil {
		l.head, l.tail = -1, -1
	}
	for range n {
		l.prev = append(l.prev, -1)
		l.next = append(l.next, -1)
		l.in = append(l.in, false)
	}
}

func (l *blockList) pushBack(b int32) {
	l.prev[b], l.next[b] = l.tail, -1
	if l.tail >= 0 {
		l.next[l.tail] = b
	} else {
		l.head = b
	}
	l.tail = b
	l.in[b] = true
	l.n++
}

func (l *blockList) remove(b int32) {
	if !l.in[b] {
		return
	}
	p, n := l.prev[b], l.next[b]
	if p >= 0 {
		l.next[p] = n
	} else {
		l.head = n
	}
	if n >= 0 {
		l.prev[n] = p
	} else {
		l.tail = p
	}
	l.in[b] = false
	l.n--
}
