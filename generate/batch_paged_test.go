package generate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// poolFor makes a pool laid out like m's own caches (kv.LayerSpecs of
// its MakeCaches), blocks blocks per layer of bs slots.
func poolFor(t *testing.T, m generate.Model, bs, blocks int) *kv.Pool {
	t.Helper()
	specs, err := generate.PoolLayout(m)
	if err != nil {
		t.Fatal(err)
	}
	p, err := kv.NewPool(kv.PoolConfig{BlockSize: bs, Blocks: blocks, Layers: specs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBatchPagedInvariance is the randomized schedule of
// TestBatchInvariance over a paged pool: rows share prompt prefixes (so
// later rows start from blocks earlier ones computed: automatic prefix
// caching), the pool holds only a few rows' reservations (so rows wait
// for blocks), block sizes vary. Every row's tokens and logprobs equal
// its solo Generate over plain contiguous caches, bit for bit, on every
// fixture in float32 and bfloat16; once every row is done no block is
// held or reserved.
func TestBatchPagedInvariance(t *testing.T) {
	rowsPer := 12
	if testing.Short() {
		rowsPer = 5
	}
	total, adopted := 0, 0
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
				r := rand.New(rand.NewPCG(uint64(total), 7))
				prefixes := make([][]int32, 3)
				for i := range prefixes {
					prefixes[i] = randomIDs(r, m.VocabSize(), 8+r.IntN(30))
				}
				reqs := make([]request, rowsPer)
				for i := range reqs {
					reqs[i] = randomRequest(r, m.VocabSize(), nil)
					if r.IntN(4) > 0 {
						pre := prefixes[r.IntN(len(prefixes))]
						reqs[i].prompt = append(append([]int32(nil), pre...), reqs[i].prompt[:1+r.IntN(len(reqs[i].prompt))]...)
					}
					reqs[i].join = r.IntN(12)
					if r.IntN(6) == 0 {
						reqs[i].cancelAt = reqs[i].join + 1 + r.IntN(6)
					}
				}
				bs := []int{1, 4, 16}[r.IntN(3)]
				bo := generate.BatchOptions{MaxRows: 2 + r.IntN(5)}
				bo.TokenBudget = bo.MaxRows + r.IntN(40)
				bo.PrefillRows = r.IntN(3) // 0: joiners fill the budget; 1, 2: at most that many per pass
				bo.FillPrefill = r.IntN(2) == 0
				bo.PrefillAlone = r.IntN(4) // 0: decoding rows in every pass
				// room for about three of the longest rows at once
				longest := 0
				for _, q := range reqs {
					longest = max(longest, len(q.prompt)+q.o.MaxTokens)
				}
				pool := poolFor(t, m, bs, 3*((longest+bs-1)/bs)+1)
				defer pool.Free()
				bo.Pool = pool
				got, st := runBatch(t, m, reqs, bo)
				for i, q := range reqs {
					sameAsSolo(t, name, i, got[i], runSolo(t, m, q.prompt, q.o))
				}
				if st.BlocksReserved != 0 || st.Blocks.Used != 0 {
					t.Errorf("after the batch: %d blocks reserved, %d used", st.BlocksReserved, st.Blocks.Used)
				}
				if st.PeakBlocks == 0 || st.PeakBlocks > st.Blocks.Capacity {
					t.Errorf("peak %d blocks of %d", st.PeakBlocks, st.Blocks.Capacity)
				}
				adopted += st.CachedTokens
				t.Logf("%d rows, block size %d, max batch %d of %d: %d steps, peak %d of %d blocks, %d prompt tokens from the prefix cache",
					len(reqs), bs, st.MaxRows, bo.MaxRows, st.Steps, st.PeakBlocks, st.Blocks.Capacity, st.CachedTokens)
			})
			total += rowsPer
		}
	}
	if adopted == 0 {
		t.Error("no row ever started from cached prefix blocks")
	}
}

func randomIDs(r *rand.Rand, vocab, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(vocab))
	}
	return out
}

// TestBatchPagedAdmission: admission reserves a row's blocks to the end
// (prompt + MaxTokens) and admits rows first come, first served while
// they fit; a request that can never fit is refused with the numbers;
// rows without a token cap or asking for KV quantization are refused.
func TestBatchPagedAdmission(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	defer tensortest.NoLeaks(t)()
	const bs = 4
	// each request: 6 prompt tokens + 6 generated = 12 tokens = 3 blocks
	pool := poolFor(t, m, bs, 7) // room for two rows (6 blocks), not three
	defer pool.Free()
	b, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: 8, TokenBudget: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(9, 9))
	var rows []*generate.Row
	for range 5 {
		row, err := b.Add(context.Background(), randomIDs(r, m.VocabSize(), 6), &generate.Options{MaxTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	_, err = b.Add(context.Background(), randomIDs(r, m.VocabSize(), 20), &generate.Options{MaxTokens: 9})
	var fe *generate.FitError
	if !errors.As(err, &fe) || !errors.Is(err, generate.ErrNeverFits) {
		t.Fatalf("a 29-token request on 7 blocks of 4: %v", err)
	}
	if fe.Tokens != 29 || fe.Need != 8 || fe.Capacity != 7 || fe.BlockSize != bs {
		t.Errorf("fit error numbers: %+v", *fe)
	}
	if _, err := b.Add(context.Background(), []int32{1, 2}, &generate.Options{MaxTokens: -1}); err == nil || !strings.Contains(err.Error(), "token cap") {
		t.Errorf("uncapped row over a pool: %v", err)
	}
	if _, err := b.Add(context.Background(), []int32{1, 2}, &generate.Options{KVBits: 8}); err == nil || !strings.Contains(err.Error(), "KV quantization") {
		t.Errorf("KV-quantized row over a pool: %v", err)
	}
	maxRunning := 0
	for steps := 0; !b.Idle(); steps++ {
		if steps > 1000 {
			t.Fatal("batch did not finish")
		}
		evs, err := b.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Err != nil {
				t.Fatalf("row %d: %v", ev.Row.ID, ev.Err)
			}
		}
		st := b.Stats()
		maxRunning = max(maxRunning, st.RowsRunning)
		if st.BlocksReserved > 2*3*pool.Layers() {
			t.Fatalf("step %d: %d blocks reserved, more than two rows' worth", steps, st.BlocksReserved)
		}
		for l, ls := range st.Blocks.Layers {
			if ls.Used > 6 {
				t.Fatalf("step %d: layer %d uses %d blocks, more than two rows hold", steps, l, ls.Used)
			}
		}
	}
	if maxRunning != 2 {
		t.Errorf("at most %d rows ran at once; the pool holds two", maxRunning)
	}
	for _, row := range rows {
		if s := row.Stats(); s.StopReason != generate.StopLength || s.GeneratedTokens != 6 {
			t.Errorf("row %d: %s after %d tokens", row.ID, s.StopReason, s.GeneratedTokens)
		}
	}
}
