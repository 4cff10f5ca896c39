package sampler

import (
	"math"
	"sync/atomic"

	"github.com/mlxgo/mlxgo/tensor"
)

// pathFast and pathFull count the steps that took the candidate fast path
// and the full-vocabulary path, so tests can check which one ran.
var pathFast, pathFull atomic.Int64

// fastM returns how many top candidates the top-k fast path must keep for
// p on a vocabulary of vocab tokens, or 0 when the restriction to them is
// not known to be exact (or would not save work) and the full path runs.
//
// Why the restriction is exact. Let the candidates C be the M most likely
// tokens of the full-vocabulary logprobs (which are already normalised,
// so a token's probability is exp(logprob) whatever else is filtered).
//
//   - top-p keeps token i iff the ascending cumulative probability up to i
//     exceeds 1-top_p, i.e. iff the mass strictly above i is below top_p.
//     That mass consists of higher-ranked tokens only, all candidates when
//     i is one, so top-p's verdict on every candidate is computable on C.
//   - min-p compares against the maximum (the first candidate, which top-p
//     always keeps) and re-keeps the top min_tokens_to_keep tokens: on C
//     that is "rank < keep"; when keep > M every candidate is re-kept,
//     exactly as in the full chain.
//   - XTC removes the tokens more likely than the least likely token above
//     the threshold, minus the exempt ids: a top set of fewer than
//     1/threshold tokens (their normalised probabilities sum to at most 1).
//     Its threshold test needs the normaliser over all survivors of top-p
//     and min-p, which may include non-candidates. That normaliser is one
//     cheap full-vocabulary reduction when top-p is off (survivors are the
//     tokens at or above the min-p threshold plus the re-kept top ones,
//     the latter candidates when keep ≤ M), but with top-p on it would need
//     the full sort this path avoids, so top-p + XTC takes the full path;
//     so do threshold 0 (every token counts as above it) and keep > M.
//   - top-k then keeps the k most likely survivors. None of the filters
//     reorders survivors and XTC drops at most floor(1/threshold) tokens
//     above them, so those k lie within the top k + floor(1/threshold)
//     tokens; M adds one for float rounding of the normalised sum.
//
// Floating point: the full path decides top-p with a float32 cumulative sum
// over the whole ascending vocabulary (cum > 1-top_p); the fast path uses
// an exclusive float32 sum over the descending candidates (mass < top_p).
// They agree except when a token's mass above lies within float rounding
// (~1e-6) of top_p. XTC's probabilities likewise differ from the full
// softmax only by summation order.
func fastM(p Params, vocab int) int {
	if p.Temperature == 0 || p.TopK <= 0 || p.TopK >= vocab {
		return 0
	}
	m := p.TopK
	if p.XTCProbability > 0 {
		if p.XTCThreshold <= 0 || (p.TopP > 0 && p.TopP < 1) {
			return 0
		}
		extra := math.Floor(1/p.XTCThreshold) + 1
		if extra >= float64(vocab) {
			return 0
		}
		m += int(extra)
		if p.MinP != 0 && p.MinTokensToKeep > m {
			return 0
		}
	}
	if m >= vocab {
		return 0
	}
	return m
}

// filterFast applies top-p, min-p, XTC and top-k to logprobs [B, V] on the
// top s.fastM candidates only. It returns the candidates' filtered logprobs
// [B, M] (-inf where filtered out), most likely first, and their int32
// vocabulary ids [B, M].
func (s *Sampler) filterFast(lp *tensor.Array, xtcKey *tensor.Array) (vals, ids *tensor.Array) {
	p, m, be := s.p, s.fastM, s.be
	negInf := math.Inf(-1)
	part := tensor.Argpartition(tensor.Neg(lp), m-1, -1)
	top := tensor.Contiguous(tensor.SliceAxis(part, -1, 0, m))
	cand := tensor.TakeAlongAxis(lp, top, -1)
	order := tensor.Argsort(tensor.Neg(cand), -1) // descending
	ids = tensor.TakeAlongAxis(top, order, -1)
	l := tensor.TakeAlongAxis(cand, order, -1)
	orig := l
	var rank *tensor.Array // [M] int32 candidate ranks, made on demand
	ranks := func() *tensor.Array {
		if rank == nil {
			rank = tensor.ArangeOn(be, 0, float64(m), 1, tensor.Int32)
		}
		return rank
	}
	if p.TopP > 0 && p.TopP < 1 {
		above := tensor.Cumsum(tensor.Exp(l), -1, false, false)
		l = tensor.WhereScalar(tensor.Less(above, scalarF32(be, p.TopP)), l, negInf)
	}
	var minThr *tensor.Array // [B, 1] min-p threshold, when min-p is on
	keep := min(p.MinTokensToKeep, s.vocab)
	if p.MinP != 0 {
		minThr = tensor.AddScalar(tensor.SliceAxis(l, -1, 0, 1), math.Log(p.MinP))
		remove := tensor.Less(l, minThr)
		if keep > 1 {
			remove = tensor.LogicalAnd(remove, tensor.GreaterEqual(ranks(), scalarI32(be, float64(keep))))
		}
		l = tensor.WhereScalar(tensor.LogicalNot(remove), l, negInf)
	}
	if p.XTCProbability > 0 {
		// Normaliser over the survivors of min-p (top-p is off here): the
		// tokens at or above the threshold anywhere in the vocabulary, plus
		// the re-kept top candidates below it.
		var z *tensor.Array // [B, 1]
		if minThr == nil {
			z = tensor.Sum(tensor.Exp(lp), []int{-1}, true)
		} else {
			in := tensor.GreaterEqual(lp, minThr)
			z = tensor.Sum(tensor.Exp(tensor.WhereScalar(in, lp, negInf)), []int{-1}, true)
			if keep > 1 {
				extra := tensor.LogicalAnd(tensor.Less(orig, minThr), tensor.Less(ranks(), scalarI32(be, float64(keep))))
				z = tensor.Add(z, tensor.Sum(tensor.Exp(tensor.WhereScalar(extra, orig, negInf)), []int{-1}, true))
			}
		}
		probs := tensor.Div(tensor.Exp(l), z)
		above := tensor.Greater(probs, scalarF32(be, p.XTCThreshold))
		floor := tensor.Min(tensor.WhereScalar(above, probs, math.Inf(1)), []int{-1}, true)
		cut := tensor.Greater(probs, floor)
		if s.xtcNo != nil {
			cut = tensor.LogicalAnd(cut, tensor.LogicalNot(tensor.Take(s.xtcNo, ids, 0)))
		}
		u := tensor.Uniform(xtcKey, nil, 0, 1, tensor.Float32)
		apply := tensor.LessEqual(u, scalarF32(be, p.XTCProbability))
		l = tensor.WhereScalar(tensor.LogicalNot(tensor.LogicalAnd(apply, cut)), l, negInf)
	}
	// top-k: the first k survivors in descending order.
	alive := tensor.Greater(l, scalarF32(be, negInf))
	n := tensor.Cumsum(alive, -1, false, true)
	in := tensor.LogicalAnd(alive, tensor.LessEqual(n, scalarI32(be, float64(p.TopK))))
	return tensor.WhereScalar(in, l, negInf), ids
}
