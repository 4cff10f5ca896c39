package generate_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestMLXBatchDrift measures, on the MLX backend, how far batched rows
// drift from their solo runs: MLX's kernels choose their reduction order
// by shape, so a row's logits in a batch need not equal its logits alone
// (no invariance is claimed there). Greedy rows with logprobs, joining at
// random steps, contiguous and over a paged pool, on every fixture in
// float32 and bfloat16; it logs the rows whose tokens diverge and the
// largest logprob difference over the tokens both runs share, and fails
// only when that difference is beyond what rounding explains (1e-2 in
// float32, 0.25 in bfloat16) or a row does not finish.
func TestMLXBatchDrift(t *testing.T) {
	be := mlxtest.UseAsDefault(t)
	for _, name := range allFixtures {
		for _, dt := range []string{"f32", "bf16"} {
			for _, paged := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/paged=%v", name, dt, paged), func(t *testing.T) {
					m := loadModel(t, filepath.Join(fixtures, name, dt), be)
					defer tensortest.NoLeaks(t)()
					r := rand.New(rand.NewPCG(8, uint64(len(name))))
					reqs := make([]request, 8)
					for i := range reqs {
						reqs[i] = request{prompt: randomIDs(r, m.VocabSize(), 4+r.IntN(30)), join: r.IntN(6),
							o: generate.Options{MaxTokens: 10, Backend: be, Sampler: sampler.Params{Logprobs: true}}}
					}
					bo := generate.BatchOptions{MaxRows: 4, TokenBudget: 64, Backend: be}
					if paged {
						pool := poolFor(t, m, 16, 64)
						defer pool.Free()
						bo.Pool = pool
					}
					got, _ := runBatch(t, m, reqs, bo)
					diverged, worst := 0, 0.0
					for i, q := range reqs {
						want := runSolo(t, m, q.prompt, q.o)
						n := min(len(got[i].ids), len(want.ids))
						k := 0
						for k < n && got[i].ids[k] == want.ids[k] {
							d := math.Abs(float64(math.Float32frombits(got[i].lps[k])) - float64(math.Float32frombits(want.lps[k])))
							worst = max(worst, d)
							k++
						}
						if k < n || len(got[i].ids) != len(want.ids) {
							diverged++
						}
					}
					t.Logf("MLX drift: %d of %d rows diverge from solo; max |Δ logprob| on shared tokens %.3g", diverged, len(reqs), worst)
					if bound := map[string]float64{"f32": 1e-2, "bf16": 0.25}[dt]; !(worst <= bound) {
						t.Errorf("logprobs drift %.3g from solo, beyond %g", worst, bound)
					}
				})
			}
		}
	}
}
