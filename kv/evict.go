package kv

import (
	"encoding/binary"
	"errors"

	"github.com/mlxgo/mlxgo/tensor"
)

// Evicted is a cached prefix the pool is evicting to make room for a
// write (see PoolConfig.OnEvict): the chain of prefix entries from the
// first block to the last one of the prefix, whose blocks are about to go
// back to the free lists. It is valid only during the OnEvict call: after
// it the blocks are reused.
type Evicted struct {
	pool  *Pool
	chain []*prefixEntry
}

// Namespace is the namespace the prefix was registered in (see
// RegisterPrefixIn).
func (ev *Evicted) Namespace() string { return ev.chain[0].key.ns }

// Len is the prefix's length in tokens (whole blocks).
func (ev *Evicted) Len() int { return len(ev.chain) * ev.pool.blockSize }

// Tokens returns the prefix's token ids, in order.
func (ev *Evicted) Tokens() []int32 {
	out := make([]int32, 0, ev.Len())
	for _, e := range ev.chain {
		raw := e.key.tokens
		for i := 0; i+4 <= len(raw); i += 4 {
			out = append(out, int32(binary.LittleEndian.Uint32([]byte(raw[i:i+4]))))
		}
	}
	return out
}

// Bytes is the storage the prefix's blocks take over every layer: about
// what States copies.
func (ev *Evicted) Bytes() int {
	n := 0
	for i, lp := range ev.pool.layers {
		if ev.chain[0].blocks[i] >= 0 {
			n += len(ev.chain) * lp.blockBytes
		}
	}
	return n
}

// errEvictedGone is what States fails with after the OnEvict call.
var errEvictedGone = errors.New("kv: evicted prefix read after its OnEvict call")

// States copies the prefix's keys and values out of the pool: one State
// per layer, each what a PagedCache that adopted the prefix (AdoptPrefix)
// would return from State — the format of the layer's contiguous cache,
// which Save and SaveStates write — and a zero State for shared layers.
// The arrays are evaluated, belong to no scope and are the caller's to
// free; they stay valid once the pool reuses the blocks. Call it only
// during the OnEvict call, on the pool's goroutine.
func (ev *Evicted) States() ([]State, error) {
	p := ev.pool
	if p == nil || p.closed {
		return nil, errEvictedGone
	}
	n := ev.Len()
	out := make([]State, len(p.layers))
	err := tensor.Try(func() {
		for i, lp := range p.layers {
			if lp.spec.Shared || lp.spec.Recurrent || ev.chain[0].blocks[i] < 0 {
				continue
			}
			c := newPagedCache(lp)
			c.table = make([]int32, len(ev.chain))
			for j, e := range ev.chain {
				c.table[j] = e.blocks[i]
			}
			c.offset, c.written = n, true
			if lp.spec.Window > 0 {
				c.size, c.idx, c.positional = n, n, true
			}
			st := c.State() // the transient cache holds no references: it is never freed
			keep(st.Arrays...)
			tensor.Eval(st.Arrays...)
			out[i] = st
		}
	})
	if err != nil {
		for _, st := range out {
			st.Free()
		}
		return nil, err
	}
	return out, nil
}

// evicting calls the pool's OnEvict hook for the prefixes that dropping e
// removes from the index: one call per leaf of e's subtree, each with the
// chain from the first block to that leaf.
func (p *Pool) evicting(e *prefixEntry) {
	if p.onEvict == nil || e == nil || e.dead {
		return
	}
	var leaves []*prefixEntry
	var walk func(*prefixEntry)
	walk = func(x *prefixEntry) {
		if len(x.children) == 0 {
			leaves = append(leaves, x)
		}
		for _, ch := range x.children {
			walk(ch)
		}
	}
	walk(e)
	for _, leaf := range leaves {
		var chain []*prefixEntry
		for x := leaf; x != nil; x = x.parent {
			chain = append(chain, x)
		}
		for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
			chain[i], chain[j] = chain[j], chain[i]
		}
		ev := &Evicted{pool: p, chain: chain}
		p.onEvict(ev)
		ev.pool = nil
	}
}
