package kv

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/mlxffi/mlxtest"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// pagedKind is a contiguous cache kind and its paged layer spec.
type pagedKind struct {
	name string
	spec LayerSpec
	make func() Cache
}

func mustQ(c Cache, err error) Cache {
	if err != nil {
		panic(err)
	}
	return c
}

var pagedKinds = []pagedKind{
	{"KVCache", LayerSpec{}, func() Cache { return NewKVCache() }},
	{"Rotating8", LayerSpec{Window: 8}, func() Cache { return NewRotatingKVCache(8, 0) }},
	{"Rotating19keep3", LayerSpec{Window: 19, Keep: 3}, func() Cache { return NewRotatingKVCache(19, 3) }},
	{"Rotating64", LayerSpec{Window: 64}, func() Cache { return NewRotatingKVCache(64, 0) }},
	{"Quantized8", LayerSpec{Quant: QuantSpec{Bits: 8, GroupSize: 32}}, func() Cache { return mustQ(NewQuantizedKVCache(32, 8)) }},
	{"Quantized4", LayerSpec{Quant: QuantSpec{Bits: 4, GroupSize: 32}}, func() Cache { return mustQ(NewQuantizedKVCache(32, 4)) }},
	{"QuantizedRotating19", LayerSpec{Window: 19, Quant: QuantSpec{Bits: 4, GroupSize: 32}}, func() Cache { return mustQ(NewQuantizedRotatingKVCache(19, 0, 32, 4)) }},
	{"QuantizedRotating8keep2", LayerSpec{Window: 8, Keep: 2, Quant: QuantSpec{Bits: 8, GroupSize: 32}}, func() Cache { return mustQ(NewQuantizedRotatingKVCache(8, 2, 32, 8)) }},
}

// stream makes random keys, values and queries of one shape and dtype.
type stream struct {
	r          *rand.Rand
	hq, hkv, d int
	dv         int
	dt         tensor.DType
}

func (s *stream) chunk(n int) (k, v, q *tensor.Array) {
	k = tensor.FromFloat32(randVals(s.r, s.hkv*n*s.d), []int{1, s.hkv, n, s.d}, s.dt)
	v = tensor.FromFloat32(randVals(s.r, s.hkv*n*s.dv), []int{1, s.hkv, n, s.dv}, s.dt)
	q = tensor.FromFloat32(randVals(s.r, s.hq*n*s.d), []int{1, s.hq, n, s.d}, s.dt)
	return
}

// step writes one chunk through a cache as a model layer does and returns
// the attention output and the mask's bytes (kind, array).
func step(c Cache, k, v, q *tensor.Array, window int) (out []byte, mask string, kvLen int) {
	m := c.MakeMask(k.Dim(2), window, false)
	defer m.Free()
	mask = fmt.Sprint(m.Kind)
	if m.Array != nil {
		mask += fmt.Sprint(m.Array.Shape(), m.Array.Bytes())
	}
	got := c.UpdateAndFetch(k, v)
	o := Attention(q, got, m.Options(0))
	defer o.Free()
	return o.Bytes(), mask, got.Len()
}

// pair drives a contiguous cache and its paged equivalent through the same
// operations and fails at the first difference in anything observable.
type pair struct {
	t     *testing.T
	c, p  Cache
	label string
}

func (pr *pair) write(k, v, q *tensor.Array, window int) {
	t := pr.t
	t.Helper()
	oc, mc, lc := step(pr.c, k, v, q, window)
	op, mp, lp := step(pr.p, k, v, q, window)
	if mc != mp {
		t.Fatalf("%s: offset %d: masks differ: %s vs %s", pr.label, pr.c.Offset(), mc, mp)
	}
	if lc != lp {
		t.Fatalf("%s: offset %d: %d vs %d keys", pr.label, pr.c.Offset(), lc, lp)
	}
	if !bytes.Equal(oc, op) {
		t.Fatalf("%s: offset %d: attention outputs differ", pr.label, pr.c.Offset())
	}
	pr.same()
}

