package generate_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/tensor"
)

// BenchmarkDecodeStepMLXvsCPU measures the time per decoded token through
// Generate on the CPU backend and on MLX, and their ratio, for models
// where the arithmetic is small so that what is measured is mostly host
// work per step (op dispatch, array handles, hand-offs to the MLX thread,
// the sampler and the read-back): "trivial" (a constant forward pass: the
// loop and the backend alone), "llama3" (the 2-layer float32 parity
// fixture, hidden 64) and "demo" (the 5.8M-parameter bfloat16 Gemma 4
// demo model). Each generation decodes at most 64 tokens, so the context
// stays short; b.N is the number of tokens per backend. It skips with one
// line when libmlxc is not installed.
func BenchmarkDecodeStepMLXvsCPU(b *testing.B) {
	mlx := mlxtest.OpenOrSkip(b)
	cpu, err := tensor.Open("cpu")
	if err != nil {
		b.Fatal(err)
	}
	for _, mc := range []struct {
		name string
		dir  func() (string, error) // nil: the trivial model
	}{
		{"trivial", nil},
		{"llama3", func() (string, error) { return filepath.Join(fixtures, "llama3", "f32"), nil }},
		{"demo", demo.Path},
	} {
		b.Run(mc.name, func(b *testing.B) {
			var perTok [2]float64 // µs per decoded token: cpu, mlx
			for i, be := range []tensor.Backend{cpu, mlx} {
				perTok[i] = decodeMicros(b, be, mc.dir, b.N)
			}
			b.ReportMetric(perTok[0], "cpu-µs/token")
			b.ReportMetric(perTok[1], "mlx-µs/token")
			b.ReportMetric(perTok[1]/perTok[0], "mlx/cpu")
		})
	}
}

// decodeMicros loads the model onto be (as the default backend) and
// decodes n tokens in generations of at most 64, returning the decode
// time per token in microseconds (prefill and the first token excluded).
func decodeMicros(b *testing.B, be tensor.Backend, dir func() (string, error), n int) float64 {
	prev := tensor.Default()
	tensor.SetDefault(be)
	defer tensor.SetDefault(prev)
	var m generate.Model = trivialModel{vocab: 64}
	if dir != nil {
		d, err := dir()
		if err != nil {
			b.Fatal(err)
		}
		lm, err := model.Load(d, &model.LoadOptions{Backend: be})
		if err != nil {
			b.Fatal(err)
		}
		defer lm.Close()
		m = generate.Wrap(lm, lm.Info().Vocab)
	}
	prompt := []int32{2, 17, 30, 41, 5, 9, 12, 7}
	ms, toks := 0.0, 0
	for toks < n {
		k := min(64, n-toks)
		s, err := generate.Generate(context.Background(), m, prompt, &generate.Options{MaxTokens: k + 1, Backend: be})
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range s.Tokens() {
			if err != nil {
				b.Fatal(err)
			}
		}
		st := s.Stats()
		s.Close()
		ms += st.DecodeMs
		toks += st.GeneratedTokens - 1
	}
	return ms * 1000 / float64(toks)
}
