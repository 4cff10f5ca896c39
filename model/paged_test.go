package model_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// pagedFixtures are every fixture architecture of testdata.
var pagedFixtures = []string{"llama3", "qwen3", "qwen3_moe", "gemma4_dense", "gemma4_kv", "gemma4_moe", "gemma4_ple"}

// quantizedKinds returns the quantized equivalent of each of the model's
// contiguous caches (the kinds MaybeQuantize converts them to), for runs
// with quantized KV from the first token.
func quantizedKinds(t *testing.T, m model.Model, groupSize, bits int) []kv.Cache {
	t.Helper()
	caches := m.MakeCaches()
	for i, c := range caches {
		var q kv.Cache
		var err error
		switch c := c.(type) {
		case nil:
			continue
		case *kv.KVCache:
			q, err = c.ToQuantized(groupSize, bits)
		case *kv.RotatingKVCache:
			q, err = c.ToQuantized(groupSize, bits)
		default:
			t.Fatalf("layer %d: no quantized form of a %T", i, c)
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Free()
		caches[i] = q
	}
	return caches
}

// pagedLike returns a pool laid out like the contiguous caches (one paged
// layer per cache, of the same kind) and one sequence's caches over it:
// the seam a batch generator uses to turn a model's MakeCaches into paged
// caches.
func pagedLike(t *testing.T, like []kv.Cache, blockSize int) (*kv.Pool, []kv.Cache) {
	t.Helper()
	specs, err := kv.LayerSpecs(like)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := kv.NewPool(kv.PoolConfig{BlockSize: blockSize, Blocks: 1024, Layers: specs})
	if err != nil {
		t.Fatal(err)
	}
	return pool, pool.NewCaches()
}

// decodeTrace runs prompt through caches in chunks, then greedy steps
// single tokens, and returns the chosen tokens (the one after the last
// step included) and the bytes of every forward's last-position logits.
func decodeTrace(t *testing.T, m model.Model, caches []kv.Cache, prompt []int32, chunk, steps int) (ids []int32, logits [][]byte) {
	t.Helper()
	var last int32
	run := func(part []int32) {
		sc := tensor.NewScope()
		defer sc.Close()
		h, err := m.Forward(ids2D(part), caches, nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Logits(tensor.SliceAxis(h, 1, len(part)-1, len(part)))
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, slices.Clone(l.Bytes()))
		last = int32(tensor.AsType(tensor.Argmax(l, -1, false), tensor.Int32).Int32s()[0])
	}
	for i := 0; i < len(prompt); i += chunk {
		run(prompt[i:min(i+chunk, len(prompt))])
	}
	for range steps {
		ids = append(ids, last)
		run([]int32{last})
	}
	return append(ids, last), logits
}

func sameTrace(t *testing.T, what string, idsA, idsB []int32, la, lb [][]byte) {
	t.Helper()
	if !slices.Equal(idsA, idsB) {
		t.Fatalf("%s: tokens differ:\n%v\n%v", what, idsA, idsB)
	}
	if len(la) != len(lb) {
		t.Fatalf("%s: %d vs %d logit rows", what, len(la), len(lb))
	}
	for i := range la {
		if !bytes.Equal(la[i], lb[i]) {
			t.Fatalf("%s: logits of step %d differ", what, i)
		}
	}
}

// pagedVsContiguous generates greedily with the contiguous caches like
// and with paged caches of the same kinds, and requires the same tokens
// and bit-identical logits at every step.
func pagedVsContiguous(t *testing.T, m model.Model, like []kv.Cache, prompt []int32, chunk, steps, blockSize int) {
	t.Helper()
	pool, paged := pagedLike(t, like, blockSize)
	defer pool.Free()
	idsC, lc := decodeTrace(t, m, like, prompt, chunk, steps)
	idsP, lp := decodeTrace(t, m, paged, prompt, chunk, steps)
	model.FreeCaches(paged)
	sameTrace(t, fmt.Sprintf("chunk %d, block size %d", chunk, blockSize), idsC, idsP, lc, lp)
	if st := pool.Stats(); st.Used != 0 {
		t.Fatalf("blocks still used after freeing the caches: %+v", st)
	}
}

// TestPagedBitExactFixtures: on every fixture architecture (Llama 3,
// Qwen3, Qwen3-MoE and each Gemma 4 variant: sliding and full layers,
// per-layer head dims, K=V, mixture of experts, per-layer inputs and
// KV-sharing layers that read their donor's paged KV), in float32 and
// bfloat16, greedy generation over paged caches gives the tokens and the
// bit-identical logits of the contiguous caches, for prefill chunk sizes
// that cross the fixtures' 8-token windows and block sizes 1, 4 and 16.
func TestPagedBitExactFixtures(t *testing.T) {
	for _, fx := range pagedFixtures {
		for _, form := range []string{"f32", "bf16"} {
			t.Run(fx+"/"+form, func(t *testing.T) {
				defer tensortest.NoLeaks(t)()
				g := readGolden(t, filepath.Join("testdata", fx))
				m, err := model.Load(filepath.Join("testdata", fx, form), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				for _, c := range []struct{ chunk, bs int }{{5, 4}, {len(g.Prompt), 16}, {3, 1}, {11, 16}} {
					like := m.MakeCaches()
					pagedVsContiguous(t, m, like, g.Prompt, c.chunk, 20, c.bs)
					model.FreeCaches(like)
				}
			})
		}
	}
}

// TestPagedBitExactQuantized: the same with affine-quantized KV (every
// layer, from the first token) on models whose head dims allow a group
// size: the demo Gemma 4 (head dim 64; sliding and full layers, so
// quantized rotating and quantized full caches) at 8 and 4 bits, and a
// random Llama (head dim 32) at group 32.
func TestPagedBitExactQuantized(t *testing.T) {
	dir, err := demo.Path()
	if err != nil {
		t.Fatal(err)
	}
	// a prompt crossing the demo's 128-token window
	prompt := func(n, vocab int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(7 + (i*37)%(vocab-7))
		}
		return p
	}
	t.Run("demo", func(t *testing.T) {
		defer tensortest.NoLeaks(t)()
		m, err := model.Load(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		for _, bits := range []int{8, 4} {
			like := quantizedKinds(t, m, 64, bits)
			pagedVsContiguous(t, m, like, prompt(300, m.Info().Vocab), 100, 12, 16)
			model.FreeCaches(like)
		}
		like := m.MakeCaches() // and plain, at a length past the window
		pagedVsContiguous(t, m, like, prompt(300, m.Info().Vocab), 100, 12, 16)
		model.FreeCaches(like)
	})
	t.Run("llama", func(t *testing.T) {
		defer tensortest.NoLeaks(t)()
		m, err := model.Load(writeRandomLlama(t, 0.05), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		for _, bits := range []int{8, 4} {
			like := quantizedKinds(t, m, 32, bits)
			pagedVsContiguous(t, m, like, prompt(40, m.Info().Vocab), 7, 12, 16)
			model.FreeCaches(like)
		}
	})
}

// TestPagedPrefixReuse: a second sequence adopting the blocks a first one
// registered for their common prefix generates what a contiguous cache
// holding the first sequence's keys and values for that prefix generates,
// bit for bit, and the first sequence is unaffected by the second's
// writes (its logits equal its contiguous twin's throughout).
func TestPagedPrefixReuse(t *testing.T) {
	for _, fx := range []string{"llama3", "qwen3"} {
		t.Run(fx, func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			g := readGolden(t, filepath.Join("testdata", fx))
			m, err := model.Load(filepath.Join("testdata", fx, "f32"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			const bs = 4
			twinA := m.MakeCaches()
			defer model.FreeCaches(twinA)
			pool, seqA := pagedLike(t, twinA, bs)
			defer pool.Free()
			defer model.FreeCaches(seqA)
			p := g.Prompt
			idsA, la := decodeTrace(t, m, seqA, p, 5, 0)
			idsT, lt := decodeTrace(t, m, twinA, p, 5, 0)
			sameTrace(t, "first prompt", idsA, idsT, la, lt)
			n, err := pool.RegisterPrefix(seqA, p)
			if err != nil || n != len(p)/bs*bs {
				t.Fatalf("registered %d tokens (%v), want %d", n, err, len(p)/bs*bs)
			}
			// B shares the first 14 tokens (3 whole blocks), then diverges
			q := append(slices.Clone(p[:14]), 3, 1, 4, 1, 5, 9, 2, 6)
			seqB := pool.NewCaches()
			defer model.FreeCaches(seqB)
			got, err := pool.AdoptPrefix(seqB, q, len(q)-1)
			if err != nil || got != 12 {
				t.Fatalf("adopted %d tokens (%v), want 12", got, err)
			}
			for i, c := range seqB {
				if c == nil {
					continue
				}
				a, b := seqA[i].(*kv.PagedCache).Table(), c.(*kv.PagedCache).Table()
				if !slices.Equal(a[:3], b) {
					t.Fatalf("layer %d: B's blocks %v are not A's first three %v", i, b, a[:3])
				}
			}
			for i, ls := range pool.Stats().Layers {
				if want := (len(p) + bs - 1) / bs; ls.Used != want {
					t.Fatalf("layer %d: %d blocks used after the adoption, want A's %d", i, ls.Used, want)
				}
			}
			// B's twin: A's contiguous caches cut back to the prefix
			twinB := make([]kv.Cache, len(twinA))
			for i, c := range twinA {
				if c != nil {
					twinB[i] = c.Clone()
					twinB[i].Trim(c.Offset() - got)
				}
			}
			defer model.FreeCaches(twinB)
			idsB, lb := decodeTrace(t, m, seqB, q[got:], 3, 10)
			idsTB, ltb := decodeTrace(t, m, twinB, q[got:], 3, 10)
			sameTrace(t, "adopting sequence", idsB, idsTB, lb, ltb)
			// A goes on, unaffected by B's writes into its own blocks
			next := idsA[len(idsA)-1]
			idsA, la = decodeTrace(t, m, seqA, []int32{next}, 1, 10)
			idsT, lt = decodeTrace(t, m, twinA, []int32{next}, 1, 10)
			sameTrace(t, "first sequence after the second", idsA, idsT, la, lt)
		})
	}
}