// same compares offsets, trimmability and states byte for byte.
func (pr *pair) same() {
	t := pr.t
	t.Helper()
	if pr.c.Offset() != pr.p.Offset() || pr.c.IsTrimmable() != pr.p.IsTrimmable() {
		t.Fatalf("%s: offset %d/%d, trimmable %v/%v", pr.label, pr.c.Offset(), pr.p.Offset(), pr.c.IsTrimmable(), pr.p.IsTrimmable())
	}
	sc, sp := pr.c.State(), pr.p.State()
	defer sc.Free()
	defer sp.Free()
	sameState(t, sc, sp)
}

// TestPagedBitExact drives every cache kind and its paged equivalent
// through random streams — chunks of 1 to 40 tokens across block
// boundaries, trims, snapshots restored into the same or a fresh cache
// (paged states into contiguous caches and back), clones written on both
// sides — in float32 and bfloat16, at block sizes 1, 3, 16 and 5, and
// requires bit-identical attention outputs, masks and states throughout.
func TestPagedBitExact(t *testing.T) { pagedBitExact(t, 3, []int{1, 3, 16, 5}) }

// pagedBitExact runs TestPagedBitExact's trials for the given block sizes.
func pagedBitExact(t *testing.T, trials int, blockSizes []int) {
	defer tensortest.NoLeaks(t)()
	for _, kind := range pagedKinds {
		for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
			for _, bs := range blockSizes {
				t.Run(fmt.Sprintf("%s/%s/bs%d", kind.name, dt, bs), func(t *testing.T) {
					defer tensortest.NoLeaks(t)()
					for trial := range trials {
						pagedTrial(t, kind, dt, bs, uint64(trial))
					}
				})
			}
		}
	}
}

func pagedTrial(t *testing.T, kind pagedKind, dt tensor.DType, bs int, seed uint64) {
	r := rand.New(rand.NewPCG(11, seed))
	s := &stream{r: r, hq: 4, hkv: 2, d: 32, dv: 64, dt: dt}
	if kind.spec.Turbo.KeyBits != 0 || kind.spec.Quant.Bits != 0 {
		// head dims TurboQuant takes, and that the CPU backend's paged
		// quantized products read in place (keys whole 64-code blocks)
		s.d, s.dv = 64, 128
	}
	pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: 4096, Layers: []LayerSpec{kind.spec}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	mk := func() Cache { return pool.NewCaches()[0] }
	pr := &pair{t: t, c: kind.make(), p: mk(), label: kind.name}
	var clones []*pair
	window := 0
	if kind.spec.Window > 0 && r.IntN(2) == 0 {
		window = kind.spec.Window // the model passes the layer's window
	}
	for i := range 60 {
		pr.label = fmt.Sprintf("%s step %d", kind.name, i)
		switch op := r.IntN(20); {
		case op < 13:
			n := 1
			if r.IntN(3) == 0 {
				n = 2 + r.IntN(39)
			}
			k, v, q := s.chunk(n)
			pr.write(k, v, q, window)
			tensor.Free(k, v, q)
		case op < 15:
			if pr.c.IsTrimmable() {
				n := r.IntN(8)
				if a, b := pr.c.Trim(n), pr.p.Trim(n); a != b {
					t.Fatalf("%s: Trim(%d) = %d vs %d", pr.label, n, a, b)
				}
				pr.same()
			}
		case op < 17:
			// snapshot, more writes, restore: into the same caches, or
			// crosswise (the paged state into a fresh contiguous cache and
			// the contiguous one into a fresh paged cache)
			sc, sp := pr.c.State(), pr.p.State()
			for range 1 + r.IntN(3) {
				k, v, q := s.chunk(1 + r.IntN(5))
				pr.write(k, v, q, window)
				tensor.Free(k, v, q)
			}
			if r.IntN(2) == 0 {
				if err := pr.c.SetState(sc); err != nil {
					t.Fatal(err)
				}
				if err := pr.p.SetState(sp); err != nil {
					t.Fatal(err)
				}
			} else {
				c, p := kind.make(), mk()
				if err := c.SetState(sp); err != nil {
					t.Fatal(err)
				}
				if err := p.SetState(sc); err != nil {
					t.Fatal(err)
				}
				pr.c.Free()
				pr.p.Free()
				pr.c, pr.p = c, p
			}
			sc.Free()
			sp.Free()
			pr.same()
		default:
			// clone both; write the clone a little, compare, and keep the
			// clone around (its writes must not reach the original)
			cl := &pair{t: t, c: pr.c.Clone(), p: pr.p.Clone(), label: pr.label + " clone"}
			for range 1 + r.IntN(3) {
				k, v, q := s.chunk(1 + r.IntN(20))
				cl.write(k, v, q, window)
				tensor.Free(k, v, q)
			}
			clones = append(clones, cl)
		}
	}
	// the clones still read their own tokens after the original went on
	for _, cl := range clones {
		k, v, q := s.chunk(1 + r.IntN(4))
		cl.write(k, v, q, window)
		tensor.Free(k, v, q)
		cl.c.Free()
		cl.p.Free()
	}
	pr.c.Free()
	pr.p.Free()
	if st := pool.Stats(); st.Used != 0 || st.Free != st.Capacity {
		t.Fatalf("after freeing every cache: %+v", st)
	}
}

