package sampler

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

func seed(v uint64) *uint64 { return &v }

// ---- a float64 model of mlx-lm's definitions ----

func logSoftmax(x []float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	s := 0.0
	for _, v := range x {
		s += math.Exp(v - m)
	}
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v - m - math.Log(s)
	}
	return out
}

func refTopP(lp []float64, p float64) []float64 {
	idx := make([]int, len(lp))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return lp[idx[a]] < lp[idx[b]] })
	out := slices.Clone(lp)
	cum := 0.0
	for _, i := range idx {
		cum += math.Exp(lp[i])
		if !(cum > 1-p) {
			out[i] = math.Inf(-1)
		}
	}
	return out
}

func refMinP(lp []float64, p float64, keep int) []float64 {
	top := math.Inf(-1)
	for _, v := range lp {
		top = math.Max(top, v)
	}
	order := make([]int, len(lp))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lp[order[a]] > lp[order[b]] })
	kept := map[int]bool{}
	for _, i := range order[:keep] {
		kept[i] = true
	}
	out := slices.Clone(lp)
	for i, v := range lp {
		if v < top+math.Log(p) && !kept[i] {
			out[i] = math.Inf(-1)
		}
	}
	return out
}

func refTopK(lp []float64, k int) []float64 {
	order := make([]int, len(lp))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lp[order[a]] > lp[order[b]] })
	out := slices.Clone(lp)
	for _, i := range order[k:] {
		out[i] = math.Inf(-1)
	}
	return out
}

// refXTC returns the logprobs after XTC has fired.
func refXTC(lp []float64, threshold float64, special []int) []float64 {
	probs := softmax(lp, 1)
	floor := math.Inf(1)
	for _, p := range probs {
		if p > threshold {
			floor = math.Min(floor, p)
		}
	}
	out := slices.Clone(lp)
	for i, p := range probs {
		if p > floor && !slices.Contains(special, i) {
			out[i] = math.Inf(-1)
		}
	}
	return out
}

func softmax(x []float64, temp float64) []float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v/temp)
	}
	out := make([]float64, len(x))
	s := 0.0
	for i, v := range x {
		if math.IsInf(v, -1) {
			continue
		}
		out[i] = math.Exp(v/temp - m)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

// expected returns the distribution mlx-lm's chain implies for p on logits.
func expected(p Params, logits []float64) []float64 {
	p = p.withDefaults()
	lp := logSoftmax(logits)
	if p.TopP > 0 && p.TopP < 1 {
		lp = refTopP(lp, p.TopP)
	}
	if p.MinP != 0 {
		lp = refMinP(lp, p.MinP, p.MinTokensToKeep)
	}
	finish := func(lp []float64) []float64 {
		if p.TopK > 0 && p.TopK < len(lp) {
			lp = refTopK(lp, p.TopK)
		}
		return softmax(lp, p.Temperature)
	}
	if p.XTCProbability > 0 {
		off := finish(lp)
		on := finish(refXTC(lp, p.XTCThreshold, p.XTCSpecialTokens))
		out := make([]float64, len(lp))
		for i := range out {
			out[i] = (1-p.XTCProbability)*off[i] + p.XTCProbability*on[i]
		}
		return out
	}
	return finish(lp)
}

// ---- chi-square ----

// upperGammaQ is the regularized upper incomplete gamma Q(a, x).
func upperGammaQ(a, x float64) float64 {
	if x <= 0 {
		return 1
	}
	lg, _ := math.Lgamma(a)
	if x < a+1 { // series for P
		sum, term := 1/a, 1/a
		for n := 1; n < 500; n++ {
			term *= x / (a + float64(n))
			sum += term
			if term < sum*1e-15 {
				break
			}
		}
		return 1 - sum*math.Exp(-x+a*math.Log(x)-lg)
	}
	// continued fraction for Q (Lentz)
	b := x + 1 - a
	c := 1 / 1e-300
	d := 1 / b
	h := d
	for i := 1; i < 500; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < 1e-300 {
			d = 1e-300
		}
		c = b + an/c
		if math.Abs(c) < 1e-300 {
			c = 1e-300
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-15 {
			break
		}
	}
	return math.Exp(-x+a*math.Log(x)-lg) * h
}

// chiSquareP tests counts against probabilities; impossible outcomes must not occur.
func chiSquareP(t *testing.T, counts []int, probs []float64) float64 {
	t.Helper()
	n := 0
	for _, c := range counts {
		n += c
	}
	stat, df := 0.0, -1
	for i, p := range probs {
		if p == 0 {
			if counts[i] != 0 {
				t.Fatalf("token %d has probability 0 but was drawn %d times (probs %v, counts %v)", i, counts[i], probs, counts)
			}
			continue
		}
		e := p * float64(n)
		stat += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
		df++
	}
	if df <= 0 {
		return 1
	}
	return upperGammaQ(float64(df)/2, stat/2)
}

func TestUpperGammaQ(t *testing.T) {
	// chi-square survival values: df=1, x=3.841 → 0.05; df=10, x=23.209 → 0.01
	if q := upperGammaQ(0.5, 3.841/2); math.Abs(q-0.05) > 1e-3 {
		t.Errorf("Q(df=1, 3.841) = %v", q)
	}
	if q := upperGammaQ(5, 23.209/2); math.Abs(q-0.01) > 1e-3 {
		t.Errorf("Q(df=10, 23.209) = %v", q)
	}
}

func randomLogits(r *rand.Rand, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = r.NormFloat64() * 1.5
	}
	return out
}

