package generate

import "math"

// DefaultAutoMaxDraft is the largest γ the adaptive choice
// (Speculation.Auto) considers when NumDraft is 0.
const DefaultAutoMaxDraft = 8

// autoGamma chooses γ round by round (Speculation.Auto) to maximise the
// expected tokens per second of a round, from what it measures online:
// the drafts' acceptance probability α (a geometric model: each draft is
// accepted with probability α, given its predecessors were), the
// target's forward time as a line in the tokens it is fed, and the
// draft's time per drafted token. A round with γ drafts yields
// E(γ) = (1 − α^(γ+1)) / (1 − α) tokens and costs T(γ+1) + γ·c.
// Estimates are exponential moving averages, so γ follows a context whose
// predictability changes; every 8th round drafts one token more than the
// choice (so that γ = 0, plain decoding, still measures α).
type autoGamma struct {
	max int
	// acceptance: EMA of accepted drafts and of draft positions tried
	// (accepted, plus the one rejected, if any)
	acc, tried float64
	// target forward time: EMA of seconds per forward by fed tokens
	fwd map[int]float64
	// draft: EMA of seconds per drafted token
	draftSec float64
	draftN   bool
	rounds   int
}

func newAutoGamma(max int) *autoGamma {
	return &autoGamma{max: max, acc: 1, tried: 2, fwd: map[int]float64{}}
}

const autoDecay = 0.9

func ema(old, v float64, seen bool) float64 {
	if !seen {
		return v
	}
	return autoDecay*old + (1-autoDecay)*v
}

// observe records a round: drafted and accepted drafts, the target's
// forward time over fed tokens, the draft's time.
func (a *autoGamma) observe(drafted, accepted, fed int, fwdSec, draftSec float64) {
	if drafted > 0 {
		tried := accepted
		if accepted < drafted {
			tried++
		}
		a.acc = autoDecay*a.acc + (1-autoDecay)*float64(accepted)
		a.tried = autoDecay*a.tried + (1-autoDecay)*float64(tried)
		a.draftSec = ema(a.draftSec, draftSec/float64(drafted), a.draftN)
		a.draftN = true
	}
	old, seen := a.fwd[fed]
	a.fwd[fed] = ema(old, fwdSec, seen)
}

// alpha is the estimated acceptance probability, in [0, 0.99].
func (a *autoGamma) alpha() float64 {
	if a.tried <= 0 {
		return 0
	}
	return min(a.acc/a.tried, 0.99)
}

// forwardCost is the estimated target time for n fed tokens: the
// measured time when n was seen, else the least-squares line through the
// measured sizes (a flat line through one size, a guess of 10% more per
// extra token before any is measured).
func (a *autoGamma) forwardCost(n int) float64 {
	if t, ok := a.fwd[n]; ok {
		return t
	}
	var sx, sy, sxx, sxy, k float64
	for x, y := range a.fwd {
		fx := float64(x)
		sx += fx
		sy += y
		sxx += fx * fx
		sxy += fx * y
		k++
	}
	switch {
	case k == 0:
		return 1 + 0.1*float64(n-1)
	case k == 1 || k*sxx-sx*sx == 0:
		return sy / k * (1 + 0.1*float64(n-1)) / (1 + 0.1*(sx/k-1))
	}
	slope := (k*sxy - sx*sy) / (k*sxx - sx*sx)
	icept := (sy - slope*sx) / k
	return max(icept+slope*float64(n), 1e-9)
}

// expectedTokens is E(γ) for acceptance α.
func expectedTokens(alpha float64, gamma int) float64 {
	if alpha >= 1 {
		return float64(gamma + 1)
	}
	return (1 - math.Pow(alpha, float64(gamma+1))) / (1 - alpha)
}

// pick returns γ for the next round (pending: the tokens fed besides the
// drafts, usually 1).
func (a *autoGamma) pick(pending int) int {
	alpha := a.alpha()
	best, bestRate := 0, 0.0
	for g := 0; g <= a.max; g++ {
		cost := a.forwardCost(pending+g) + float64(g)*a.draftSec
		if rate := expectedTokens(alpha, g) / cost; rate > bestRate {
			best, bestRate = g, rate
		}
	}
	// every 8th round tries one draft more than the best, so that α stays
	// measured when not drafting and the cost line sees larger sizes
	if a.rounds++; a.rounds%8 == 0 {
		return min(best+1, a.max)
	}
	return best
}