// TestPagedExhausted: a write that needs more blocks than the layer has
// fails with a PoolExhaustedError naming the numbers and leaves the cache
// as it was; freeing another sequence makes room.
func TestPagedExhausted(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(1, 1))
	s := &stream{r: r, hq: 2, hkv: 2, d: 32, dv: 32, dt: tensor.Float32}
	pool, err := NewPool(PoolConfig{BlockSize: 4, Blocks: 4, Layers: []LayerSpec{{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	a, b := pool.NewCaches()[0], pool.NewCaches()[0]
	k, v, q := s.chunk(10) // 3 blocks
	step(a, k, v, q, 0)
	tensor.Free(k, v, q)
	before := a.State()
	defer before.Free()
	k, v, q = s.chunk(3) // 1 more block fits, then no more
	step(b, k, v, q, 0)
	tensor.Free(k, v, q)
	k, v, q = s.chunk(3)
	q.Free()
	defer tensor.Free(k, v)
	err = tensor.Try(func() { a.UpdateAndFetch(k, v) })
	var pe *PoolExhaustedError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("write into a full pool: %v", err)
	}
	if pe.Need != 1 || pe.Available != 0 || pe.Capacity != 4 || pe.Layer != 0 {
		t.Fatalf("error numbers %+v", pe)
	}
	after := a.State()
	defer after.Free()
	sameState(t, before, after)
	b.Free()
	a.UpdateAndFetch(k, v)
	if a.Offset() != 13 {
		t.Fatalf("offset %d after the retry", a.Offset())
	}
	a.Free()
}

// TestPoolGrowsLazily: storage starts at 64 blocks at the first write and
// doubles as blocks are needed, never beyond the capacity; Preallocate
// takes the whole capacity at once.
func TestPoolGrowsLazily(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(1, 2))
	s := &stream{r: r, hq: 2, hkv: 2, d: 32, dv: 32, dt: tensor.Float32}
	for _, pre := range []bool{false, true} {
		pool, err := NewPool(PoolConfig{BlockSize: 2, Blocks: 200, Layers: []LayerSpec{{}, {Shared: true}}, Preallocate: pre})
		if err != nil {
			t.Fatal(err)
		}
		cs := pool.NewCaches()
		if cs[1] != nil {
			t.Fatal("a shared layer got a cache")
		}
		if st := pool.Stats(); st.Bytes != 0 || st.Layers[0].Allocated != 0 {
			t.Fatalf("storage before any write: %+v", st)
		}
		var allocs []int
		for range 3 {
			k, v, q := s.chunk(100) // 50 blocks a time
			q.Free()
			cs[0].UpdateAndFetch(k, v)
			tensor.Free(k, v)
			allocs = append(allocs, pool.Stats().Layers[0].Allocated)
		}
		want := []int{64, 128, 200}
		if pre {
			want = []int{200, 200, 200}
		}
		if fmt.Sprint(allocs) != fmt.Sprint(want) {
			t.Fatalf("preallocate %v: allocated %v blocks, want %v", pre, allocs, want)
		}
		st := pool.Stats()
		if bb := 2 * 2 * 2 * 32 * 4; st.Layers[0].BlockBytes != bb || st.Bytes != 200*bb || st.Used != 150 || st.Peak != 150 {
			t.Fatalf("stats %+v", st)
		}
		cs[0].Free()
		pool.Free()
	}
}

// TestPagedSaveLoad: Save writes paged caches through their States (the
// contiguous format), Load gives contiguous caches with bit-identical
// states, and paged caches restored from the loaded states (SetState)
// continue exactly as the originals do.
func TestPagedSaveLoad(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(4, 4))
	s := &stream{r: r, hq: 2, hkv: 2, d: 32, dv: 32, dt: tensor.BFloat16}
	var specs []LayerSpec
	for _, k := range pagedKinds {
		specs = append(specs, k.spec)
	}
	pool, err := NewPool(PoolConfig{BlockSize: 4, Blocks: 256, Layers: specs})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	orig := pool.NewCaches()
	for _, c := range orig {
		for range 5 {
			k, v, q := s.chunk(1 + r.IntN(25))
			step(c, k, v, q, 0)
			tensor.Free(k, v, q)
		}
	}
	path := filepath.Join(t.TempDir(), "paged.kv")
	if err := Save(path, orig, []int32{1, 2, 3}, Meta{ModelID: "m"}); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, Expect{ModelID: "m", Layers: len(orig)})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Free()
	restored := pool.NewCaches()
	for i, c := range got.Caches {
		a, b := orig[i].State(), c.State()
		sameState(t, a, b)
		if err := restored[i].SetState(b); err != nil {
			t.Fatal(err)
		}
		a.Free()
		b.Free()
	}
	for i := range orig {
		k, v, q := s.chunk(1 + r.IntN(6))
		o1, m1, _ := step(orig[i], k, v, q, 0)
		o2, m2, _ := step(restored[i], k, v, q, 0)
		o3, m3, _ := step(got.Caches[i], k, v, q, 0)
		if !bytes.Equal(o1, o2) || !bytes.Equal(o1, o3) || m1 != m2 || m1 != m3 {
			t.Fatalf("%s: restored caches attend differently", pagedKinds[i].name)
		}
		tensor.Free(k, v, q)
		orig[i].Free()
		restored[i].Free()
	}
}

