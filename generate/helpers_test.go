package generate_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
)

const fixtures = "../model/testdata"

// allFixtures are the model fixtures with HF goldens (tools/oracle).
var allFixtures = []string{"llama3", "qwen3", "qwen3_moe", "gemma4_dense", "gemma4_kv", "gemma4_moe", "gemma4_ple"}

// golden is the part of a fixture's golden.json these tests read.
type golden struct {
	Prompt     []int32 `json:"prompt"`
	GreedyF32  []int32 `json:"greedy_f32"`
	GreedyBF16 []int32 `json:"greedy_bf16"`
}

func readGolden(t testing.TB, name string) golden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtures, name, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// loadModel loads a fixture folder (or any model folder) onto be (nil:
// the default backend) and wraps it for generate; the model is closed at
// the end of the test.
func loadModel(t testing.TB, dir string, be tensor.Backend) generate.Model {
	t.Helper()
	m, err := model.Load(dir, &model.LoadOptions{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return generate.Wrap(m, m.Info().Vocab)
}

// collect runs a generation to the end and returns its tokens, stats and
// error.
func collect(t testing.TB, m generate.Model, prompt []int32, o *generate.Options) ([]int32, generate.Stats, error) {
	t.Helper()
	s, err := generate.Generate(context.Background(), m, prompt, o)
	if err != nil {
		return nil, generate.Stats{}, err
	}
	defer s.Close()
	var out []int32
	for tok, err := range s.Tokens() {
		if err != nil {
			return out, s.Stats(), err
		}
		if tok.Index != len(out) {
			t.Errorf("token index %d, want %d", tok.Index, len(out))
		}
		out = append(out, tok.ID)
	}
	return out, s.Stats(), nil
}

// countingModel counts forward passes and their tokens.
type countingModel struct {
	generate.Model
	forwards, tokens int
	onForward        func(n int)
}

func (c *countingModel) Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error) {
	c.forwards++
	c.tokens += ids.Dim(1)
	if c.onForward != nil {
		c.onForward(c.forwards)
	}
	return c.Model.Forward(ids, caches)
}

func firstDiff(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
