package kv

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// makers builds one empty cache of every kind (windows large enough that
// the trim properties apply while the offset stays below them).
var makers = []struct {
	name string
	make func() Cache
}{
	{"KVCache", func() Cache { return NewKVCache() }},
	{"RotatingKVCache", func() Cache { return NewRotatingKVCache(64, 0) }},
	{"QuantizedKVCache", func() Cache { c, _ := NewQuantizedKVCache(32, 8); return c }},
	{"QuantizedRotatingKVCache", func() Cache { c, _ := NewQuantizedRotatingKVCache(64, 0, 32, 4); return c }},
}

// tokens makes n random keys and values [1, 2, n, 32].
func tokens(r *rand.Rand, n int) (k, v *tensor.Array) {
	k = tensor.FromFloat32(randVals(r, 2*n*32), []int{1, 2, n, 32}, tensor.Float32)
	v = tensor.FromFloat32(randVals(r, 2*n*32), []int{1, 2, n, 32}, tensor.Float32)
	return
}

// write pushes a chunk through c and returns copies of what it fetched.
func write(c Cache, k, v *tensor.Array) []*tensor.Array {
	kv := c.UpdateAndFetch(k, v)
	var out []*tensor.Array
	for _, a := range kv.arrays() {
		out = append(out, copyOf(a))
	}
	return out
}

func sameAll(t *testing.T, what string, a, b []*tensor.Array) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d vs %d arrays", what, len(a), len(b))
	}
	for i := range a {
		if !sameBytes(a[i], b[i]) {
			t.Fatalf("%s: array %d differs (%v vs %v)", what, i, a[i], b[i])
		}
	}
}

// TestTrimThenWrite: writing B, trimming it away and writing C gives
// bit-for-bit what writing C right after A gives, for every cache kind and
// whether B was a chunk or single tokens.
func TestTrimThenWrite(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, m := range makers {
		t.Run(m.name, func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			for trial := range 20 {
				r := rand.New(rand.NewPCG(7, uint64(trial)))
				na, nb, nc := 1+r.IntN(20), 1+r.IntN(20), 1+r.IntN(20)
				singles := trial%2 == 0
				ka, va := tokens(r, na)
				kc, vc := tokens(r, nc)
				a, b := m.make(), m.make()
				tensor.Free(write(a, ka, va)...)
				tensor.Free(write(b, ka, va)...)
				if singles {
					for range nb {
						kb, vb := tokens(r, 1)
						tensor.Free(write(a, kb, vb)...)
						tensor.Free(kb, vb)
					}
				} else {
					kb, vb := tokens(r, nb)
					tensor.Free(write(a, kb, vb)...)
					tensor.Free(kb, vb)
				}
				if !a.IsTrimmable() {
					t.Fatalf("offset %d: not trimmable", a.Offset())
				}
				if got := a.Trim(nb); got != nb {
					t.Fatalf("Trim(%d) = %d", nb, got)
				}
				if a.Offset() != na {
					t.Fatalf("offset %d after trim, want %d", a.Offset(), na)
				}
				ga, gb := write(a, kc, vc), write(b, kc, vc)
				sameAll(t, "after trim", ga, gb)
				tensor.Free(ga...)
				tensor.Free(gb...)
				tensor.Free(ka, va, kc, vc)
				a.Free()
				b.Free()
			}
		})
	}
}

// TestTrimClamps: Trim never drops more than the cache holds.
func TestTrimClamps(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(1, 1))
	c := NewKVCache()
	defer c.Free()
	k, v := tokens(r, 5)
	defer tensor.Free(k, v)
	c.UpdateAndFetch(k, v)
	if got := c.Trim(9); got != 5 || c.Offset() != 0 {
		t.Fatalf("Trim(9) on 5 tokens = %d, offset %d", got, c.Offset())
	}
}

// TestRotatingTrimmableOnlyBeforeWrap: once the window is exceeded the
// evicted tokens are gone, so the cache refuses to trim.
func TestRotatingTrimmableOnlyBeforeWrap(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(1, 2))
	c := NewRotatingKVCache(4, 0)
	defer c.Free()
	for i := range 6 {
		k, v := tokens(r, 1)
		c.UpdateAndFetch(k, v)
		tensor.Free(k, v)
		if want := i+1 < 4; c.IsTrimmable() != want {
			t.Fatalf("offset %d: trimmable %v", c.Offset(), c.IsTrimmable())
		}
	}
}

