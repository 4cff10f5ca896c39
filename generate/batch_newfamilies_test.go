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

// newFamilyFixtures are the Qwen3.5 / Qwen3-Next hybrids (a recurrent
// state per row in their linear-attention layers) and the MLA models
// (a latent cache whose keys and values differ in width; DSA's per-row
// top-k), each with a bf16 copy.
var newFamilyFixtures = []string{"qwen3_5", "qwen3_5_moe", "qwen3_next", "deepseek_v3", "glm_moe_dsa_h8"}

// TestBatchNewFamilies is TestBatchInvariance's randomized schedule
// (prompts, sampling, seeds, join steps, cancels, widths, token budgets)
// over contiguous caches and over a paged pool (prompts sharing prefixes,
// a pool holding about three rows, block sizes 1/4/16), for the new
// families in float32 and bfloat16: every row's tokens and logprobs equal
// its solo Generate bit for bit, and the pool ends with no block held or
// reserved. Over the pool the MLA models adopt cached prefix blocks; the
// hybrids cannot (a recurrent state is not kept per prefix block) and
// adopt none.
func TestBatchNewFamilies(t *testing.T) {
	rowsPer := 8
	if testing.Short() {
		rowsPer = 4
	}
	seed, mlaAdopted, mlaPaged := 0, 0, 0
	for _, name := range newFamilyFixtures {
		for _, dt := range []string{"f32", "bf16"} {
			for _, paged := range []bool{false, true} {
				seed++
				t.Run(fmt.Sprintf("%s/%s/paged=%v", name, dt, paged), func(t *testing.T) {
					defer tensortest.NoLeaks(t)()
					mm, err := model.Load(filepath.Join(fixtures, name, dt), nil)
					if err != nil {
						t.Fatal(err)
					}
					defer mm.Close()
					m := generate.Wrap(mm, mm.Info().Vocab)
					r := rand.New(rand.NewPCG(uint64(seed), 22))
					prefixes := [][]int32{randomIDs(r, m.VocabSize(), 8+r.IntN(20)), randomIDs(r, m.VocabSize(), 8+r.IntN(20))}
					reqs := make([]request, rowsPer)
					for i := range reqs {
						reqs[i] = randomRequest(r, m.VocabSize(), nil)
						if paged && r.IntN(3) > 0 {
							pre := prefixes[r.IntN(len(prefixes))]
							reqs[i].prompt = append(append([]int32(nil), pre...), reqs[i].prompt[:1+r.IntN(len(reqs[i].prompt))]...)
						}
						reqs[i].join = r.IntN(10)
						if r.IntN(6) == 0 {
							reqs[i].cancelAt = reqs[i].join + 1 + r.IntN(6)
						}
					}
					bo := generate.BatchOptions{MaxRows: 2 + r.IntN(4)}
					bo.TokenBudget = bo.MaxRows + r.IntN(40)
					bs := []int{1, 4, 16}[r.IntN(3)]
					if paged {
						longest := 0
						for _, q := range reqs {
							longest = max(longest, len(q.prompt)+q.o.MaxTokens)
						}
						pool := poolFor(t, m, bs, 3*((longest+bs-1)/bs)+1)
						defer pool.Free()
						bo.Pool = pool
					}
					got, st := runBatch(t, m, reqs, bo)
					for i, q := range reqs {
						sameAsSolo(t, name, i, got[i], runSolo(t, m, q.prompt, q.o))
					}
					if st.MaxRows < 2 {
						t.Errorf("the schedule never batched rows (max %d)", st.MaxRows)
					}
					if paged {
						if st.BlocksReserved != 0 || st.Blocks.Used != 0 {
							t.Errorf("after the batch: %d blocks reserved, %d used", st.BlocksReserved, st.Blocks.Used)
						}
						hybrid := name[:4] == "qwen"
						if hybrid && st.CachedTokens != 0 {
							t.Errorf("a hybrid adopted %d prompt tokens from prefix blocks without their recurrent state", st.CachedTokens)
						}
						if !hybrid {
							mlaAdopted += st.CachedTokens
							mlaPaged++
						}
						t.Logf("block size %d: peak %d of %d blocks, %d prompt tokens from the prefix cache", bs, st.PeakBlocks, st.Blocks.Capacity, st.CachedTokens)
					}
					t.Logf("%d rows, max batch %d of %d, budget %d: %d steps, %d tokens", len(reqs), st.MaxRows, bo.MaxRows, bo.TokenBudget, st.Steps, st.Tokens)
				})
			}
		}
	}
	if mlaPaged > 0 && mlaAdopted == 0 {
		t.Error("no MLA row ever started from cached prefix blocks")
	}
}
