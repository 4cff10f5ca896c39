package generate_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestBatchInvariance is the randomized schedule: random prompts,
// sampling parameters, seeds, prefill chunk sizes (1, 7, 2048), join
// steps, cancels, batch widths and token budgets (which re-chunk joining
// prompts), over every fixture in float32 and bfloat16: 224 rows. Every row's tokens and logprobs equal its solo Generate bit
// for bit (a cancelled row's, up to where it was cancelled).
func TestBatchInvariance(t *testing.T) {
	rowsPer := 16
	if testing.Short() {
		rowsPer = 6
	}
	total := 0
	for _, name := range allFixtures {
		for _, dt := range []string{"f32", "bf16"} {
			t.Run(fmt.Sprintf("%s/%s", name, dt), func(t *testing.T) {
				defer tensortest.NoLeaks(t)()
				mm, err := model.Load(filepath.Join(fixtures, name, dt), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer mm.Close()
				m := generate.Wrap(mm, mm.Info().Vocab)
				r := rand.New(rand.NewPCG(uint64(total), 99))
				reqs := make([]request, rowsPer)
				for i := range reqs {
					reqs[i] = randomRequest(r, m.VocabSize(), nil)
					reqs[i].join = r.IntN(12)
					if r.IntN(6) == 0 {
						reqs[i].cancelAt = reqs[i].join + 1 + r.IntN(6)
					}
				}
				bo := generate.BatchOptions{MaxRows: 1 + r.IntN(6)}
				bo.TokenBudget = bo.MaxRows + r.IntN(40)
				bo.PrefillRows = r.IntN(3) // 0: joiners fill the budget; 1, 2: at most that many per pass
				bo.FillPrefill = r.IntN(2) == 0
				bo.PrefillAlone = r.IntN(4) // 0: decoding rows in every pass
				got, st := runBatch(t, m, reqs, bo)
				for i, q := range reqs {
					sameAsSolo(t, name, i, got[i], runSolo(t, m, q.prompt, q.o))
				}
				if st.MaxRows < min(2, bo.MaxRows) {
					t.Errorf("the schedule never batched rows (max %d)", st.MaxRows)
				}
				t.Logf("%d rows, max batch %d of %d, budget %d, joiners %d: %d steps, %d tokens", len(reqs), st.MaxRows, bo.MaxRows, bo.TokenBudget, bo.PrefillRows, st.Steps, st.Tokens)
			})
			total += rowsPer
		}
	}
	t.Logf("%d rows in all", total)
}
