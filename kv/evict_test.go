package kv

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestPoolOnEvict: when a write evicts a cached prefix, OnEvict sees it
// before its blocks are reused — its namespace, tokens and byte size, and
// States equal, byte for byte, to the states of the contiguous caches that
// computed it (a zero state for the shared layer) — once per longest
// prefix removed (the tail first, then what is left of it); the states
// outlive the reuse of the blocks, the Evicted does not, and SaveStates
// writes the file Save writes for those contiguous caches.
func TestPoolOnEvict(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	const bs, n = 4, 12
	var specs []LayerSpec
	var windows []int
	for _, l := range prefixLayers {
		specs = append(specs, l.spec)
		windows = append(windows, l.spec.Window)
	}
	type seen struct {
		ns     string
		tokens []int32
		bytes  int
		states []State
		ev     *Evicted
	}
	var got []seen
	pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: n / bs, Layers: specs, OnEvict: func(ev *Evicted) {
		st, err := ev.States()
		if err != nil {
			t.Errorf("States during OnEvict: %v", err)
		}
		got = append(got, seen{ev.Namespace(), ev.Tokens(), ev.Bytes(), st, ev})
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	s := &stream{r: rand.New(rand.NewPCG(5, 1)), hq: 4, hkv: 2, d: 32, dv: 32, dt: tensor.BFloat16}

	a := newSeqPair(t, pool)
	a.write(s, ids(100, 7), windows)
	a.write(s, ids(107, 5), windows)
	if k, err := pool.RegisterPrefixIn("ns1", a.paged, a.tokens); k != n || err != nil {
		t.Fatalf("registered %d tokens (%v)", k, err)
	}
	want := make([]State, len(a.twin))
	perBlock := 0
	for i, c := range a.twin {
		if c != nil {
			want[i] = c.State()
			perBlock += pool.Stats().Layers[i].BlockBytes
		}
	}
	defer func() {
		for _, st := range want {
			st.Free()
		}
	}()
	for _, c := range a.paged {
		if c != nil {
			c.Free()
		}
	}
	if len(got) != 0 {
		t.Fatalf("OnEvict called before any eviction: %d", len(got))
	}
	// B needs two blocks of every layer: A's tail, then what is left of A
	// loses its tail too
	b := newSeqPair(t, pool)
	b.write(s, ids(500, bs), windows)
	if len(got) != 1 {
		t.Fatalf("%d OnEvict calls after the first eviction", len(got))
	}
	b.write(s, ids(500+bs, bs), windows)
	if len(got) != 2 {
		t.Fatalf("%d OnEvict calls after the second eviction", len(got))
	}
	for k, g := range got {
		m := n - k*bs
		if g.ns != "ns1" || !slices.Equal(g.tokens, a.tokens[:m]) || g.bytes != m/bs*perBlock {
			t.Errorf("eviction %d: namespace %q, tokens %v, %d bytes; want ns1, %v, %d", k, g.ns, g.tokens, g.bytes, a.tokens[:m], m/bs*perBlock)
		}
		if _, err := g.ev.States(); !errors.Is(err, errEvictedGone) {
			t.Errorf("eviction %d: States after the call: %v", k, err)
		}
	}
	// the first eviction's states are A's whole prefix, intact although B
	// now writes into its blocks
	b.write(s, ids(600, 1), windows)
	for i, st := range got[0].states {
		if want[i].Kind == "" {
			if st.Kind != "" || len(st.Arrays) != 0 {
				t.Errorf("shared layer %d: state %+v", i, st)
			}
			continue
		}
		sameState(t, st, want[i])
	}
	b.free()
	a.free()

	// SaveStates writes what Save writes for the contiguous caches (the
	// shared layer left out: neither format has it)
	dir := t.TempDir()
	var states []State
	var twins []Cache
	for i, c := range a.twin {
		if c != nil {
			states = append(states, got[0].states[i])
			tw := prefixLayers[i].make()
			if err := tw.SetState(want[i]); err != nil {
				t.Fatal(err)
			}
			twins = append(twins, tw)
		}
	}
	p1, p2 := filepath.Join(dir, "states.kvc"), filepath.Join(dir, "caches.kvc")
	if err := SaveStates(p1, states, a.tokens, Meta{ModelID: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := Save(p2, twins, a.tokens, Meta{ModelID: "m"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range twins {
		c.Free()
	}
	r1, _ := os.ReadFile(p1)
	r2, _ := os.ReadFile(p2)
	if len(r1) == 0 || !bytes.Equal(r1, r2) {
		t.Errorf("SaveStates wrote %d bytes, Save %d, not the same file", len(r1), len(r2))
	}
	if err := SaveStates(filepath.Join(dir, "shared.kvc"), got[0].states, a.tokens, Meta{}); err == nil {
		t.Error("SaveStates took a shared layer's zero state")
	}
	for _, g := range got {
		for _, st := range g.states {
			st.Free()
		}
	}
}