// TestMLXPaged runs the paged cache tests on MLX: bit-exactness against
// the contiguous caches (one trial per case, block sizes 3 and 16), prefix
// sharing, a 1,000-step churn and persistence.
func TestMLXPaged(t *testing.T) {
	mlxtest.UseAsDefault(t)
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"BitExact", func(t *testing.T) { pagedBitExact(t, 1, []int{3, 16}) }},
		{"PrefixSharing", TestPrefixSharing},
		{"PrefixSlidingWindow", TestPrefixSlidingWindow},
		{"Churn", func(t *testing.T) { pagedChurn(t, 1000) }},
		{"SaveLoad", TestPagedSaveLoad},
	} {
		t.Run(tc.name, tc.f)
	}
}

// TestBlocksNeeded: a sequence fed random writes of at most chunk tokens
// never holds more blocks in any layer than BlocksNeeded says.
func TestBlocksNeeded(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	var specs []LayerSpec
	for _, k := range pagedKinds {
		specs = append(specs, k.spec)
	}
	for _, bs := range []int{1, 4, 16} {
		r := rand.New(rand.NewPCG(6, uint64(bs)))
		s := &stream{r: r, hq: 2, hkv: 2, d: 32, dv: 32, dt: tensor.Float32}
		for trial := range 10 {
			pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: 1024, Layers: specs})
			if err != nil {
				t.Fatal(err)
			}
			chunk := 1 + r.IntN(40)
			tokens := 1 + r.IntN(150)
			cs := pool.NewCaches()
			for fed := 0; fed < tokens; {
				n := min(tokens-fed, 1+r.IntN(chunk))
				for _, c := range cs {
					k, v, q := s.chunk(n)
					c.UpdateAndFetch(k, v)
					tensor.Free(k, v, q)
				}
				fed += n
			}
			need := pool.BlocksNeeded(tokens, chunk)
			for i, ls := range pool.Stats().Layers {
				if ls.Peak > need[i] {
					t.Fatalf("bs %d trial %d, %s: peak %d blocks, BlocksNeeded(%d, %d) = %d", bs, trial, pagedKinds[i].name, ls.Peak, tokens, chunk, need[i])
				}
			}
			for _, c := range cs {
				c.Free()
			}
			pool.Free()
		}
	}
}
