package tensor

import (
	"math"
	"slices"
)

// ScaledDotProductAttentionPaged is ScaledDotProductAttention over keys
// and values held in the fixed-size blocks of a pool, as a paged KV cache
// stores them: q is [1, Hq, T, D]; kPool is [NumBlocks, Hkv, BlockSize, D]
// and vPool [NumBlocks, Hkv, BlockSize, Dv]; table lists the pool blocks
// holding key positions 0..kvLen-1 in order (position p is in block
// table[p/BlockSize], slot p%BlockSize; slots past kvLen are ignored). The
// options are SDPA's with kvLen keys: MaskCausal takes the T queries as
// the last T of the kvLen positions, a mask array broadcasts to [1, Hq, T,
// kvLen]. The result is bit for bit that of ScaledDotProductAttention on
// the gathered [1, Hkv, kvLen, D] keys and values. Backends that implement
// PagedAttention read the blocks in place (the CPU backend does, in the
// same kernel as SDPA); others gather them first.
func ScaledDotProductAttentionPaged(q, kPool, vPool *Array, table []int32, kvLen int, o SDPAOptions) *Array {
	sameBackend("SDPAPaged", q, kPool, vPool, o.Mask, o.Sinks)
	if q.NDim() != 4 || kPool.NDim() != 4 || vPool.NDim() != 4 {
		throw("SDPAPaged", ErrShape, "q %v, key pool %v, value pool %v (want 4-D)", q.shape, kPool.shape, vPool.shape)
	}
	hq, tq, d := q.shape[1], q.shape[2], q.shape[3]
	nb, hkv, bs := kPool.shape[0], kPool.shape[1], kPool.shape[2]
	if q.shape[0] != 1 {
		throw("SDPAPaged", ErrShape, "q %v: one sequence (batch 1) per call", q.shape)
	}
	if kPool.shape[3] != d || vPool.shape[0] != nb || vPool.shape[1] != hkv || vPool.shape[2] != bs || bs == 0 {
		throw("SDPAPaged", ErrShape, "q %v, key pool %v, value pool %v disagree", q.shape, kPool.shape, vPool.shape)
	}
	if hkv == 0 || hq%hkv != 0 {
		throw("SDPAPaged", ErrShape, "%d query heads for %d kv heads", hq, hkv)
	}
	used := checkTable("SDPAPaged", "keys", table, kvLen, bs, nb)
	if o.Scale == 0 {
		o.Scale = float32(1 / math.Sqrt(float64(d)))
	}
	if o.MaskKind == MaskArray {
		if o.Mask == nil {
			throw("SDPAPaged", ErrArgument, "MaskArray without a mask")
		}
		want := []int{1, hq, tq, kvLen}
		if bs, ok := BroadcastShapes(o.Mask.shape, want); !ok || !slices.Equal(bs, want) {
			throw("SDPAPaged", ErrShape, "mask %v does not broadcast to %v", o.Mask.shape, want)
		}
	}
	if o.Sinks != nil && (o.Sinks.NDim() != 1 || o.Sinks.shape[0] != hq) {
		throw("SDPAPaged", ErrShape, "sinks %v for %d heads", o.Sinks.shape, hq)
	}
	if pa, ok := q.be.(PagedAttention); ok {
		return pa.SDPAPaged(q, kPool, vPool, table[:used], kvLen, o)
	}
	return WithScope(func() []*Array {
		k, v := gatherPaged(kPool, table[:used], kvLen), gatherPaged(vPool, table[:used], kvLen)
		return []*Array{ScaledDotProductAttention(q, k, v, o)}
	})[0]
}

// gatherPaged makes the contiguous [1, H, n, D] array of the first n
// positions held in pool's blocks listed by table.
func gatherPaged(pool *Array, table []int32, n int) *Array {
	h, bs, d := pool.shape[1], pool.shape[2], pool.shape[3]
	if len(table) == 0 {
		return FullOn(pool.be, []int{1, h, 0, d}, 0, pool.dtype)
	}
	idx := FromInt32On(pool.be, table, []int{len(table)})
	blocks := Take(pool, idx, 0)                                   // [nb, H, bs, D]
	seq := Reshape(SwapAxes(blocks, 0, 1), 1, h, len(table)*bs, d) // [1, H, nb·bs, D]
	return Contiguous(SliceAxis(seq, 2, 0, n))
}

