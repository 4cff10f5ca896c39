package kv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

func mustTurbo(c Cache, err error) Cache { return mustQ(c, err) }

// turboPagedKinds are the TurboQuant caches and their paged specs.
var turboPagedKinds = []pagedKind{
	{"Turbo_k8v3", LayerSpec{Turbo: DefaultTurbo}, func() Cache { return mustTurbo(NewTurboQuantKVCache(DefaultTurbo)) }},
	{"Turbo_k4v2", LayerSpec{Turbo: TurboSpec{KeyBits: 4, ValueBits: 2}}, func() Cache {
		return mustTurbo(NewTurboQuantKVCache(TurboSpec{KeyBits: 4, ValueBits: 2}))
	}},
	{"TurboQJL_k4v3", LayerSpec{Turbo: DefaultTurboQJL}, func() Cache { return mustTurbo(NewTurboQuantKVCache(DefaultTurboQJL)) }},
	{"TurboRotating19keep3", LayerSpec{Window: 19, Keep: 3, Turbo: DefaultTurbo}, func() Cache {
		return mustTurbo(NewTurboQuantRotatingKVCache(19, 3, DefaultTurbo))
	}},
	{"TurboRotating8_k8v8", LayerSpec{Window: 8, Turbo: TurboSpec{KeyBits: 8, ValueBits: 8}}, func() Cache {
		return mustTurbo(NewTurboQuantRotatingKVCache(8, 0, TurboSpec{KeyBits: 8, ValueBits: 8}))
	}},
}

// TestPagedTurboBitExact is TestPagedBitExact for TurboQuant layers: a
// paged TurboQuant layer (full or sliding-window, plain or QJL keys)
// driven through random writes, trims, snapshots and clones gives the
// attention outputs, masks and states of the contiguous TurboQuant cache
// bit for bit, at block sizes 1, 3 and 16.
func TestPagedTurboBitExact(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, kind := range turboPagedKinds {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
			for _, bs := range []int{1, 3, 16} {
				t.Run(fmt.Sprintf("%s/%s/bs%d", kind.name, dt, bs), func(t *testing.T) {
					defer tensortest.NoLeaks(t)()
					for trial := range 2 {
						pagedTrial(t, kind, dt, bs, uint64(trial))
					}
				})
			}
		}
	}
}

// TestPagedTurboSpecs: LayerSpecOf maps the TurboQuant caches to their
// paged specs, TurboLayerSpecs converts a model's plain layout (shared
// and affine layers left alone), and a pool refuses a layer that is both
// affine and TurboQuant or has a bad scheme.
func TestPagedTurboSpecs(t *testing.T) {
	for _, k := range turboPagedKinds {
		c := k.make()
		got, err := LayerSpecOf(c)
		c.Free()
		if err != nil || got != k.spec {
			t.Fatalf("%s: LayerSpecOf = %+v, %v; want %+v", k.name, got, err, k.spec)
		}
	}
	plain := []LayerSpec{{}, {Window: 8, Keep: 1}, {Shared: true}, {Quant: QuantSpec{Bits: 4, GroupSize: 32}}}
	got, err := TurboLayerSpecs(plain, DefaultTurbo)
	want := []LayerSpec{{Turbo: DefaultTurbo}, {Window: 8, Keep: 1, Turbo: DefaultTurbo}, {Shared: true}, {Quant: QuantSpec{Bits: 4, GroupSize: 32}}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("TurboLayerSpecs = %+v, %v; want %+v", got, err, want)
	}
	if _, err := TurboLayerSpecs(plain, TurboSpec{KeyBits: 3, ValueBits: 3}); err == nil {
		t.Fatal("TurboLayerSpecs took 3-bit keys")
	}
	for _, bad := range []LayerSpec{
		{Turbo: DefaultTurbo, Quant: QuantSpec{Bits: 4, GroupSize: 32}},
		{Turbo: TurboSpec{KeyBits: 8, ValueBits: 7}},
	} {
		if _, err := NewPool(PoolConfig{Blocks: 4, Layers: []LayerSpec{bad}}); err == nil {
			t.Fatalf("NewPool took %+v", bad)
		}
	}
	// a head dim the scheme cannot take fails the write with the numbers
	p, err := NewPool(PoolConfig{Blocks: 4, Layers: []LayerSpec{{Turbo: DefaultTurbo}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	c := p.NewCaches()[0]
	defer c.Free()
	k := tensor.Zeros([]int{1, 1, 1, 16}, tensor.Float32)
	defer k.Free()
	err = tensor.Try(func() { c.UpdateAndFetch(k, k) })
	if err == nil || !strings.Contains(err.Error(), "head dim 16") {
		t.Fatalf("head dim 16: %v", err)
	}
}

// TestPrefixSharingTurbo: TurboQuant blocks are shared through the prefix
// index like plain ones: a second sequence adopts the first one's
// registered blocks (same ids, no new storage), both then diverge, each
// bit-identical to its contiguous TurboQuant twin, and a third sequence
// reuses the cached blocks after both are freed.
func TestPrefixSharingTurbo(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	layers := []pagedKind{turboPagedKinds[0], {"sliding40", LayerSpec{Window: 40, Turbo: DefaultTurbo}, func() Cache {
		return mustTurbo(NewTurboQuantRotatingKVCache(40, 0, DefaultTurbo))
	}}}
	var specs []LayerSpec
	var windows []int
	for _, l := range layers {
		specs = append(specs, l.spec)
		windows = append(windows, l.spec.Window)
	}
	const bs = 4
	pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: 128, Layers: specs})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	s := &stream{r: rand.New(rand.NewPCG(3, 9)), hq: 4, hkv: 2, d: 64, dv: 64, dt: tensor.BFloat16}
	newPair := func() *seqPair {
		sp := &seqPair{t: t, paged: pool.NewCaches(), twin: make([]Cache, len(layers))}
		for i, l := range layers {
			sp.twin[i] = l.make()
		}
		return sp
	}
	a := newPair()
	a.write(s, ids(100, 10), windows)
	for i := range 8 {
		a.write(s, ids(110+i, 1), windows)
	}
	if n, err := pool.RegisterPrefix(a.paged, a.tokens); err != nil || n != 16 {
		t.Fatalf("registered %d tokens (%v), want 16", n, err)
	}
	at16 := make([]Cache, len(a.twin))
	for i, c := range a.twin {
		at16[i] = c.Clone()
		at16[i].Trim(c.Offset() - 16)
	}
	defer func() {
		for _, c := range at16 {
			c.Free()
		}
	}()
	b := newPair()
	if got := b.adopt(pool, a.twin, append(ids(100, 10), 7, 7), 11); got != 8 {
		t.Fatalf("adopted %d tokens, want 8", got)
	}
	for i, c := range b.paged {
		ta, tb := a.paged[i].(*PagedCache).Table(), c.(*PagedCache).Table()
		if !slices.Equal(ta[:2], tb) {
			t.Fatalf("layer %d: B holds %v, A %v", i, tb, ta)
		}
	}
	b.write(s, []int32{8, 9, 7, 7}, windows)
	for i := range 5 {
		a.write(s, ids(200+i, 1), windows)
		b.write(s, ids(300+i, 1), windows)
	}
	a.free()
	b.free()
	c := newPair()
	if got := c.adopt(pool, at16, ids(100, 18), 18); got != 16 {
		t.Fatalf("adopted %d tokens, want 16", got)
	}
	c.write(s, ids(116, 2), windows)
	for i := range 4 {
		c.write(s, ids(400+i, 1), windows)
	}
	c.free()
}
