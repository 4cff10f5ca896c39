package generate

import (
	"math"
	"math/rand/v2"
	"testing"
)

// chiSquare is Pearson's statistic of observed counts against
// probabilities p (cells with p = 0 must stay empty: +Inf otherwise).
func chiSquare(counts []int, p []float64, n int) float64 {
	x := 0.0
	for i, c := range counts {
		e := p[i] * float64(n)
		if e == 0 {
			if c > 0 {
				return math.Inf(1)
			}
			continue
		}
		x += (float64(c) - e) * (float64(c) - e) / e
	}
	return x
}

// chi2Crit999 are the 0.999 quantiles of the chi-square distribution for
// 1…8 degrees of freedom (scipy.stats.chi2.ppf(0.999, df)): a statistic
// above them has p < 0.001.
var chi2Crit999 = []float64{0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124}

func normalise(w []float64) []float64 {
	t := 0.0
	for _, x := range w {
		t += x
	}
	out := make([]float64, len(w))
	for i, x := range w {
		out[i] = x / t
	}
	return out
}

func f32s(p []float64) []float32 {
	out := make([]float32, len(p))
	for i, x := range p {
		out[i] = float32(x)
	}
	return out
}

// TestAcceptOrResampleDistribution: whatever the draft distribution q —
// deliberately bad, a point mass, or one that gives a token p likes no
// mass at all — the token speculative sampling emits is distributed as
// the target's p (chi-square, 40,000 draws, p > 0.001), while the draft
// itself is not (the test has the power to tell them apart).
func TestAcceptOrResampleDistribution(t *testing.T) {
	p := normalise([]float64{0.30, 0.05, 0.20, 0.0, 0.15, 0.25, 0.05})
	df := 5 // cells with p > 0, less one
	const n = 40000
	bad := normalise([]float64{0.01, 0.5, 0.01, 0.2, 0.01, 0.02, 0.25})
	blind := normalise([]float64{0, 0.4, 0.3, 0.1, 0.1, 0, 0.1}) // no mass on tokens 0 and 5
	for _, c := range []struct {
		name  string
		q     []float64
		point int // ≥ 0: drafts are always this token, q nil
	}{{"bad", bad, -1}, {"blind", blind, -1}, {"point-1", nil, 1}, {"point-3 (p=0)", nil, 3}, {"exact", p, -1}} {
		r := rand.New(rand.NewPCG(1, uint64(len(c.name))))
		counts := make([]int, len(p))
		draftCounts := make([]int, len(p))
		accepted := 0
		for range n {
			var d int32
			var q []float32
			if c.point >= 0 {
				d = int32(c.point)
			} else {
				q = f32s(c.q)
				d = int32(drawFrom(q, r.Float64()))
			}
			draftCounts[d]++
			tok, ok := acceptOrResample(f32s(p), d, q, r.Float64(), r.Float64())
			if ok {
				accepted++
				if tok != int(d) {
					t.Fatalf("%s: accepted %d for draft %d", c.name, tok, d)
				}
			}
			counts[tok]++
		}
		if x := chiSquare(counts, p, n); x > chi2Crit999[df] {
			t.Errorf("%s: emitted tokens %v are not distributed as p (chi-square %.1f > %.1f)", c.name, counts, x, chi2Crit999[df])
		}
		if c.name == "bad" {
			if x := chiSquare(draftCounts, p, n); x <= chi2Crit999[df] {
				t.Errorf("the bad draft passes for p (chi-square %.1f): the test has no power", x)
			}
		}
		if c.name == "exact" && accepted != n {
			t.Errorf("q = p: %d of %d accepted", accepted, n)
		}
	}
}

// TestLookup: the longest trailing n-gram's latest earlier occurrence
// gives the drafts, continued by themselves past the end (a loop).
func TestLookup(t *testing.T) {
	for _, c := range []struct {
		toks   []int32
		n      int
		lo, hi int
		want   []int32
	}{
		{[]int32{1, 2, 3, 4, 9, 1, 2, 3}, 3, 1, 3, []int32{4, 9, 1}},
		{[]int32{1, 2, 3, 4, 9, 2, 3, 5, 2, 3}, 2, 1, 3, []int32{5, 2}}, // latest of two 2-gram matches
		{[]int32{7, 1, 2, 8, 5, 2, 9, 1, 2}, 2, 1, 3, []int32{8, 5}},    // the 2-gram beats the later 1-gram
		{[]int32{5, 6, 5, 6, 5}, 5, 1, 3, []int32{6, 5, 6, 5, 6}},       // a loop keeps going
		{[]int32{1, 2, 3}, 4, 1, 3, nil},                                // nothing recurs
		{[]int32{4, 1, 2, 4}, 2, 2, 3, nil},                             // only a 1-gram recurs
		{[]int32{3, 3, 3, 3}, 3, 1, 2, []int32{3, 3, 3}},
	} {
		got := lookup(c.toks, c.n, c.lo, c.hi)
		if !slicesEqual(got, c.want) {
			t.Errorf("lookup(%v, %d, %d..%d) = %v, want %v", c.toks, c.n, c.lo, c.hi, got, c.want)
		}
	}
}

func slicesEqual(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAutoGamma: the adaptive choice drafts long when drafts are accepted
// and the target's cost grows slowly with the tokens it is fed, short or
// not at all when they are rejected or drafting is dear, and probes one
// draft now and then when it has stopped drafting.
func TestAutoGamma(t *testing.T) {
	feed := func(a *autoGamma, accept float64, perTok, draft float64) {
		// forward costs measured at 1..4 fed tokens: 1 + perTok·(n−1)
		for n := 1; n <= 4; n++ {
			a.observe(0, 0, n, 1+perTok*float64(n-1), 0)
		}
		for range 60 { // rounds of 4 drafts, accepted at rate accept
			acc := int(accept*4 + 0.5)
			a.observe(4, acc, 5, 1+perTok*4, 4*draft)
		}
	}
	a := newAutoGamma(8)
	feed(a, 1, 0.02, 0)
	if g := a.pick(1); g < 6 {
		t.Errorf("all accepted, cheap verification and drafts: γ %d, want ≥ 6", g)
	}
	b := newAutoGamma(8)
	feed(b, 0, 0.05, 0.3)
	zeros := 0
	for range 16 {
		if b.pick(1) == 0 {
			zeros++
		}
	}
	if zeros != 14 {
		t.Errorf("nothing accepted: %d of 16 rounds without drafts, want 14 (two probes)", zeros)
	}
	if g := a.pick(1); g < 6 { // the probe round of a, too, drafts long
		t.Errorf("probe: γ %d", g)
	}
	c := newAutoGamma(8)
	feed(c, 0.5, 0.1, 0.05)
	if g := c.pick(1); g < 1 || g > 3 {
		t.Errorf("half accepted: γ %d, want 1…3", g)
	}
	if e := expectedTokens(0.5, 2); math.Abs(e-1.75) > 1e-12 {
		t.Errorf("E(0.5, 2) = %v, want 1.75", e)
	}
}
