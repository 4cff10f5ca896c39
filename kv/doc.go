// Package kv holds the key/value caches that attention layers read and
// extend: plain (KVCache), sliding-window (RotatingKVCache) and their
// affine-quantized variants, with persistence to memory-mapped files.
//
// The caches reproduce mlx-lm's (models/cache.py) step for step — growth
// in 256-slot steps, the rotating cache's concatenate/in-place rules and
// its masks, state and trimming — so that a prompt processed here and
// there holds the same keys in the same places, with one difference: once
// a sliding-window ring has wrapped, a single-token UpdateAndFetch hands
// the window over in temporal order (oldest first, a copy of the window)
// rather than in ring order, with KV.Start naming the position of its
// first key. Attention then sums a query's keys in the same order and
// pieces in a decode step as in a prefill chunk, which is what makes a
// sliding-window model's logits independent of how its prompt is chunked
// on the CPU backend (mathematically the two orders are the same). They
// use the tensor API only, so they run on every backend.
//
// A model layer uses a cache in three calls, whatever its kind:
//
//	mask := caches[0].MakeMask(n, 0, false) // once per forward pass
//	kv := cache.UpdateAndFetch(keys, values)
//	out := Attention(q, kv, mask.Options(scale))
//
// Arrays handed out by UpdateAndFetch are views owned by the cache and
// freed by its next update: writes into the preallocated buffers are then
// in place and cost only the new tokens (a view kept alive would make the
// next write copy the whole buffer). Everything else a cache returns
// (State, masks, Temporal) belongs to the caller.
//
// A Pool stores many sequences' keys and values in fixed-size blocks, one
// block numbering per layer; a PagedCache is one sequence's cache of one
// layer over it, with the slots (and so the attention results, bit for
// bit) of the contiguous cache of its kind. Pool.NewCaches gives a
// sequence its caches, laid out as LayerSpecs says a model's MakeCaches
// lays out its contiguous ones. Blocks are reference-counted: clones and
// sequences with a common token prefix (RegisterPrefix, AdoptPrefix) share
// them, and a shared block is copied on its next write. Registered blocks
// nobody holds stay cached until a write needs room; PoolConfig.OnEvict
// then sees each prefix the eviction removes (Evicted: its tokens, and
// States, copies in the contiguous caches' format that SaveStates
// writes) before its blocks are reused.
package kv
