package generate_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// turboPoolFor makes a pool laid out like m's caches with every layer
// stored as TurboQuant codes of spec (kv.TurboLayerSpecs).
func turboPoolFor(t *testing.T, m generate.Model, spec kv.TurboSpec, bs, blocks int) *kv.Pool {
	t.Helper()
	specs, err := generate.PoolLayout(m)
	if err != nil {
		t.Fatal(err)
	}
	if specs, err = kv.TurboLayerSpecs(specs, spec); err != nil {
		t.Fatal(err)
	}
	p, err := kv.NewPool(kv.PoolConfig{BlockSize: bs, Blocks: blocks, Layers: specs})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// turboCaches are m's contiguous caches converted, empty, to TurboQuant:
// a solo run over them stores every token as TurboQuant codes from the
// first one, as a TurboQuant pool does.
func turboCaches(t *testing.T, m generate.Model, spec kv.TurboSpec) []kv.Cache {
	t.Helper()
	cs := m.MakeCaches()
	for i, c := range cs {
		var tc kv.Cache
		var err error
		switch c := c.(type) {
		case *kv.KVCache:
			tc, err = c.ToTurbo(spec)
		case *kv.RotatingKVCache:
			tc, err = c.ToTurbo(spec)
		default:
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Free()
		cs[i] = tc
	}
	return cs
}

// TestBatchTurboInvariance is TestBatchPagedInvariance over a TurboQuant
// pool: on models of head dim 64 (the demo model, whose sliding-window
// layers wrap on the longer prompts, and a small random Llama), rows with
// shared prompt prefixes join at random steps of a batch whose pool
// stores k8v3 (and k4v2, turbo-qjl) codes, and every row's tokens and
// logprobs equal its solo Generate over contiguous TurboQuant caches, bit
// for bit; prefix blocks are reused and no block is held afterwards.
func TestBatchTurboInvariance(t *testing.T) {
	rowsPer := 8
	if testing.Short() {
		rowsPer = 4
	}
	demoDir, err := demo.Dir(demo.BF16)
	if err != nil {
		t.Fatal(err)
	}
	llamaDir, _ := writeLlama(t, llamaShape{Hidden: 128, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 256, Vocab: 256}, 0)
	cases := []struct {
		name string
		dir  string
		spec kv.TurboSpec
	}{
		{"demo/k8v3", demoDir, kv.DefaultTurbo},
		{"llama/k8v3", llamaDir, kv.DefaultTurbo},
		{"llama/k4v2", llamaDir, kv.TurboSpec{KeyBits: 4, ValueBits: 2}},
		{"demo/qjl", demoDir, kv.DefaultTurboQJL},
	}
	adopted := 0
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			mm, err := model.Load(c.dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer mm.Close()
			m := generate.Wrap(mm, mm.Info().Vocab)
			r := rand.New(rand.NewPCG(uint64(ci), 19))
			prefixes := make([][]int32, 2)
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
				reqs[i].join = r.IntN(8)
			}
			// one prompt past the demo model's 128-token window
			reqs[0].prompt = randomIDs(r, m.VocabSize(), 140)
			bs := []int{1, 4, 16}[ci%3]
			bo := generate.BatchOptions{MaxRows: 2 + r.IntN(4)}
			bo.TokenBudget = bo.MaxRows + r.IntN(40)
			longest := 0
			for _, q := range reqs {
				longest = max(longest, len(q.prompt)+q.o.MaxTokens)
			}
			pool := turboPoolFor(t, m, c.spec, bs, 3*((longest+bs-1)/bs)+1)
			defer pool.Free()
			bo.Pool = pool
			got, st := runBatch(t, m, reqs, bo)
			for i, q := range reqs {
				o := q.o
				o.Caches = turboCaches(t, m, c.spec)
				sameAsSolo(t, fmt.Sprintf("%s (%s)", c.name, c.spec), i, got[i], runSolo(t, m, q.prompt, o))
				for _, c := range o.Caches {
					if c != nil {
						c.Free()
					}
				}
			}
			if st.BlocksReserved != 0 || st.Blocks.Used != 0 {
				t.Errorf("after the batch: %d blocks reserved, %d used", st.BlocksReserved, st.Blocks.Used)
			}
			adopted += st.CachedTokens
			t.Logf("%d rows, block size %d, max batch %d: %d steps, peak %d of %d blocks, %d prompt tokens from the prefix cache",
				len(reqs), bs, bo.MaxRows, st.Steps, st.PeakBlocks, st.Blocks.Capacity, st.CachedTokens)
		})
	}
	if adopted == 0 {
		t.Error("no row ever started from cached prefix blocks")
	}
}