func logitsArray(x []float64) *tensor.Array {
	return tensor.FromFloat64(x, []int{1, len(x)}, tensor.Float32)
}

// rowSampler makes a sampler for p over the vocabulary of one row of
// logits, and the row as an array; free releases both.
func rowSampler(t testing.TB, p Params, logits []float64) (s *Sampler, x *tensor.Array, free func()) {
	t.Helper()
	s, err := New(p, len(logits))
	if err != nil {
		t.Fatal(err)
	}
	x = logitsArray(logits)
	return s, x, func() { x.Free(); s.Free() }
}

func draw(t *testing.T, p Params, logits []float64, n int) []int {
	t.Helper()
	s, x, free := rowSampler(t, p, logits)
	defer free()
	counts := make([]int, len(logits))
	for i := 0; i < n; i++ {
		r, err := s.Sample(x, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		counts[r.Token]++
	}
	return counts
}

// pathDelta runs f and reports how many steps took the fast and full paths.
func pathDelta(f func()) (fast, full int64) {
	f0, u0 := pathFast.Load(), pathFull.Load()
	f()
	return pathFast.Load() - f0, pathFull.Load() - u0
}

// checkPath fails unless all n steps of f took the wanted path.
func checkPath(t *testing.T, wantFast bool, n int, f func()) {
	t.Helper()
	fast, full := pathDelta(f)
	if wantFast && (fast != int64(n) || full != 0) || !wantFast && (full != int64(n) || fast != 0) {
		t.Fatalf("want fast path %v for %d steps: %d fast, %d full", wantFast, n, fast, full)
	}
}

func TestDistributions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	const draws = 20000
	cases := []struct {
		p    Params
		fast bool
	}{
		{Params{Temperature: 1}, false},
		{Params{Temperature: 0.7}, false},
		{Params{Temperature: 1, TopP: 0.8}, false},
		{Params{Temperature: 1, TopP: 1}, false}, // disabled
		{Params{Temperature: 1, MinP: 0.1}, false},
		{Params{Temperature: 1, MinP: 0.6, MinTokensToKeep: 3}, false},
		{Params{Temperature: 1, TopK: 3}, true},
		{Params{Temperature: 1, XTCProbability: 0.5, XTCThreshold: 0.1}, false},
		{Params{Temperature: 1, XTCProbability: 1, XTCThreshold: 0.05, XTCSpecialTokens: []int{0}}, false},
		// top-p with XTC needs the full sort for XTC's normaliser
		{Params{Temperature: 0.8, TopP: 0.9, MinP: 0.05, TopK: 5, XTCProbability: 0.3, XTCThreshold: 0.1}, false},
		{Params{Temperature: 0.8, TopP: 0.9, MinP: 0.05, TopK: 5}, true},
	}
	for i, c := range cases {
		p := c.p
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			logits := randomLogits(r, 10)
			p.Seed = seed(uint64(100 + i))
			want := expected(p, logits)
			var counts []int
			checkPath(t, c.fast, draws, func() { counts = draw(t, p, logits, draws) })
			if pv := chiSquareP(t, counts, want); pv <= 0.001 {
				t.Errorf("params %+v: chi-square p = %g\nwant %v\ngot  %v", p, pv, want, counts)
			}
		})
	}
}

