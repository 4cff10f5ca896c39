package kv

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Prefix sharing, in the manner of vLLM's automatic prefix caching: a full
// block of token slots is identified by its tokens and the identity of the
// block before it, so that equal keys mean equal token prefixes. The index
// maps each key to an entry holding, for every layer, the block with that
// prefix's keys and values. Registered blocks never change (a sequence
// writing into one copies it first); while some sequence holds them they
// are in use, and once none does they stay cached, evictable, until a
// layer runs out of free blocks and evicts the least recently released
// (the tail of a released sequence first, so that its head, shared by
// more prefixes, outlives it).
//
// A prefix is reused only as a whole: an entry has a block in every layer
// with a cache. Sliding-window layers hold positional blocks only until
// their ring first wraps or drops tokens, so on a model with sliding layers
// only prefixes the rings held in place are registered (within about the
// window, or one first prefill chunk); longer ones need a snapshot of the
// rings, not kept yet.

// prefixKey identifies a full block: its parent entry's id (0 for the
// first block) and its tokens, little-endian int32s. Keys compare exactly,
// so distinct prefixes never collide.
type prefixKey struct {
	parent uint64
	ns     string // the namespace of a first block (see AdoptPrefixIn)
	tokens string
}

// prefixEntry is one cached token block: a block per layer (-1 for shared
// layers) holding the keys and values of the prefix ending with it.
type prefixEntry struct {
	id       uint64
	key      prefixKey
	parent   *prefixEntry
	children []*prefixEntry
	blocks   []int32
	dead     bool // dropped from the index (evicted)
}

type prefixIndex struct {
	pool    *Pool
	entries map[prefixKey]*prefixEntry
	nextID  uint64
}

func (ix *prefixIndex) init(p *Pool) {
	ix.pool = p
	ix.entries = map[prefixKey]*prefixEntry{}
	ix.nextID = 1
}

func keyOf(ns string, parent *prefixEntry, tokens []int32) prefixKey {
	raw := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(t))
	}
	k := prefixKey{tokens: string(raw)}
	if parent != nil {
		k.parent = parent.id
	} else {
		k.ns = ns
	}
	return k
}

// drop takes e and its descendants (unreachable without it) out of the
// index; their blocks become ordinary (idle ones free).
func (ix *prefixIndex) drop(e *prefixEntry) {
	if e == nil || e.dead {
		return
	}
	e.dead = true
	delete(ix.entries, e.key)
	for _, ch := range e.children {
		ix.drop(ch)
	}
	e.children = nil
	if p := e.parent; p != nil && !p.dead {
		p.children = slices.DeleteFunc(p.children, func(x *prefixEntry) bool { return x == e })
	}
	for i, b := range e.blocks {
		if b >= 0 {
			ix.pool.layers[i].unregister(b)
		}
	}
}

// lookup returns the longest chain of entries for tokens' full blocks,
// within the first limit tokens.
func (ix *prefixIndex) lookup(ns string, tokens []int32, limit int) []*prefixEntry {
	bs := ix.pool.blockSize
	limit = min(limit, len(tokens))
	var chain []*prefixEntry
	var parent *prefixEntry
	for j := 0; (j+1)*bs <= limit; j++ {
		e, ok := ix.entries[keyOf(ns, parent, tokens[j*bs:(j+1)*bs])]
		if !ok {
			break
		}
		chain = append(chain, e)
		parent = e
	}
	return chain
}

// hasRecurrent reports whether a layer of p is recurrent (its prefixes
// are then never registered).
func (p *Pool) hasRecurrent() bool {
	for _, lp := range p.layers {
		if lp.spec.Recurrent {
			return true
		}
	}
	return false
}

// pagedCaches checks that caches are one sequence's caches over p (as
// NewCaches makes them) and returns them per layer (nil for shared layers).
func (p *Pool) pagedCaches(caches []Cache) ([]*PagedCache, error) {
	if len(caches) != len(p.layers) {
		return nil, fmt.Errorf("kv: %d caches for a pool of %d layers", len(caches), len(p.layers))
	}
	out := make([]*PagedCache, len(caches))
	for i, c := range caches {
		lp := p.layers[i]
		if lp.spec.Shared {
			if c != nil {
				return nil, fmt.Errorf("kv: layer %d is shared but has a %T", i, c)
			}
			continue
		}
		if lp.spec.Recurrent {
			if _, ok := c.(*RecurrentCache); !ok {
				return nil, fmt.Errorf("kv: layer %d is recurrent but has a %T", i, c)
			}
			continue
		}
		pc, ok := c.(*PagedCache)
		if !ok || pc.lp != lp {
			return nil, fmt.Errorf("kv: layer %d: a %T, not a paged cache of this pool", i, c)
		}
		out[i] = pc
	}
	return out, nil
}

// CachedPrefix is how many leading tokens of tokens (whole blocks) the
// pool has cached for every layer: what AdoptPrefix would reuse.
func (p *Pool) CachedPrefix(tokens []int32) int { return p.CachedPrefixIn("", tokens) }

// CachedPrefixIn is CachedPrefix within namespace ns (see AdoptPrefixIn).
func (p *Pool) CachedPrefixIn(ns string, tokens []int32) int {
	return len(p.prefix.lookup(ns, tokens, len(tokens))) * p.blockSize
}

// AdoptPrefix makes empty caches (one sequence's, from NewCaches) start
// with the longest cached prefix of tokens, at most limit tokens (whole
// blocks; pass len(prompt)−1 to leave the last prompt token to compute its
// logits), sharing the cached blocks. It returns the number of tokens
// adopted: the caches' offset, from which the caller feeds the rest.
// The caches then read as if restored from the state of a cache that
// processed that prefix: a sliding-window layer holds it as one prefill
// chunk would have left it.
func (p *Pool) AdoptPrefix(caches []Cache, tokens []int32, limit int) (int, error) {
	return p.AdoptPrefixIn("", caches, tokens, limit)
}

