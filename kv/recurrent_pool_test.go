package kv_test

import (
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestPoolRecurrentLayers: a hybrid model's layout (a RecurrentCache
// layer beside attention layers) maps to a pool whose recurrent layer is
// one RecurrentCache per sequence holding no blocks, and whose prefixes
// are never registered (their blocks would lack the state after them).
func TestPoolRecurrentLayers(t *testing.T) {
	specs, err := kv.LayerSpecs([]kv.Cache{kv.NewRecurrentCache(), kv.NewKVCache()})
	if err != nil {
		t.Fatal(err)
	}
	if !specs[0].Recurrent || specs[1].Recurrent {
		t.Fatalf("specs %+v", specs)
	}
	p, err := kv.NewPool(kv.PoolConfig{BlockSize: 2, Blocks: 8, Layers: specs})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if got := p.BlocksNeeded(5, 5); got[0] != 0 || got[1] != 3 {
		t.Errorf("blocks needed for 5 tokens: %v, want [0 3]", got)
	}
	if _, err := p.NewCache(0); err == nil {
		t.Error("NewCache of the recurrent layer: no error")
	}
	caches := p.NewCaches()
	rc, ok := caches[0].(*kv.RecurrentCache)
	if !ok {
		t.Fatalf("layer 0: a %T", caches[0])
	}
	sc := tensor.NewScope()
	rc.Update(tensor.Zeros([]int{1, 3, 4}, tensor.Float32), tensor.Zeros([]int{1, 2, 4, 4}, tensor.Float32), 4)
	caches[1].UpdateAndFetch(tensor.Zeros([]int{1, 1, 4, 8}, tensor.Float32), tensor.Zeros([]int{1, 1, 4, 8}, tensor.Float32))
	sc.Close()
	tokens := []int32{5, 6, 7, 8}
	if n, err := p.RegisterPrefix(caches, tokens); err != nil || n != 0 {
		t.Errorf("register: %d tokens, %v; want 0, nil", n, err)
	}
	if n := p.CachedPrefix(tokens); n != 0 {
		t.Errorf("cached prefix %d, want 0", n)
	}
	st := p.Stats()
	if st.Layers[0].Capacity != 0 || st.Layers[0].Used != 0 || st.Layers[1].Used != 2 {
		t.Errorf("stats %+v", st.Layers)
	}
	fresh := p.NewCaches()
	if n, err := p.AdoptPrefix(fresh, tokens, 3); err != nil || n != 0 {
		t.Errorf("adopt: %d, %v", n, err)
	}
	if _, err := p.RegisterPrefix([]kv.Cache{kv.NewKVCache(), caches[1]}, tokens); err == nil {
		t.Error("a plain cache in the recurrent layer's place: no error")
	}
	for _, c := range append(caches, fresh...) {
		c.Free()
	}
	if st := p.Stats(); st.Used != 0 {
		t.Errorf("%d blocks used after freeing", st.Used)
	}
}