// support lists the indices with non-zero probability.
func support(probs []float64) []int {
	var out []int
	for i, p := range probs {
		if p > 0 {
			out = append(out, i)
		}
	}
	return out
}

// TestFastPathDistributions stresses the top-k candidate path where it
// differs most from a plain top-k: XTC removing top tokens, min-p re-keeping
// tokens, a top-p boundary inside the candidates, ties at the top-k boundary.
func TestFastPathDistributions(t *testing.T) {
	const draws = 20000
	r := rand.New(rand.NewPCG(21, 22))
	peaked := func(n int, scale float64) []float64 {
		x := randomLogits(r, n)
		for i := range x {
			x[i] *= scale
		}
		return x
	}
	// spiky has four clearly leading tokens, so XTC finds several above
	// its threshold.
	spiky := func() []float64 {
		x := peaked(40, 1)
		for i, b := range []float64{4, 3.7, 3.4, 3.1} {
			x[5+6*i] += b
		}
		return x
	}
	type tc struct {
		name   string
		p      Params
		logits []float64
		// check asserts that the case really stresses what it claims.
		check func(t *testing.T, p Params, logits []float64)
	}
	xtcRemoves := func(t *testing.T, p Params, logits []float64) {
		q := p
		q.XTCProbability = 0
		if slices.Equal(support(expected(p, logits)), support(expected(q, logits))) && p.XTCProbability == 1 {
			t.Fatalf("XTC changes nothing on these logits")
		}
		lp := logSoftmax(logits)
		n := 0
		for _, v := range lp {
			if math.Exp(v) > p.XTCThreshold {
				n++
			}
		}
		if n < 2 {
			t.Fatalf("only %d tokens above the XTC threshold", n)
		}
	}
	cases := []tc{
		{"xtc+topk", Params{Temperature: 1, TopK: 4, XTCProbability: 0.6, XTCThreshold: 0.12}, spiky(), xtcRemoves},
		{"xtc always+topk", Params{Temperature: 1, TopK: 3, XTCProbability: 1, XTCThreshold: 0.1}, spiky(), xtcRemoves},
		{"xtc+minp keep+special", Params{Temperature: 0.9, MinP: 0.02, MinTokensToKeep: 4, TopK: 6, XTCProbability: 1, XTCThreshold: 0.1, XTCSpecialTokens: []int{3}}, nil, xtcRemoves},
		{"minp keep", Params{Temperature: 1, MinP: 0.5, MinTokensToKeep: 5, TopK: 8}, peaked(40, 1.5), func(t *testing.T, p Params, logits []float64) {
			q := p
			q.MinTokensToKeep = 1
			if len(support(expected(q, logits))) >= 5 {
				t.Fatalf("min-p alone keeps ≥ 5 tokens: keep is not exercised")
			}
		}},
		{"topp inside candidates", Params{Temperature: 1, TopP: 0.6, TopK: 12}, peaked(40, 1.2), func(t *testing.T, p Params, logits []float64) {
			if n := len(support(expected(p, logits))); n >= p.TopK || n < 2 {
				t.Fatalf("top-p keeps %d tokens: boundary not strictly inside the top %d", n, p.TopK)
			}
		}},
		{"topp+minp+topk cut", Params{Temperature: 0.7, TopP: 0.97, MinP: 0.01, TopK: 6}, peaked(40, 1), nil},
	}
	// The special token is made the most likely one so XTC must skip it.
	sp := spiky()
	sp[3], sp[5] = sp[5], sp[3]
	cases[2].logits = sp
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			p := c.p
			p.Seed = seed(uint64(500 + i))
			if c.check != nil {
				c.check(t, p, c.logits)
			}
			want := expected(p, c.logits)
			var counts []int
			checkPath(t, true, draws, func() { counts = draw(t, p, c.logits, draws) })
			if pv := chiSquareP(t, counts, want); pv <= 0.001 {
				t.Errorf("chi-square p = %g\nwant %v\ngot  %v", pv, want, counts)
			}
		})
	}

	// Ties at the top-k boundary: which of the tied tokens survives is
	// arbitrary (as with mlx's argpartition), so compare the tied group's
	// total against the model.
	t.Run("ties", func(t *testing.T) {
		defer tensortest.NoLeaks(t)()
		logits := []float64{0.5, 2, 1.5, 1.5, 1.5, -1, 3, 1.5, 0, 1}
		group := []int{2, 3, 4, 7}
		p := Params{Temperature: 1, TopK: 3, Seed: seed(77)}
		want := expected(p, logits)
		var counts []int
		checkPath(t, true, draws, func() { counts = draw(t, p, logits, draws) })
		merge := func(v []float64) []float64 {
			out := []float64{v[1], v[6], 0}
			for _, g := range group {
				out[2] += v[g]
			}
			return out
		}
		fc := make([]float64, len(counts))
		for i, c := range counts {
			fc[i] = float64(c)
		}
		for i, c := range counts {
			if c > 0 && i != 1 && i != 6 && !slices.Contains(group, i) {
				t.Fatalf("token %d outside the top 3 drawn: %v", i, counts)
			}
		}
		mc := merge(fc)
		got := []int{int(mc[0]), int(mc[1]), int(mc[2])}
		if pv := chiSquareP(t, got, merge(want)); pv <= 0.001 {
			t.Errorf("chi-square p = %g\nwant %v\ngot  %v", pv, merge(want), got)
		}
	})
}

