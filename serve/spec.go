package serve

import (
	"slices"

	"github.com/mlxgo/mlxgo/generate"
)

// addSpecStats sums speculative decoding's statistics over a request's
// choices (a or b may be nil); generated is the tokens the choices summed
// so far generated, which the derived rates are recomputed from.
func addSpecStats(a, b *generate.SpecStats, generated int) *generate.SpecStats {
	switch {
	case b == nil:
		return a
	case a == nil:
		c := *b
		c.AcceptanceLengths = slices.Clone(b.AcceptanceLengths)
		c.DraftedByPos = slices.Clone(b.DraftedByPos)
		c.AcceptedByPos = slices.Clone(b.AcceptedByPos)
		return &c
	}
	a.NumDraft = max(a.NumDraft, b.NumDraft)
	a.Drafted += b.Drafted
	a.Accepted += b.Accepted
	a.Rejected += b.Rejected
	a.TargetCalls += b.TargetCalls
	a.Rounds += b.Rounds
	a.DraftCalls += b.DraftCalls
	a.ForwardsSaved += b.ForwardsSaved
	a.Restores += b.Restores
	a.AcceptanceLengths = addInts(a.AcceptanceLengths, b.AcceptanceLengths)
	a.DraftedByPos = addInts(a.DraftedByPos, b.DraftedByPos)
	a.AcceptedByPos = addInts(a.AcceptedByPos, b.AcceptedByPos)
	a.AcceptanceRate, a.TokensPerForward = 0, 0
	if a.Drafted > 0 {
		a.AcceptanceRate = float64(a.Accepted) / float64(a.Drafted)
	}
	if a.TargetCalls > 0 {
		a.TokensPerForward = float64(generated) / float64(a.TargetCalls)
	}
	return a
}

// addInts adds b into a element by element, growing a to b's length.
func addInts(a, b []int) []int {
	for len(a) < len(b) {
		a = append(a, 0)
	}
	for i, v := range b {
		a[i] += v
	}
	return a
}
