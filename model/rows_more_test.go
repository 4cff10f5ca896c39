package model_test

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestNewArchitecturesBatchedRows: a batched pass through kv.Rows (what
// the batch generator sends) gives each row the logits of that row's
// lone pass, for a generic sliding-window model, the Qwen3.5 hybrid
// (recurrent rows) and DeepSeek-V3's latent attention: two sequences at
// different offsets, prefilled alone, then stepped together with
// unequal chunks.
func TestNewArchitecturesBatchedRows(t *testing.T) {
	for _, dir := range []string{"generic_gemma3", "qwen3_5", "deepseek_v3"} {
		t.Run(dir, func(t *testing.T) {
			g := readGolden(t, filepath.Join("testdata", dir))
			m, err := model.Load(filepath.Join("testdata", dir, "f32"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			prefix := [][]int32{g.Prompt[:10], g.Prompt[3:17]}
			next := [][]int32{g.Prompt[10:13], g.Prompt[17:18]}
			run := func(caches []kv.Cache, ids []int32) {
				sc := tensor.NewScope()
				defer sc.Close()
				if _, err := m.Forward(ids2D(ids), caches, nil); err != nil {
					t.Fatal(err)
				}
			}
			solo := make([][]float32, 2)
			rows := make([][]kv.Cache, 2)
			for r := range 2 {
				rows[r] = m.MakeCaches()
				defer model.FreeCaches(rows[r])
				run(rows[r], prefix[r])
				alone := m.MakeCaches()
				run(alone, prefix[r])
				solo[r] = prefillLogitsFrom(t, m, alone, next[r])
				model.FreeCaches(alone)
			}
			views := make([]kv.Cache, len(rows[0]))
			for l := range views {
				views[l] = kv.NewRows([]kv.Cache{rows[0][l], rows[1][l]}, []int{len(next[0]), len(next[1])})
			}
			batched := prefillLogitsFrom(t, m, views, append(append([]int32(nil), next[0]...), next[1]...))
			v := m.Info().Vocab
			got := [][]float32{batched[:len(next[0])*v], batched[len(next[0])*v:]}
			for r := range 2 {
				worst := 0.0
				for i := range solo[r] {
					worst = math.Max(worst, math.Abs(float64(got[r][i]-solo[r][i])))
				}
				if worst > 1e-4 {
					t.Errorf("row %d: batched logits differ from its lone pass by %.3g", r, worst)
				}
			}
		})
	}
}

// prefillLogitsFrom runs ids through caches in one pass and returns the
// flat logits.
func prefillLogitsFrom(t *testing.T, m model.Model, caches []kv.Cache, ids []int32) []float32 {
	t.Helper()
	sc := tensor.NewScope()
	defer sc.Close()
	h, err := m.Forward(ids2D(ids), caches, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Logits(h)
	if err != nil {
		t.Fatal(err)
	}
	return f32s(t, l)
}