// TestFastPathSupport checks that the candidate path and the full path
// keep exactly the same tokens, with the same logprobs, on many random
// rows and parameter sets for which the candidate path is exact.
func TestFastPathSupport(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(31, 32))
	const trials = 400
	boundary, compared := 0, map[string]int{}
	for trial := 0; trial < trials; trial++ {
		v := 20 + r.IntN(300)
		p := Params{Temperature: 1, TopK: 1 + r.IntN(min(24, v-1))}
		if r.IntN(3) > 0 {
			p.MinP = []float64{0.001, 0.02, 0.1, 0.4}[r.IntN(4)]
			p.MinTokensToKeep = 1 + r.IntN(6)
		}
		if r.IntN(2) == 0 {
			p.XTCProbability = []float64{1, 0.5}[r.IntN(2)]
			p.XTCThreshold = 0.02 + 0.4*r.Float64()
			for range r.IntN(3) {
				p.XTCSpecialTokens = append(p.XTCSpecialTokens, r.IntN(v))
			}
		} else if r.IntN(3) > 0 {
			p.TopP = 0.2 + 0.79*r.Float64()
		}
		p.Seed = seed(uint64(trial))
		s, err := New(p, v)
		if err != nil {
			t.Fatal(err)
		}
		if s.fastM == 0 {
			s.Free()
			continue
		}
		compared["all"]++
		if p.XTCProbability > 0 {
			compared["xtc"]++
			if p.MinP != 0 && p.MinTokensToKeep > 1 {
				compared["xtc+minp keep"]++
			}
		}
		if p.TopP > 0 {
			compared["topp"]++
		}
		const rows = 2
		scale := 0.5 + 3*r.Float64()
		logits := make([]float64, 0, rows*v)
		for range rows {
			for _, x := range randomLogits(r, v) {
				logits = append(logits, x*scale)
			}
		}
		// Some XTC exempt ids are made top tokens so the exemption matters.
		if len(p.XTCSpecialTokens) > 0 {
			logits[p.XTCSpecialTokens[0]] += 4
		}
		var full, fastVals, fastIDs []float64
		func() {
			sc := tensor.NewScope()
			defer sc.Close()
			x := tensor.FromFloat64(logits, []int{rows, v}, tensor.Float32)
			lp := tensor.LogSoftmax(x, -1)
			key := tensor.Key(uint64(trial))
			full = s.filter(lp, key).Float64s()
			vals, ids := s.filterFast(lp, key)
			fastVals, fastIDs = vals.Float64s(), ids.Float64s()
		}()
		s.Free()
		m := len(fastVals) / rows
		mismatch := false
		for row := range rows {
			got := map[int]float64{}
			for j := range m {
				if val := fastVals[row*m+j]; !math.IsInf(val, -1) {
					got[int(fastIDs[row*m+j])] = val
				}
			}
			var want []int
			for i := range v {
				if val := full[row*v+i]; !math.IsInf(val, -1) {
					want = append(want, i)
					if g, ok := got[i]; ok && g != val {
						t.Fatalf("trial %d row %d token %d: fast logprob %v, full %v", trial, row, i, g, val)
					}
				}
			}
			if len(want) != len(got) {
				mismatch = true
			}
			for _, i := range want {
				if _, ok := got[i]; !ok {
					mismatch = true
				}
			}
			if mismatch && !nearTopPBoundary(logits[row*v:(row+1)*v], p.TopP) {
				var gotIDs []int
				for id := range got {
					gotIDs = append(gotIDs, id)
				}
				slices.Sort(gotIDs)
				t.Fatalf("trial %d row %d params %+v (M=%d): full keeps %v, fast keeps %v", trial, row, p, m, want, gotIDs)
			}
		}
		if mismatch {
			boundary++
		}
	}
	for _, k := range []string{"all", "xtc", "xtc+minp keep", "topp"} {
		if compared[k] < trials/20 {
			t.Fatalf("only %d trials compared for %q: %v", compared[k], k, compared)
		}
	}
	t.Logf("compared %v; %d differed at a top-p float boundary", compared, boundary)
	if boundary > trials/50 {
		t.Fatalf("%d of %d trials differed at a top-p float boundary", boundary, trials)
	}
}

