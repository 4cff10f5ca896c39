package model_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

var hybridFixtures = []string{"qwen3_5", "qwen3_5_moe", "qwen3_next"}

func TestQwen35Parity(t *testing.T) {
	for _, v := range hybridFixtures {
		t.Run(v, func(t *testing.T) { checkFixture(t, filepath.Join("testdata", v)) })
	}
}

// greedyFrom continues greedy decoding for n tokens from caches that have
// seen everything but last, feeding last first.
func greedyFrom(t *testing.T, m model.Model, caches []kv.Cache, last int32, n int) []int32 {
	t.Helper()
	var out []int32
	for range n {
		sc := tensor.NewScope()
		h, err := m.Forward(ids2D([]int32{last}), caches, nil)
		if err != nil {
			sc.Close()
			t.Fatal(err)
		}
		l, err := m.Logits(h)
		if err != nil {
			sc.Close()
			t.Fatal(err)
		}
		row := f32s(t, l)
		best := 0
		for j := range row {
			if row[j] > row[best] {
				best = j
			}
		}
		sc.Close()
		last = int32(best)
		out = append(out, last)
	}
	return out
}

// TestQwen35RecurrentSnapshot: after a prompt, snapshot every cache,
// generate, restore and generate again: the same tokens; a cache saved
// to a file and loaded continues identically too; a clone continues
// identically while the original has moved on.
func TestQwen35RecurrentSnapshot(t *testing.T) {
	model.ForEachBackend(t, func(t *testing.T, _ tensor.Backend) {
		dir := filepath.Join("testdata", "qwen3_5")
		g := readGolden(t, dir)
		m, err := model.Load(filepath.Join(dir, "f32"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		caches := m.MakeCaches()
		defer model.FreeCaches(caches)
		prompt := g.Prompt[:len(g.Prompt)-1]
		last := g.Prompt[len(g.Prompt)-1]
		func() {
			sc := tensor.NewScope()
			defer sc.Close()
			if _, err := m.Forward(ids2D(prompt), caches, nil); err != nil {
				t.Fatal(err)
			}
		}()
		var recurrent int
		for _, c := range caches {
			if _, ok := c.(*kv.RecurrentCache); ok {
				recurrent++
				if c.IsTrimmable() {
					t.Error("a recurrent cache claims to be trimmable")
				}
			}
		}
		if recurrent == 0 {
			t.Fatal("no recurrent caches")
		}
		states := make([]kv.State, len(caches))
		for i, c := range caches {
			states[i] = c.State()
		}
		clones := make([]kv.Cache, len(caches))
		for i, c := range caches {
			clones[i] = c.Clone()
		}
		defer model.FreeCaches(clones)
		path := filepath.Join(t.TempDir(), "q35.kv")
		if err := kv.Save(path, caches, prompt, kv.Meta{ModelID: "qwen3_5"}); err != nil {
			t.Fatal(err)
		}
		first := greedyFrom(t, m, caches, last, 12)
		if !slices.Equal(first, g.GreedyF32[:12]) {
			t.Errorf("continuation %v, HF %v", first, g.GreedyF32[:12])
		}
		for i, c := range caches {
			if err := c.SetState(states[i]); err != nil {
				t.Fatal(err)
			}
			states[i].Free()
		}
		if again := greedyFrom(t, m, caches, last, 12); !slices.Equal(again, first) {
			t.Errorf("after restore: %v, first run %v", again, first)
		}
		if cl := greedyFrom(t, m, clones, last, 12); !slices.Equal(cl, first) {
			t.Errorf("clone: %v, first run %v", cl, first)
		}
		s, err := kv.Load(path, kv.Expect{ModelID: "qwen3_5", Layers: len(caches)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Free()
		if got := greedyFrom(t, m, s.Caches, last, 12); !slices.Equal(got, first) {
			t.Errorf("saved and loaded: %v, first run %v", got, first)
		}
	})
}
