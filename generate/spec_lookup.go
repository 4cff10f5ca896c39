package generate

// DefaultNgramMin and DefaultNgramMax bound prompt lookup's n-gram sizes
// when Speculation.NgramMin / NgramMax are 0 (the seed's --ngram-min 1,
// --ngram-max 3).
const (
	DefaultNgramMin = 1
	DefaultNgramMax = 3
)

// ngramBounds are the request's prompt lookup n-gram sizes.
func ngramBounds(sp *Speculation) (lo, hi int) {
	lo, hi = sp.NgramMin, sp.NgramMax
	if lo == 0 {
		lo = DefaultNgramMin
	}
	if hi == 0 {
		hi = max(DefaultNgramMax, lo)
	}
	return lo, hi
}

// LookupDrafter is prompt lookup decoding (mlx-lm's and vLLM's "prompt
// lookup", an n-gram drafter without a draft model): it finds the
// longest n-gram (NgramMax ≥ n ≥ NgramMin) that ends the sequence and
// occurred before in it (prompt or output), takes its most recent earlier
// occurrence, and drafts the tokens that followed it (continued by the
// draft itself where they run into the end of the sequence, so that a
// loop keeps repeating). It costs no forward
// pass, so it pays off wherever the output repeats its context (code
// edits, quoting, extraction, loops).
type LookupDrafter struct {
	min, max int
}

// NewLookupDrafter returns a prompt lookup drafter for n-grams of lo to
// hi tokens (1 ≤ lo ≤ hi).
func NewLookupDrafter(lo, hi int) *LookupDrafter {
	return &LookupDrafter{min: max(lo, 1), max: max(hi, lo, 1)}
}

// Draft proposes up to n tokens that followed the latest earlier
// occurrence of the longest matching trailing n-gram; none when no
// n-gram of the allowed sizes recurs. r is not used: the drafts are
// deterministic (a point mass for speculative sampling).
func (l *LookupDrafter) Draft(tokens []int32, n int, _ *SpecRand) (Draft, error) {
	return Draft{Tokens: lookup(tokens, n, l.min, l.max)}, nil
}

// Close does nothing: the drafter holds nothing.
func (l *LookupDrafter) Close() {}

// lookup is LookupDrafter's search.
func lookup(tokens []int32, n, lo, hi int) []int32 {
	t := len(tokens)
	if n <= 0 {
		return nil
	}
	for size := min(hi, t-1); size >= lo; size-- {
		tail := tokens[t-size:]
		// an occurrence starting at s < t-size; the latest one first
		for s := t - size - 1; s >= 0; s-- {
			if !equalAt(tokens, s, tail) {
				continue
			}
			// what followed, continued past the end by the draft itself
			// (a loop shorter than the n-gram keeps repeating)
			out := make([]int32, 0, n)
			for j := range n {
				if i := s + size + j; i < t {
					out = append(out, tokens[i])
				} else {
					out = append(out, out[i-t])
				}
			}
			return out
		}
	}
	return nil
}

func equalAt(tokens []int32, s int, pat []int32) bool {
	for i, p := range pat {
		if tokens[s+i] != p {
			return false
		}
	}
	return true
}