// nearTopPBoundary reports whether some token's mass strictly above it
// lies within float32 rounding of topP, where the two paths may round
// differently.
func nearTopPBoundary(logits []float64, topP float64) bool {
	if topP <= 0 || topP >= 1 {
		return false
	}
	lp := logSoftmax(logits)
	sorted := slices.Clone(lp)
	slices.Sort(sorted)
	above := 0.0
	for i := len(sorted) - 1; i >= 0; i-- {
		if math.Abs(above-topP) < 1e-5 {
			return true
		}
		above += math.Exp(sorted[i])
	}
	return false
}

func TestFastM(t *testing.T) {
	cases := []struct {
		p    Params
		want int
	}{
		{Params{Temperature: 1, TopK: 64}, 64},
		{Params{Temperature: 1, TopK: 64, TopP: 0.95, MinP: 0.1, MinTokensToKeep: 200}, 64},
		{Params{Temperature: 1, TopK: 64, XTCProbability: 0.5, XTCThreshold: 0.1}, 64 + 11},
		{Params{Temperature: 1, TopK: 64, XTCProbability: 0.5, XTCThreshold: 0.3, MinP: 0.1, MinTokensToKeep: 68}, 68},
		{Params{Temperature: 1, TopK: 64, XTCProbability: 0.5, XTCThreshold: 0.3, MinP: 0.1, MinTokensToKeep: 69}, 0},
		{Params{Temperature: 1, TopK: 64, XTCProbability: 0.5, XTCThreshold: 0}, 0},
		{Params{Temperature: 1, TopK: 64, XTCProbability: 0.5, XTCThreshold: 0.1, TopP: 0.9}, 0},
		{Params{Temperature: 1, TopK: 64, XTCThreshold: 0, TopP: 0.9}, 64}, // XTC off
		{Params{Temperature: 1}, 0},
		{Params{TopK: 64}, 0},
		{Params{Temperature: 1, TopK: 1000}, 0},
		{Params{Temperature: 1, TopK: 990, XTCProbability: 1, XTCThreshold: 0.1}, 0},
	}
	for i, c := range cases {
		if got := fastM(c.p.withDefaults(), 1000); got != c.want {
			t.Errorf("case %d %+v: fastM %d, want %d", i, c.p, got, c.want)
		}
	}
}

