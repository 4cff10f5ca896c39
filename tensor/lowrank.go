package tensor

import "slices"

// LowRankPair is one low-rank term's factors: A [r, in] and B [out, r]
// (the layout of a LoRA pair's lora_A and lora_B weights, any scale
// already folded into one of them). A and B may have different float
// dtypes from each other and from the activations.
type LowRankPair struct{ A, B *Array }

// LowRanker is implemented by backends that compute low-rank updates in
// one pass (LowRank and LowRankGather use it; others compose the update
// from Matmul, AsType and Add). Arguments are checked by the caller: y
// [..., out] and x [..., in] are float arrays with the same leading dims,
// every pair fits them, and ids holds one entry per row (the leading dims
// flattened), each an index into pairs or negative for none. The result,
// in y's dtype and shape, is y with row i's term x_i·A_pᵀ·B_pᵀ (p =
// ids[i]) added in float32 and rounded once.
type LowRanker interface {
	LowRank(y, x *Array, pairs []LowRankPair, ids []int) *Array
}

// LowRank returns y + (x·Aᵀ)·Bᵀ for x [..., in], y [..., out], A [r, in],
// B [out, r], in y's dtype: the product x·Aᵀ is kept in float32 (no
// rounding to the activations' type in between) and the sum with y is
// rounded once. It is the unmerged LoRA residual of one adapter on a
// layer whose output is y. Backends that implement LowRanker compute it
// in one pass (the CPU backend: each row's result depends only on that
// row, bit for bit, whatever else the call holds); others compose it.
func LowRank(y, x, a, b *Array) *Array {
	n := lowRankCheck("LowRank", y, x, []LowRankPair{{a, b}}, nil)
	ids := make([]int, n)
	return lowRank(y, x, []LowRankPair{{a, b}}, ids)
}

// LowRankGather is LowRank where each row of x and y (the leading dims
// flattened) has its own pair: row i gets the term of pairs[ids[i]], or
// none where ids[i] is negative (its y is returned as is). This is the
// gathered product of mixed-adapter batches (Punica's BGMV, S-LoRA): the
// base layer runs once over all rows and every row adds its own
// adapter's term in the same call. On the CPU backend a row's result is
// bit for bit what LowRank gives it alone.
func LowRankGather(y, x *Array, pairs []LowRankPair, ids []int) *Array {
	lowRankCheck("LowRankGather", y, x, pairs, ids)
	return lowRank(y, x, pairs, ids)
}

func lowRank(y, x *Array, pairs []LowRankPair, ids []int) *Array {
	if lr, ok := y.be.(LowRanker); ok {
		return lr.LowRank(y, x, pairs, ids)
	}
	return lowRankComposed(y, x, pairs, ids)
}

// lowRankCheck validates LowRank's arguments and returns the number of
// rows (ids nil: not checked).
func lowRankCheck(op string, y, x *Array, pairs []LowRankPair, ids []int) int {
	arrs := []*Array{y, x}
	for _, p := range pairs {
		if p.A == nil || p.B == nil {
			throw(op, ErrNil, "a pair without A or B")
		}
		arrs = append(arrs, p.A, p.B)
	}
	sameBackend(op, arrs...)
	if y.NDim() == 0 || x.NDim() != y.NDim() || !slices.Equal(x.shape[:x.NDim()-1], y.shape[:y.NDim()-1]) {
		throw(op, ErrShape, "x %v and y %v (want [..., in] and [..., out] with the same leading dims)", x.shape, y.shape)
	}
	for _, a := range arrs {
		if !a.dtype.IsFloat() {
			throw(op, ErrDType, "%s operand", a.dtype)
		}
	}
	in, out := x.shape[x.NDim()-1], y.shape[y.NDim()-1]
	for i, p := range pairs {
		if p.A.NDim() != 2 || p.B.NDim() != 2 || p.A.shape[1] != in || p.B.shape[0] != out || p.B.shape[1] != p.A.shape[0] {
			throw(op, ErrShape, "pair %d: A %v and B %v for x %v and y %v (want A [r, %d], B [%d, r])", i, p.A.shape, p.B.shape, x.shape, y.shape, in, out)
		}
	}
	n := prod(y.shape[:y.NDim()-1])
	if ids != nil {
		if len(ids) != n {
			throw(op, ErrShape, "%d ids for %d rows", len(ids), n)
		}
		for _, id := range ids {
			if id >= len(pairs) {
				throw(op, ErrArgument, "id %d for %d pairs", id, len(pairs))
			}
		}
	}
	return n
}

// lowRankComposed is LowRankGather from general ops: each run of rows
// with one pair gets float32 products and one rounding, and the runs are
// joined.
func lowRankComposed(y, x *Array, pairs []LowRankPair, ids []int) *Array {
	return WithScope(func() []*Array {
		ys, xs := y.shape, x.shape
		n := len(ids)
		y2 := Reshape(y, n, ys[len(ys)-1])
		x2 := Reshape(x, n, xs[len(xs)-1])
		one := func(yr, xr *Array, p LowRankPair) *Array {
			xa := Matmul(AsType(xr, Float32), Transpose(AsType(p.A, Float32)))
			t := Matmul(xa, Transpose(AsType(p.B, Float32)))
			return AsType(Add(AsType(yr, Float32), t), y.dtype)
		}
		var parts []*Array
		for lo := 0; lo < n; {
			hi := lo + 1
			for hi < n && ids[hi] == ids[lo] {
				hi++
			}
			yr := SliceAxis(y2, 0, lo, hi)
			if id := ids[lo]; id >= 0 {
				yr = one(yr, SliceAxis(x2, 0, lo, hi), pairs[id])
			}
			parts = append(parts, yr)
			lo = hi
		}
		if len(parts) == 0 {
			return []*Array{Contiguous(y)}
		}
		var out *Array
		if len(parts) == 1 {
			out = Contiguous(parts[0])
		} else {
			out = Concatenate(parts, 0)
		}
		return []*Array{Reshape(out, ys...)}
	})[0]
}
