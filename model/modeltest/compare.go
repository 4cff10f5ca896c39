package modeltest

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// LastLogits runs the prompt through fresh caches and returns the logits
// at its last position as float32.
func LastLogits(t testing.TB, m model.Model, ids []int32) []float32 {
	t.Helper()
	sc := tensor.NewScope()
	defer sc.Close()
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	raw := make([]byte, 4*len(ids))
	for i, v := range ids {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	h, err := m.Forward(tensor.FromBytes(raw, []int{1, len(ids)}, tensor.Int32), caches, nil)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := m.Logits(tensor.SliceAxis(h, 1, len(ids)-1, len(ids)))
	if err != nil {
		t.Fatal(err)
	}
	b := tensor.AsType(lg, tensor.Float32).Bytes()
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// Agree returns how many leading tokens got and want share, and the first
// step at which the reference's top two logits were closer than tie
// (len(want) if none): before that step, a different argmax is a real
// divergence.
func Agree(got, want []int32, gaps []float64, tie float64) (same, firstTie int) {
	for same < len(got) && same < len(want) && got[same] == want[same] {
		same++
	}
	firstTie = len(want)
	for i, g := range gaps {
		if g < tie {
			firstTie = i
			break
		}
	}
	return same, firstTie
}

// RefGaps returns the top-2 logit gap of m before each token of seq
// (fed after prompt): where a greedy reference is a near-tie.
func RefGaps(t testing.TB, m model.Model, prompt, seq []int32) []float64 {
	t.Helper()
	gaps := make([]float64, len(seq))
	ids := append([]int32(nil), prompt...)
	for i := range seq {
		lg := LastLogits(t, m, ids)
		a, b := math.Inf(-1), math.Inf(-1)
		for _, x := range lg {
			v := float64(x)
			if v > a {
				a, b = v, a
			} else if v > b {
				b = v
			}
		}
		gaps[i] = a - b
		ids = append(ids, seq[i])
	}
	return gaps
}

// ForcedArgmax feeds prompt and then seq one token at a time through
// fresh caches (teacher forcing) and returns the argmax before each token
// of seq: how the model would continue the reference's own text at every
// step, so one early near-tie does not end the comparison.
func ForcedArgmax(t testing.TB, m model.Model, prompt, seq []int32) []int32 {
	t.Helper()
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	out := make([]int32, len(seq))
	next := prompt
	for i := range seq {
		func() {
			sc := tensor.NewScope()
			defer sc.Close()
			h, err := m.Forward(tensor.FromInt32(next, []int{1, len(next)}), caches, nil)
			if err != nil {
				t.Fatal(err)
			}
			lg, err := m.Logits(tensor.SliceAxis(h, 1, len(next)-1, len(next)))
			if err != nil {
				t.Fatal(err)
			}
			out[i] = tensor.AsType(tensor.Argmax(lg, -1, false), tensor.Int32).Int32s()[0]
		}()
		next = seq[i : i+1]
	}
	return out
}

// CheckForced compares teacher-forced argmaxes with the reference's
// greedy tokens at every step whose reference top-2 gap is at least tol,
// reporting each disagreement; it returns how many steps were compared.
func CheckForced(t testing.TB, what string, got, want []int32, gaps []float64, tol float64) int {
	t.Helper()
	n := 0
	for i := range want {
		if gaps[i] < tol {
			continue
		}
		n++
		if got[i] != want[i] {
			t.Errorf("%s: step %d (reference gap %.3f): argmax %d, reference %d", what, i, gaps[i], got[i], want[i])
		}
	}
	return n
}