func TestGreedyIgnoresFilters(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	logits := []float64{0.1, 3, -1, 2.9}
	counts := draw(t, Params{Temperature: 0, TopK: 1, MinP: 0.9}, logits, 20)
	if counts[1] != 20 {
		t.Fatalf("greedy counts %v", counts)
	}
}

func TestAllInfButOne(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	inf := math.Inf(-1)
	logits := []float64{inf, inf, 0.5, inf, inf}
	p := Params{Temperature: 1, TopP: 0.9, MinP: 0.1, TopK: 2, XTCProbability: 1, XTCThreshold: 0.1, Seed: seed(1), Logprobs: true}
	s, x, free := rowSampler(t, p, logits)
	defer free()
	for i := 0; i < 50; i++ {
		r, err := s.Sample(x, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.Token != 2 || r.Logprob != 0 {
			t.Fatalf("step %d: token %d logprob %v", i, r.Token, r.Logprob)
		}
	}
}

func TestTopKTies(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	logits := []float64{1, 2, 2, 2, 0, 3}
	counts := draw(t, Params{Temperature: 1, TopK: 3, Seed: seed(3)}, logits, 3000)
	distinct := 0
	for i, c := range counts {
		if c > 0 {
			distinct++
			if logits[i] < 2 {
				t.Fatalf("token %d (logit %v) below the top-3 boundary was drawn: %v", i, logits[i], counts)
			}
		}
	}
	if counts[5] == 0 || distinct != 3 {
		t.Fatalf("want the top token and exactly two of the tied ones: %v", counts)
	}
}

func TestSeeds(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	logits := randomLogits(rand.New(rand.NewPCG(1, 2)), 50)
	run := func(sd uint64) []int {
		s, x, free := rowSampler(t, Params{Temperature: 1, TopP: 0.95, Seed: seed(sd)}, logits)
		defer free()
		var toks []int
		for i := 0; i < 40; i++ {
			r, err := s.Sample(x, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			toks = append(toks, r.Token)
		}
		return toks
	}
	a, b, c := run(42), run(42), run(43)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different tokens:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("different seeds, same tokens: %v", a)
	}
}

func TestMask(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	logits := []float64{5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12, -13, -14, -15, -16, -17, -18, -19, -20, -21, -22, -23, -24, -25, -26, -27, -28}
	// 34 tokens: two mask words
	mask := []int32{0, 1 << 1}
	s, x, free := rowSampler(t, Params{Temperature: 1, Seed: seed(9)}, logits)
	defer free()
	for i := 0; i < 20; i++ {
		r, err := s.Sample(x, nil, mask)
		if err != nil {
			t.Fatal(err)
		}
		if r.Token != 33 {
			t.Fatalf("masked sampling gave token %d, want 33 (the only allowed)", r.Token)
		}
	}
	// bits beyond the vocabulary do not count as allowed
	_, err := s.Sample(x, nil, []int32{0, ^int32(3)})
	if !errors.Is(err, ErrAllMasked) {
		t.Fatalf("all-masked row: err %v, want ErrAllMasked", err)
	}
	if _, err := s.Sample(x, nil, []int32{1}); err == nil {
		t.Fatal("short mask accepted")
	}
}

func TestProcessors(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	logits := []float64{2, -2, 1, -1, 0.5, 3}
	history := []int32{0, 1, 1, 5, 2, 1, 0}
	p := Params{
		LogitBias:             map[int]float64{4: 1.5, 3: -0.25},
		RepetitionPenalty:     2,
		RepetitionContextSize: 5, // sees 1, 5, 2, 1, 0
		PresencePenalty:       0.5,
		PresenceContextSize:   2, // sees 1, 0
		FrequencyPenalty:      0.25,
		FrequencyContextSize:  4, // sees 5, 2, 1, 0 ... and 1 once more? no: last 4 = 5,2,1,0
		Logprobs:              true,
		TopLogprobs:           6,
	}
	want := slices.Clone(logits)
	want[4] += 1.5
	want[3] -= 0.25
	for _, id := range []int{1, 5, 2, 0} { // repetition
		if want[id] < 0 {
			want[id] *= 2
		} else {
			want[id] /= 2
		}
	}
	for _, id := range []int{1, 0} { // presence
		want[id] -= 0.5
	}
	for _, id := range []int{5, 2, 1, 0} { // frequency, one occurrence each
		want[id] -= 0.25
	}
	wantLP := logSoftmax(want)
	s, x, free := rowSampler(t, p, logits)
	defer free()
	r, err := s.Sample(x, history, nil)
	if err != nil {
		t.Fatal(err)
	}
	best := 0
	for i := range want {
		if want[i] > want[best] {
			best = i
		}
	}
	if r.Token != best {
		t.Fatalf("greedy token %d, want %d (processed logits %v)", r.Token, best, want)
	}
	if math.Abs(float64(r.Logprob)-wantLP[best]) > 1e-5 {
		t.Fatalf("logprob %v, want %v", r.Logprob, wantLP[best])
	}
	if len(r.Top) != 6 {
		t.Fatalf("%d top logprobs", len(r.Top))
	}
	for i, tl := range r.Top {
		if math.Abs(float64(tl.Logprob)-wantLP[tl.ID]) > 1e-5 {
			t.Errorf("top[%d] = %+v, want logprob %v", i, tl, wantLP[tl.ID])
		}
		if i > 0 && tl.Logprob > r.Top[i-1].Logprob {
			t.Errorf("top logprobs not descending: %+v", r.Top)
		}
	}
}

func TestFrequencyCountsOccurrences(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	// token 0 seen three times, token 1 once: 0 drops by 3·0.5, 1 by 0.5
	logits := []float64{2, 1.2, 0}
	s, x, free := rowSampler(t, Params{FrequencyPenalty: 0.5, Logprobs: true}, logits)
	defer free()
	r, err := s.Sample(x, []int32{0, 1, 0, 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := logSoftmax([]float64{0.5, 0.7, 0})
	if r.Token != 1 || math.Abs(float64(r.Logprob)-want[1]) > 1e-5 {
		t.Fatalf("token %d logprob %v, want 1 and %v", r.Token, r.Logprob, want[1])
	}
}

func TestBadParams(t *testing.T) {
	nan := math.NaN()
	cases := map[string]Params{
		"temperature":        {Temperature: -1},
		"top_p":              {TopP: 1.5},
		"top_k":              {TopK: -2},
		"min_p":              {MinP: 2},
		"xtc_threshold":      {XTCThreshold: 0.6},
		"repetition_penalty": {RepetitionPenalty: nan},
		"presence_penalty":   {PresencePenalty: math.Inf(1)},
		"logit_bias":         {LogitBias: map[int]float64{99: 1}},
		"xtc_probability":    {XTCProbability: -0.1},
	}
	for field, p := range cases {
		_, err := New(p, 10)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Field != field || !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: err %v", field, err)
		}
	}
	s, err := New(Params{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	x := tensor.Zeros([]int{1, 9}, tensor.Float32)
	defer x.Free()
	if _, err := s.Sample(x, nil, nil); err == nil {
		t.Error("wrong vocab accepted")
	}
	y := tensor.Zeros([]int{1, 10}, tensor.Float32)
	defer y.Free()
	if _, err := s.Sample(y, []int32{10}, nil); err == nil {
		t.Error("history id outside the vocab accepted")
	}
}

// benchStep times one sampling step at vocabulary 262,144 on fixed random
// logits with p (and history, when given); full forces the
// full-vocabulary path where the top-k candidate path would run.
func benchStep(b *testing.B, p Params, history []int32, full bool) {
	const v = 262144
	p.Seed = seed(1)
	s, x, free := rowSampler(b, p, randomLogits(rand.New(rand.NewPCG(5, 6)), v))
	defer free()
	if full {
		s.fastM = 0 // the full-vocabulary path, for comparison
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Sample(x, history, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStepVocab262k turns on every filter and processor.
func BenchmarkStepVocab262k(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	hist := make([]int32, 64)
	for i := range hist {
		hist[i] = int32(r.IntN(262144))
	}
	benchStep(b, Params{
		Temperature: 0.8, TopP: 0.9, MinP: 0.05, MinTokensToKeep: 2, TopK: 40,
		XTCProbability: 0.5, XTCThreshold: 0.1, RepetitionPenalty: 1.1,
		PresencePenalty: 0.2, FrequencyPenalty: 0.2, LogitBias: map[int]float64{5: 1},
		Logprobs: true, TopLogprobs: 5,
	}, hist, false)
}

// BenchmarkStepVocab262kTopPTopK is Gemma's generation_config: temperature,
// top_p 0.95 and top_k 64, nothing else.
func BenchmarkStepVocab262kTopPTopK(b *testing.B) {
	benchStep(b, Params{Temperature: 1, TopP: 0.95, TopK: 64}, nil, false)
}

// BenchmarkStepVocab262kTopPTopKFull is BenchmarkStepVocab262kTopPTopK on
// the full-vocabulary path.
func BenchmarkStepVocab262kTopPTopKFull(b *testing.B) {
	benchStep(b, Params{Temperature: 1, TopP: 0.95, TopK: 64}, nil, true)
}

// BenchmarkStepVocab262kXTCTopK exercises XTC, min-p (with keep) and top-k
// on the candidate fast path.
func BenchmarkStepVocab262kXTCTopK(b *testing.B) {
	benchStep(b, xtcTopK, nil, false)
}

// BenchmarkStepVocab262kXTCTopKFull is BenchmarkStepVocab262kXTCTopK on the
// full-vocabulary path.
func BenchmarkStepVocab262kXTCTopKFull(b *testing.B) {
	benchStep(b, xtcTopK, nil, true)
}

var xtcTopK = Params{Temperature: 0.8, MinP: 0.05, MinTokensToKeep: 2, TopK: 40, XTCProbability: 0.5, XTCThreshold: 0.1}

// TestHistoryWindow: the window is the largest of the penalties that are
// on (defaults filled in), 0 without penalties.
func TestHistoryWindow(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, c := range []struct {
		p    Params
		want int
	}{
		{Params{}, 0},
		{Params{RepetitionPenalty: 1, RepetitionContextSize: 50}, 0},
		{Params{RepetitionPenalty: 1.1}, 20},
		{Params{RepetitionPenalty: 1.1, RepetitionContextSize: 5, PresencePenalty: 0.5, PresenceContextSize: 64}, 64},
		{Params{FrequencyPenalty: 0.2, FrequencyContextSize: 7, PresenceContextSize: 90}, 7},
	} {
		s, err := New(c.p, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.HistoryWindow(); got != c.want {
			t.Errorf("%+v: window %d, want %d", c.p, got, c.want)
		}
		s.Free()
	}
}
