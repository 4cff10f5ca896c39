package generate_test

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/mlxffi"
	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// The MLX backend is a StepRunner, so the loop batches its steps.
var _ generate.StepRunner = (*mlxffi.Backend)(nil)

// runnerBackend is the default backend with a Run that records whether
// code runs inside it.
type runnerBackend struct {
	tensor.Backend
	depth, runs int
}

func (r *runnerBackend) Run(f func()) {
	r.runs++
	r.depth++
	defer func() { r.depth-- }()
	f()
}

// insideModel records whether each forward pass and logits call ran
// inside the runner's Run, and fails the forward pass failAt (0: never).
type insideModel struct {
	generate.Model
	r               *runnerBackend
	calls, outside  int
	forwards, fails int
	failAt          int
}

func (m *insideModel) note() {
	m.calls++
	if m.r.depth == 0 {
		m.outside++
	}
}

func (m *insideModel) Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error) {
	m.note()
	m.forwards++
	if m.forwards == m.failAt {
		a := tensor.Zeros([]int{2, 3}, tensor.Float32)
		defer a.Free()
		tensor.Matmul(a, a) // a shape error: panics with *tensor.Error
	}
	return m.Model.Forward(ids, caches)
}

func (m *insideModel) Logits(h *tensor.Array) (*tensor.Array, error) {
	m.note()
	return m.Model.Logits(h)
}

// outsideGrammar is allowGrammar that records mask fills made inside Run
// (they should not be: host work need not hold the backend).
type outsideGrammar struct {
	allowGrammar
	r      *runnerBackend
	inside int
}

func (g *outsideGrammar) FillNextTokenBitmask(mask []int32) error {
	if g.r.depth > 0 {
		g.inside++
	}
	return g.allowGrammar.FillNextTokenBitmask(mask)
}

// TestStepRunnerRunsSteps: on a StepRunner backend every prefill chunk's
// and decode step's forward pass and logits run inside Run, pipelined,
// eager and with a grammar (whose mask is filled outside Run), and the
// tokens are those the plain backend gives.
func TestStepRunnerRunsSteps(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	g := readGolden(t, "llama3")
	base := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	for _, c := range []struct {
		name    string
		params  sampler.Params
		grammar bool
	}{
		{"pipelined", sampler.Params{}, false},
		{"eager", sampler.Params{RepetitionPenalty: 1.3}, false},
		{"grammar", sampler.Params{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := func(be tensor.Backend, gr generate.Grammar) *generate.Options {
				return &generate.Options{MaxTokens: 8, PrefillChunkSize: 4, Sampler: c.params, Backend: be, Grammar: gr}
			}
			var gr0 generate.Grammar
			if c.grammar {
				gr0 = &allowGrammar{allowed: []int{3, 77, 200}, n: 100}
			}
			want, _, err := collect(t, base, g.Prompt, opts(nil, gr0))
			if err != nil {
				t.Fatal(err)
			}
			r := &runnerBackend{Backend: tensor.Default()}
			m := &insideModel{Model: base, r: r}
			var gr *outsideGrammar
			var gr1 generate.Grammar
			if c.grammar {
				gr = &outsideGrammar{allowGrammar: allowGrammar{allowed: []int{3, 77, 200}, n: 100}, r: r}
				gr1 = gr
			}
			got, st, err := collect(t, m, g.Prompt, opts(r, gr1))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("tokens %v through Run, %v without", got, want)
			}
			if m.outside != 0 || m.calls == 0 {
				t.Errorf("%d of %d model calls outside Run", m.outside, m.calls)
			}
			if gr != nil && gr.inside != 0 {
				t.Errorf("%d grammar mask fills inside Run", gr.inside)
			}
			// one Run per prefill chunk, one or two per decode step and one
			// per read-back: far fewer than the ops they batch
			if r.runs < st.DecodeSteps+1 || r.runs > 3*st.DecodeSteps+len(g.Prompt) {
				t.Errorf("%d Runs for %d decode steps", r.runs, st.DecodeSteps)
			}
		})
	}
}

// TestStepRunnerFailure: a tensor panic inside a Run during prefill or
// decode ends the generation with that error and leaks nothing.
func TestStepRunnerFailure(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	g := readGolden(t, "llama3")
	base := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	for _, failAt := range []int{1, 4, 6} { // prefill chunk, decode steps
		for _, pen := range []float64{0, 1.3} { // pipelined, eager
			r := &runnerBackend{Backend: tensor.Default()}
			m := &insideModel{Model: base, r: r, failAt: failAt}
			out, st, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: 8, PrefillChunkSize: 8, Backend: r,
				Sampler: sampler.Params{RepetitionPenalty: pen}})
			if !errors.Is(err, tensor.ErrShape) || st.StopReason != generate.StopError {
				t.Errorf("fail at forward %d, penalty %v: err %v, stop %q after %d tokens", failAt, pen, err, st.StopReason, len(out))
			}
			if r.depth != 0 {
				t.Errorf("Run depth %d after the failure", r.depth)
			}
		}
	}
}

// TestMLXStepRunnerFailure: on MLX, a failure inside a decode step's Run
// surfaces as the generation's error, and MLX keeps working afterwards
// (the greedy output of a following generation is HF's).
func TestMLXStepRunnerFailure(t *testing.T) {
	be := mlxtest.UseAsDefault(t)
	t.Cleanup(tensortest.NoLeaks(t))
	g := readGolden(t, "llama3")
	base := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), be)
	m := &insideModel{Model: base, r: &runnerBackend{}, failAt: 4}
	_, st, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: 8, Backend: be})
	var te *tensor.Error
	if !errors.As(err, &te) || !errors.Is(err, tensor.ErrShape) || st.StopReason != generate.StopError {
		t.Fatalf("err %v (stop %q), want the forward pass's *tensor.Error", err, st.StopReason)
	}
	out, _, err := collect(t, base, g.Prompt, &generate.Options{MaxTokens: len(g.GreedyF32), Backend: be})
	if err != nil || !slices.Equal(out, g.GreedyF32) {
		t.Fatalf("after the failure: %v, %v (want %v)", out, err, g.GreedyF32)
	}
}