// QuantizedMatmulPaged is QuantizedMatmul against the affine-quantized
// keys or values of a paged KV pool, one matrix per KV head: wPool is
// [NumBlocks, H, BlockSize, D·bits/32] uint32 and sPool, bPool are
// [NumBlocks, H, BlockSize, D/groupSize], and table lists the blocks of
// positions 0..kvLen-1 in order, as for ScaledDotProductAttentionPaged.
// x is [1, H, M, D] with transpose (scores: the result is [1, H, M,
// kvLen]) or [1, H, M, kvLen] without (probabilities times values: [1, H,
// M, D]). The result is bit for bit QuantizedMatmul on the gathered [1, H,
// kvLen, …] matrices; backends that implement PagedQuantizedMatmul read the
// blocks in place, others gather them first.
func QuantizedMatmulPaged(x, wPool, sPool, bPool *Array, table []int32, kvLen int, transpose bool, groupSize, bits int) *Array {
	const op = "QuantizedMatmulPaged"
	sameBackend(op, x, wPool, sPool, bPool)
	if x.NDim() != 4 || wPool.NDim() != 4 || sPool.NDim() != 4 || bPool.NDim() != 4 {
		throw(op, ErrShape, "x %v, pools %v %v %v (want 4-D)", x.shape, wPool.shape, sPool.shape, bPool.shape)
	}
	if !slices.Contains(QuantBitsSupported, bits) || !slices.Contains(QuantGroupsSupported, groupSize) {
		throw(op, ErrArgument, "group size %d, %d bits", groupSize, bits)
	}
	nb, h, bs, wpr := wPool.shape[0], wPool.shape[1], wPool.shape[2], wPool.shape[3]
	d := wpr * 32 / bits
	if bs == 0 || wpr*32%bits != 0 || x.shape[0] != 1 || x.shape[1] != h || d%groupSize != 0 ||
		!slices.Equal(sPool.shape, []int{nb, h, bs, d / groupSize}) || !slices.Equal(bPool.shape, sPool.shape) {
		throw(op, ErrShape, "x %v, pools %v %v %v disagree", x.shape, wPool.shape, sPool.shape, bPool.shape)
	}
	m := x.shape[2]
	inner, outer := d, kvLen
	if !transpose {
		inner, outer = kvLen, d
	}
	if x.shape[3] != inner {
		throw(op, ErrShape, "x %v for %d positions of dimension %d (transpose %v)", x.shape, kvLen, d, transpose)
	}
	used := checkTable(op, "positions", table, kvLen, bs, nb)
	if pq, ok := x.be.(PagedQuantizedMatmul); ok && kvLen > 0 {
		if out := pq.QuantizedMatmulPaged(x, wPool, sPool, bPool, table[:used], kvLen, transpose, groupSize, bits, []int{1, h, m, outer}); out != nil {
			return out
		}
	}
	return WithScope(func() []*Array {
		w := gatherPaged(wPool, table[:used], kvLen)
		s := gatherPaged(sPool, table[:used], kvLen)
		b := gatherPaged(bPool, table[:used], kvLen)
		return []*Array{QuantizedMatmul(x, w, s, b, transpose, groupSize, bits)}
	})[0]
}

// checkTable checks that table lists in-pool blocks (of nb) for kvLen
// positions in blocks of bs, and returns how many blocks those are.
func checkTable(op, what string, table []int32, kvLen, bs, nb int) int {
	used := (kvLen + bs - 1) / bs
	if kvLen < 0 || used > len(table) {
		throw(op, ErrArgument, "%d %s need %d blocks of %d, table has %d", kvLen, what, used, bs, len(table))
	}
	for i, b := range table[:used] {
		if b < 0 || int(b) >= nb {
			throw(op, ErrArgument, "table[%d] = %d outside the pool's %d blocks", i, b, nb)
		}
	}
	return used
}