// TestSnapshotRestore: a state taken before further writes restores the
// cache bit for bit, into the same cache or a fresh one, and writes after
// the restore fetch exactly what they fetched the first time.
func TestSnapshotRestore(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, m := range makers {
		t.Run(m.name, func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			for trial := range 10 {
				r := rand.New(rand.NewPCG(8, uint64(trial)))
				c := m.make()
				for range 1 + r.IntN(4) {
					k, v := tokens(r, 1+r.IntN(30))
					tensor.Free(write(c, k, v)...)
					tensor.Free(k, v)
				}
				st := c.State()
				kb, vb := tokens(r, 1+r.IntN(3))
				first := write(c, kb, vb)
				// more writes, then restore into the same cache
				for range 3 {
					k, v := tokens(r, 1+r.IntN(30))
					tensor.Free(write(c, k, v)...)
					tensor.Free(k, v)
				}
				if err := c.SetState(st); err != nil {
					t.Fatal(err)
				}
				st2 := c.State()
				sameState(t, st, st2)
				again := write(c, kb, vb)
				sameAll(t, "same cache", first, again)
				// and into a fresh cache
				f := m.make()
				if err := f.SetState(st); err != nil {
					t.Fatal(err)
				}
				fresh := write(f, kb, vb)
				sameAll(t, "fresh cache", first, fresh)
				tensor.Free(first...)
				tensor.Free(again...)
				tensor.Free(fresh...)
				st.Free()
				st2.Free()
				tensor.Free(kb, vb)
				c.Free()
				f.Free()
			}
		})
	}
}

// TestSetStateRejects: states of another kind or quantization are refused.
func TestSetStateRejects(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(1, 3))
	c := NewKVCache()
	defer c.Free()
	k, v := tokens(r, 3)
	defer tensor.Free(k, v)
	c.UpdateAndFetch(k, v)
	st := c.State()
	defer st.Free()
	if err := NewRotatingKVCache(8, 0).SetState(st); err == nil {
		t.Fatal("rotating cache took a KVCache state")
	}
	q, _ := NewQuantizedKVCache(32, 8)
	qs := State{Kind: KindQuantized, GroupSize: 64, Bits: 4}
	if err := q.SetState(qs); err == nil {
		t.Fatal("8-bit cache took a 4-bit state")
	}
	st.Arrays = st.Arrays[:1]
	if err := NewKVCache().SetState(st); err == nil {
		t.Fatal("took a state with one array")
	}
}

// TestCloneIndependent: writes to a clone do not reach the original and
// writes to the original do not reach the clone.
func TestCloneIndependent(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, m := range makers {
		t.Run(m.name, func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			r := rand.New(rand.NewPCG(9, 9))
			c := m.make()
			k, v := tokens(r, 10)
			tensor.Free(write(c, k, v)...)
			tensor.Free(k, v)
			before := c.State()
			d := c.Clone()
			for range 3 {
				k, v := tokens(r, 1)
				tensor.Free(write(d, k, v)...)
				tensor.Free(k, v)
			}
			d.Trim(1)
			k, v = tokens(r, 2)
			tensor.Free(write(d, k, v)...)
			tensor.Free(k, v)
			now := c.State()
			sameState(t, before, now)
			if d.Offset() != 14 {
				t.Fatalf("clone offset %d, want 14", d.Offset())
			}
			dBefore := d.State()
			k, v = tokens(r, 5)
			tensor.Free(write(c, k, v)...)
			tensor.Free(k, v)
			dNow := d.State()
			sameState(t, dBefore, dNow)
			tensor.Free(append(append(append(before.Arrays, now.Arrays...), dBefore.Arrays...), dNow.Arrays...)...)
			c.Free()
			d.Free()
		})
	}
}

// TestViewsSurviveScope: a cache updated inside a caller's scope keeps its
// buffers when the scope closes; only the step's own arrays go.
func TestViewsSurviveScope(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(1, 4))
	c := NewKVCache()
	defer c.Free()
	for step := range 3 {
		s := tensor.NewScope()
		k, v := tokens(r, 2)
		kv := c.UpdateAndFetch(k, v)
		if kv.Len() != 2*(step+1) {
			t.Fatalf("step %d: %d keys", step, kv.Len())
		}
		s.Close()
	}
	st := c.State()
	defer st.Free()
	if st.Arrays[0].Dim(2) != 6 {
		t.Fatalf("state holds %d tokens", st.Arrays[0].Dim(2))
	}
}

// TestFetchedViewsFreedNextUpdate: the views UpdateAndFetch hands out
// belong to the cache and are freed by the next update, so the next
// in-place write never has to copy the buffer.
func TestFetchedViewsFreedNextUpdate(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(1, 5))
	c := NewKVCache()
	defer c.Free()
	k, v := tokens(r, 3)
	kv := c.UpdateAndFetch(k, v)
	tensor.Free(k, v)
	k, v = tokens(r, 1)
	c.UpdateAndFetch(k, v)
	tensor.Free(k, v)
	if !kv.Keys.Freed() || !kv.Values.Freed() {
		t.Fatal("views of the previous step are still alive")
	}
}