// AdoptPrefixIn is AdoptPrefix among the prefixes registered in namespace
// ns: sequences whose keys and values differ for the same tokens (a LoRA
// adapter set changes every layer's keys) register and adopt in their own
// namespace, so they never share blocks. "" is AdoptPrefix's.
func (p *Pool) AdoptPrefixIn(ns string, caches []Cache, tokens []int32, limit int) (int, error) {
	pcs, err := p.pagedCaches(caches)
	if err != nil {
		return 0, err
	}
	for i, c := range pcs {
		if c != nil && (c.offset != 0 || len(c.table) != 0 || len(c.deferred) != 0) {
			return 0, fmt.Errorf("kv: adopt prefix: layer %d cache is not empty (offset %d)", i, c.offset)
		}
	}
	chain := p.prefix.lookup(ns, tokens, limit)
	n := len(chain) * p.blockSize
	if n == 0 {
		return 0, nil
	}
	for i, c := range pcs {
		if c == nil {
			continue
		}
		for _, e := range chain {
			b := e.blocks[i]
			c.lp.ref(b)
			c.table = append(c.table, b)
		}
		c.chain = slices.Clone(chain)
		c.offset, c.written = n, true
		if c.lp.spec.Window > 0 {
			c.size, c.idx, c.positional = n, n, true
		}
	}
	return n, nil
}

// RegisterPrefix enters the full blocks of one sequence's caches into the
// prefix index, keyed by tokens (the token ids the caches were fed, in
// order; every cache must have seen at least len(tokens) of them), so that
// later sequences with the same prefix can adopt them. Call it after a
// prefill chunk or at the end of the prompt; blocks already registered
// are skipped, so calling it again costs only the new blocks. A block
// whose prefix is already cached (another sequence computed the same
// tokens) is left out: the sequence keeps its own copy and the cached one
// stays. Registration stops at the first block some layer cannot provide
// (a sliding-window layer whose ring has moved on). It returns the number
// of tokens of the sequence's prefix now in the index.
func (p *Pool) RegisterPrefix(caches []Cache, tokens []int32) (int, error) {
	return p.RegisterPrefixIn("", caches, tokens)
}

// RegisterPrefixIn is RegisterPrefix in namespace ns (see AdoptPrefixIn).
// A sequence continues registering in the namespace its chain began in.
func (p *Pool) RegisterPrefixIn(ns string, caches []Cache, tokens []int32) (int, error) {
	pcs, err := p.pagedCaches(caches)
	if err != nil {
		return 0, err
	}
	if p.hasRecurrent() { // the blocks would come without the state after them
		return 0, nil
	}
	bs := p.blockSize
	// the chain every layer agrees on
	var first *PagedCache
	for i, c := range pcs {
		if c == nil {
			continue
		}
		if c.offset < len(tokens) {
			return 0, fmt.Errorf("kv: register prefix: %d tokens for layer %d, which has seen %d", len(tokens), i, c.offset)
		}
		if first == nil || len(c.chain) < len(first.chain) {
			first = c
		}
	}
	if first == nil {
		return 0, nil
	}
	k := len(first.chain)
	for _, c := range pcs {
		for i := 0; c != nil && i < k; i++ {
			if c.chain[i] != first.chain[i] {
				k = i
			}
		}
	}
	chain := slices.Clone(first.chain[:k])
	for len(chain) > 0 && chain[len(chain)-1].dead {
		chain = chain[:len(chain)-1]
	}
	for j := len(chain); (j+1)*bs <= len(tokens); j++ {
		var parent *prefixEntry
		if j > 0 {
			parent = chain[j-1]
			if parent.dead {
				break
			}
		}
		key := keyOf(ns, parent, tokens[j*bs:(j+1)*bs])
		if e, ok := p.prefix.entries[key]; ok {
			chain = append(chain, e)
			continue
		}
		e := &prefixEntry{key: key, parent: parent, blocks: make([]int32, len(pcs))}
		ok := true
		for i, c := range pcs {
			e.blocks[i] = -1
			if c == nil {
				continue
			}
			if !c.holdsPosition(j) {
				ok = false
				break
			}
			e.blocks[i] = c.table[j]
		}
		if !ok {
			break
		}
		e.id = p.prefix.nextID
		p.prefix.nextID++
		for i, b := range e.blocks {
			if b >= 0 {
				p.layers[i].entries[b] = e
			}
		}
		if parent != nil {
			parent.children = append(parent.children, e)
		}
		p.prefix.entries[key] = e
		chain = append(chain, e)
	}
	for _, c := range pcs {
		if c != nil {
			c.chain = slices.Clone(chain)
		}
	}
	return len(chain) * bs, nil
}

// holdsPosition reports whether the cache's block j holds token positions
// [j·BlockSize, (j+1)·BlockSize) and nothing else, unregistered: what a
// prefix entry can take.
func (c *PagedCache) holdsPosition(j int) bool {
	bs := c.lp.pool.blockSize
	if j >= len(c.table) || c.offset < (j+1)*bs || c.lp.entries[c.table[j]] != nil {
		return false
	}
	if c.lp.spec.Window > 0 {
		return c.positional && (j+1)*bs <= c.size
	}
	return true
}

// DropPrefixCache empties the prefix index: blocks no sequence holds go
// back to the free lists; held ones become the holders' own.
func (p *Pool) DropPrefixCache() {
	for _, e := range p.prefix.entries {
		if e.parent == nil {
			p.prefix.drop(e)
		}
	}
	for _, e := range p.prefix.entries { // orphans, if any
		p.prefix.drop(e)
	}
}
