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

func draw(t *testing.T, p Params, logits []float64, n int) []int {
	t.Helper()
	s, err := New(p, len(logits))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	x := logitsArray(logits)
	defer x.Free()
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

func TestDistributions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	const draws = 20000
	cases := []Params{
		{Temperature: 1},
		{Temperature: 0.7},
		{Temperature: 1, TopP: 0.8},
		{Temperature: 1, TopP: 1}, // disabled
		{Temperature: 1, MinP: 0.1},
		{Temperature: 1, MinP: 0.6, MinTokensToKeep: 3},
		{Temperature: 1, TopK: 3},
		{Temperature: 1, XTCProbability: 0.5, XTCThreshold: 0.1},
		{Temperature: 1, XTCProbability: 1, XTCThreshold: 0.05, XTCSpecialTokens: []int{0}},
		{Temperature: 0.8, TopP: 0.9, MinP: 0.05, TopK: 5, XTCProbability: 0.3, XTCThreshold: 0.1},
	}
	for i, p := range cases {
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			logits := randomLogits(r, 10)
			p.Seed = seed(uint64(100 + i))
			want := expected(p, logits)
			counts := draw(t, p, logits, draws)
			if pv := chiSquareP(t, counts, want); pv <= 0.001 {
				t.Errorf("params %+v: chi-square p = %g\nwant %v\ngot  %v", p, pv, want, counts)
			}
		})
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
	s, err := New(p, len(logits))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	x := logitsArray(logits)
	defer x.Free()
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
		s, err := New(Params{Temperature: 1, TopP: 0.95, Seed: seed(sd)}, len(logits))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Free()
		x := logitsArray(logits)
		defer x.Free()
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
	v := len(logits) // 34: two mask words
	mask := []int32{0, 1 << 1}
	s, err := New(Params{Temperature: 1, Seed: seed(9)}, v)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	x := logitsArray(logits)
	defer x.Free()
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
	_, err = s.Sample(x, nil, []int32{0, ^int32(3)})
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
	s, err := New(p, len(logits))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	x := logitsArray(logits)
	defer x.Free()
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
	s, err := New(Params{FrequencyPenalty: 0.5, Logprobs: true}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	x := logitsArray(logits)
	defer x.Free()
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

func BenchmarkStepVocab262k(b *testing.B) {
	const v = 262144
	r := rand.New(rand.NewPCG(5, 6))
	logits := randomLogits(r, v)
	x := logitsArray(logits)
	defer x.Free()
	hist := make([]int32, 64)
	for i := range hist {
		hist[i] = int32(r.IntN(v))
	}
	s, err := New(Params{
		Temperature: 0.8, TopP: 0.9, MinP: 0.05, MinTokensToKeep: 2, TopK: 40,
		XTCProbability: 0.5, XTCThreshold: 0.1, RepetitionPenalty: 1.1,
		PresencePenalty: 0.2, FrequencyPenalty: 0.2, LogitBias: map[int]float64{5: 1},
		Seed: seed(1), Logprobs: true, TopLogprobs: 5,
	}, v)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Free()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Sample(x, hist, nil); err != nil {
			b.Fatal(err)
		}
	}
}