// TestGrowthSteps: KVCache capacity grows in 256-slot steps and only when
// needed, keeping mlx-lm's layout (the prefix is cut to the offset before
// growing when it is not a whole number of steps).
func TestGrowthSteps(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(1, 6))
	c := NewKVCache()
	defer c.Free()
	perSlot := 2 * 2 * 32 * 4 // keys+values, 2 heads, D 32, float32
	steps := []struct{ n, capacity int }{
		{1, 256}, {254, 256}, {1, 256}, {1, 512}, {300, 257 + 512}, {1, 257 + 512},
	}
	for _, s := range steps {
		k, v := tokens(r, s.n)
		c.UpdateAndFetch(k, v)
		tensor.Free(k, v)
		if got := c.Bytes() / perSlot; got != s.capacity {
			t.Fatalf("offset %d: capacity %d, want %d", c.Offset(), got, s.capacity)
		}
	}
}

// TestRotatingLayout follows mlx-lm's RotatingKVCache through each rule
// and checks the temporal view holds exactly the tokens it should.
func TestRotatingLayout(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	// token i has every key element equal to i
	tok := func(from, n int) (k, v *tensor.Array) {
		vals := make([]float32, n*4)
		for i := range n {
			for j := range 4 {
				vals[i*4+j] = float32(from + i)
			}
		}
		return tensor.FromFloat32(vals, []int{1, 1, n, 4}, tensor.Float32), tensor.FromFloat32(vals, []int{1, 1, n, 4}, tensor.Float32)
	}
	ids := func(a *tensor.Array) []int {
		f := a.Float32s()
		out := make([]int, a.Dim(2))
		for i := range out {
			out[i] = int(f[i*4])
		}
		return out
	}
	c := NewRotatingKVCache(4, 0)
	defer c.Free()
	pos := 0
	type step struct {
		n        int
		fetched  []int // as fetched: temporal order, whatever the ring's slots
		temporal []int
		idx      int
	}
	steps := []step{
		{6, []int{0, 1, 2, 3, 4, 5}, []int{0, 1, 2, 3, 4, 5}, 6}, // first concat keeps everything
		{1, []int{3, 4, 5, 6}, []int{3, 4, 5, 6}, 1},             // trimmed to the window, wrapped to 0 (fetched in temporal order)
		{1, []int{4, 5, 6, 7}, []int{4, 5, 6, 7}, 2},             // in place
		{2, []int{5, 6, 7, 8, 9}, []int{5, 6, 7, 8, 9}, 5},       // temporal order, newest 3 kept, appended
		{1, []int{7, 8, 9, 10}, []int{7, 8, 9, 10}, 1},
	}
	for i, s := range steps {
		k, v := tok(pos, s.n)
		kv := c.UpdateAndFetch(k, v)
		tensor.Free(k, v)
		pos += s.n
		if got := ids(kv.Keys); !slices.Equal(got, s.fetched) {
			t.Fatalf("step %d: fetched %v, want %v", i, got, s.fetched)
		}
		if kv.Start != s.fetched[0] {
			t.Fatalf("step %d: KV.Start %d, first key at position %d", i, kv.Start, s.fetched[0])
		}
		tk, tv := c.Temporal()
		if got := ids(tk); !slices.Equal(got, s.temporal) {
			t.Fatalf("step %d: temporal %v, want %v", i, got, s.temporal)
		}
		tensor.Free(tk, tv)
		if c.idx != s.idx || c.Offset() != pos {
			t.Fatalf("step %d: idx %d offset %d, want %d %d", i, c.idx, c.Offset(), s.idx, pos)
		}
	}
}

// TestRotatingKeep: the first keep tokens survive every eviction.
func TestRotatingKeep(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	c := NewRotatingKVCache(5, 2)
	defer c.Free()
	for i := range 12 {
		n := 1
		if i%4 == 3 {
			n = 3
		}
		vals := make([]float32, n*4)
		for j := range vals {
			vals[j] = float32(100*i + j/4)
		}
		k := tensor.FromFloat32(vals, []int{1, 1, n, 4}, tensor.Float32)
		c.UpdateAndFetch(k, k)
		k.Free()
	}
	tk, tv := c.Temporal()
	defer tensor.Free(tk, tv)
	f := tk.Float32s()
	if f[0] != 0 || f[4] != 100 {
		t.Fatalf("keep prefix lost: temporal starts %v, %v", f[0], f[4])
	}
}
