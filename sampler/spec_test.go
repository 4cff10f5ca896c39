package sampler

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestDistribution: Distribution's logprobs are Step's (the chosen
// token's logprob matches), its probs at temperature > 0 are the
// temperature softmax of the top-k survivors (zero elsewhere, summing to
// one, matching the float64 model), and at temperature 0 they are one-hot
// on Step's argmax.
func TestDistribution(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(3, 5))
	const V = 40
	raw := make([]float32, V)
	x := make([]float64, V)
	for i := range raw {
		raw[i] = float32(r.NormFloat64() * 2)
		x[i] = float64(raw[i])
	}
	logits := tensor.FromFloat32(raw, []int{1, V}, tensor.Float32)
	defer logits.Free()
	hist := []int32{3, 7, 7}

	// temperature 0.7, top-k 5, repetition penalty 1.3
	p := Params{Temperature: 0.7, TopK: 5, RepetitionPenalty: 1.3, Seed: seed(1), Logprobs: true}
	s, err := New(p, V)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Free()
	lp, pr, err := s.Distribution(logits, hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	lps, probs := lp.Float32s(), pr.Float32s()
	tensor.Free(lp, pr)
	for _, id := range []int{3, 7} { // the penalty, as mlx-lm applies it
		if x[id] < 0 {
			x[id] *= 1.3
		} else {
			x[id] /= 1.3
		}
	}
	ref := logSoftmax(x)
	order := make([]int, V)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if ref[a] > ref[b] {
			return -1
		}
		return 1
	})
	top := order[:5]
	scaled := make([]float64, V)
	for i := range scaled {
		scaled[i] = math.Inf(-1)
	}
	for _, i := range top {
		scaled[i] = ref[i] / 0.7
	}
	want := logSoftmax(scaled)
	sum := 0.0
	for i := range V {
		sum += float64(probs[i])
		if math.Abs(float64(lps[i])-ref[i]) > 1e-5 {
			t.Errorf("logprob %d: %v, want %v", i, lps[i], ref[i])
		}
		if w := math.Exp(want[i]); math.Abs(float64(probs[i])-w) > 1e-5 {
			t.Errorf("prob %d: %v, want %v", i, probs[i], w)
		}
	}
	if math.Abs(sum-1) > 1e-5 {
		t.Errorf("probs sum to %v", sum)
	}
	res, err := s.Sample(logits, hist, nil)
	if err != nil {
		t.Fatal(err)
	}
	if probs[res.Token] == 0 || res.Logprob != lps[res.Token] {
		t.Errorf("Step drew %d (logprob %v), outside Distribution's support or with another logprob (%v)", res.Token, res.Logprob, lps[res.Token])
	}

	// temperature 0: one-hot on the argmax, with a mask
	g, err := New(Params{}, V)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	mask := make([]int32, (V+31)/32)
	for _, id := range []int{2, 9, 33} {
		mask[id/32] |= 1 << (id % 32)
	}
	lp, pr, err = g.Distribution(logits, nil, mask)
	if err != nil {
		t.Fatal(err)
	}
	probs = pr.Float32s()
	tensor.Free(lp, pr)
	res, err = g.Sample(logits, nil, mask)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range probs {
		if want := float32(0); i == res.Token {
			if v != 1 {
				t.Errorf("one-hot: prob %v at the argmax %d", v, i)
			}
		} else if v != want {
			t.Errorf("one-hot: prob %v at %d", v, i)
		}
	}
	wide := tensor.Zeros([]int{1, V + 1}, tensor.Float32)
	defer wide.Free()
	if _, _, err := g.Distribution(wide, nil, nil); err == nil {
		t.Error("logits of the wrong width accepted")
	}
}

// TestUniforms: the stream's uniforms are in [0, 1), a seed fixes them,
// and successive calls differ.
func TestUniforms(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	draw := func() ([]float64, []float64) {
		s, err := New(Params{Temperature: 1, Seed: seed(9)}, 10)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Free()
		a, err := s.Uniforms(50)
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Uniforms(50)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	a1, b1 := draw()
	a2, b2 := draw()
	if !slices.Equal(a1, a2) || !slices.Equal(b1, b2) || slices.Equal(a1, b1) {
		t.Errorf("uniforms: not reproducible or repeating")
	}
	for _, v := range append(a1, b1...) {
		if v < 0 || v >= 1 {
			t.Errorf("uniform %v outside [0, 1)", v)
		}
	}
}
