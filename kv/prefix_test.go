package kv

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// seqPair is one sequence's paged caches (all layers) and a contiguous
// twin per layer, driven together.
type seqPair struct {
	t      *testing.T
	paged  []Cache
	twin   []Cache
	tokens []int32
}

// write feeds n new tokens (ids and random keys, values, queries) to every
// layer of both and requires bit-identical attention, masks and states.
func (sp *seqPair) write(s *stream, ids []int32, windows []int) {
	sp.t.Helper()
	for i := range sp.paged {
		if sp.paged[i] == nil {
			continue
		}
		k, v, q := s.chunk(len(ids))
		pr := &pair{t: sp.t, c: sp.twin[i], p: sp.paged[i], label: fmt.Sprintf("layer %d at %d", i, len(sp.tokens))}
		pr.write(k, v, q, windows[i])
		tensor.Free(k, v, q)
	}
	sp.tokens = append(sp.tokens, ids...)
}

func (sp *seqPair) free() {
	for i := range sp.paged {
		if sp.paged[i] != nil {
			sp.paged[i].Free()
			sp.twin[i].Free()
		}
	}
}

// prefixLayers: a full layer, a sliding one (window 40: the test's
// prefixes stay in place), a KV-sharing one and a quantized full one.
var prefixLayers = []pagedKind{
	{"full", LayerSpec{}, func() Cache { return NewKVCache() }},
	{"sliding40", LayerSpec{Window: 40}, func() Cache { return NewRotatingKVCache(40, 0) }},
	{"shared", LayerSpec{Shared: true}, nil},
	{"q4", LayerSpec{Quant: QuantSpec{Bits: 4, GroupSize: 32}}, func() Cache { return mustQ(NewQuantizedKVCache(32, 4)) }},
}

func prefixPool(t *testing.T, bs, blocks int) (*Pool, []int) {
	t.Helper()
	var specs []LayerSpec
	var windows []int
	for _, l := range prefixLayers {
		specs = append(specs, l.spec)
		windows = append(windows, l.spec.Window)
	}
	p, err := NewPool(PoolConfig{BlockSize: bs, Blocks: blocks, Layers: specs})
	if err != nil {
		t.Fatal(err)
	}
	return p, windows
}

// newSeqPair makes empty paged caches over p and contiguous twins.
func newSeqPair(t *testing.T, p *Pool) *seqPair {
	sp := &seqPair{t: t, paged: p.NewCaches(), twin: make([]Cache, len(prefixLayers))}
	for i, l := range prefixLayers {
		if l.make != nil {
			sp.twin[i] = l.make()
		}
	}
	return sp
}

// adopt makes sp's paged caches adopt tokens' cached prefix and sets its
// twins to from's twins cut back to the adopted length (the keys and
// values the adopted blocks hold).
func (sp *seqPair) adopt(p *Pool, from []Cache, tokens []int32, limit int) int {
	sp.t.Helper()
	n, err := p.AdoptPrefix(sp.paged, tokens, limit)
	if err != nil {
		sp.t.Fatal(err)
	}
	for i, c := range from {
		if c == nil {
			continue
		}
		cl := c.Clone()
		cl.Trim(cl.Offset() - n)
		st := cl.State()
		if err := sp.twin[i].SetState(st); err != nil {
			sp.t.Fatal(err)
		}
		st.Free()
		cl.Free()
	}
	sp.tokens = slices.Clone(tokens[:n])
	for i := range sp.paged {
		if sp.paged[i] != nil {
			(&pair{t: sp.t, c: sp.twin[i], p: sp.paged[i], label: fmt.Sprintf("layer %d adopted", i)}).same()
		}
	}
	return n
}

func ids(from, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(from + i)
	}
	return out
}

func usedPerLayer(p *Pool) []int {
	var out []int
	for _, l := range p.Stats().Layers {
		out = append(out, l.Used)
	}
	return out
}

// TestPrefixSharing: a second sequence with a common prefix adopts the
// first one's blocks (same block ids, reference counts up, no new
// blocks), both then write diverging tokens without affecting each other
// (each bit-identical to its contiguous twin), freed sequences return
// their blocks (registered ones stay cached), and a later sequence with
// the same prefix reuses the cached blocks with bit-identical attention.
func TestPrefixSharing(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	const bs = 4
	pool, windows := prefixPool(t, bs, 256)
	defer pool.Free()
	s := &stream{r: rand.New(rand.NewPCG(3, 1)), hq: 4, hkv: 2, d: 32, dv: 32, dt: tensor.BFloat16}

	a := newSeqPair(t, pool)
	a.write(s, ids(100, 10), windows)
	for i := range 8 {
		a.write(s, ids(110+i, 1), windows)
	}
	n, err := pool.RegisterPrefix(a.paged, a.tokens)
	if err != nil || n != 16 {
		t.Fatalf("registered %d tokens (%v), want 16", n, err)
	}
	if n, _ := pool.RegisterPrefix(a.paged, a.tokens); n != 16 || pool.Stats().PrefixEntries != 4 {
		t.Fatalf("registering again: %d tokens, %d entries", n, pool.Stats().PrefixEntries)
	}
	// a snapshot of A's twins at 16 tokens, for the later sequence
	at16 := make([]Cache, len(a.twin))
	for i, c := range a.twin {
		if c != nil {
			at16[i] = c.Clone()
			at16[i].Trim(c.Offset() - 16)
		}
	}
	defer func() {
		for _, c := range at16 {
			if c != nil {
				c.Free()
			}
		}
	}()

	b := newSeqPair(t, pool)
	bTokens := append(ids(100, 10), 7, 7, 7)
	if got := b.adopt(pool, a.twin, bTokens, len(bTokens)-1); got != 8 {
		t.Fatalf("adopted %d tokens, want 8", got)
	}
	for i, c := range b.paged {
		if c == nil {
			continue
		}
		ta, tb := a.paged[i].(*PagedCache).Table(), c.(*PagedCache).Table()
		if !slices.Equal(ta[:2], tb) {
			t.Fatalf("layer %d: B holds %v, A %v", i, tb, ta)
		}
		for _, blk := range tb {
			if r := pool.layers[i].refs[blk]; r != 2 {
				t.Fatalf("layer %d block %d: %d holders, want 2", i, blk, r)
			}
		}
	}
	if got := usedPerLayer(pool); !slices.Equal(got, []int{5, 5, 0, 5}) {
		t.Fatalf("blocks used after the adoption %v, want A's 5 per layer", got)
	}
	// diverge: B writes its own tokens (a chunk, then single ones), A goes on
	b.write(s, []int32{8, 9, 10, 7, 7}, windows)
	for i := range 6 {
		a.write(s, ids(200+i, 1), windows)
		b.write(s, ids(300+i, 1), windows)
	}
	a.write(s, ids(210, 9), windows)

	a.free()
	b.free()
	st := pool.Stats()
	if st.Used != 0 || st.Free != st.Capacity || st.Cached != 3*4 {
		t.Fatalf("after freeing both: used %d, free %d of %d, cached %d (want 0, all, 12)", st.Used, st.Free, st.Capacity, st.Cached)
	}

	c := newSeqPair(t, pool)
	if got := pool.CachedPrefix(ids(100, 18)); got != 16 {
		t.Fatalf("cached prefix %d, want 16", got)
	}
	if got := c.adopt(pool, at16, ids(100, 18), 18); got != 16 {
		t.Fatalf("adopted %d tokens, want 16", got)
	}
	if st := pool.Stats(); st.Cached != 0 || st.Used != 12 {
		t.Fatalf("after the reuse: %+v", st)
	}
	c.write(s, ids(116, 2), windows)
	for i := range 5 {
		c.write(s, ids(400+i, 1), windows)
	}
	c.free()
}

// TestPrefixDedupe: a sequence that computed a prefix already cached
// keeps its own blocks; the index keeps the first ones, and the second
// sequence's later blocks chain after them.
func TestPrefixDedupe(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	pool, windows := prefixPool(t, 4, 64)
	defer pool.Free()
	s := &stream{r: rand.New(rand.NewPCG(3, 2)), hq: 2, hkv: 2, d: 32, dv: 32, dt: tensor.Float32}
	a, b := newSeqPair(t, pool), newSeqPair(t, pool)
	defer a.free()
	defer b.free()
	a.write(s, ids(0, 8), windows)
	b.write(s, ids(0, 12), windows)
	if n, _ := pool.RegisterPrefix(a.paged, a.tokens); n != 8 {
		t.Fatalf("A registered %d", n)
	}
	if n, _ := pool.RegisterPrefix(b.paged, b.tokens); n != 12 {
		t.Fatalf("B registered %d", n)
	}
	if e := pool.Stats().PrefixEntries; e != 3 {
		t.Fatalf("%d entries, want 3 (A's two, B's third)", e)
	}
	ta := a.paged[0].(*PagedCache).Table()
	e2 := pool.prefix.lookup("", ids(0, 12), 12)
	if len(e2) != 3 || e2[0].blocks[0] != ta[0] || e2[1].blocks[0] != ta[1] || e2[2].parent != e2[1] {
		t.Fatalf("chain %v for A's blocks %v", e2, ta)
	}
}

// TestPrefixEviction: with no free block left, a layer evicts the idle
// cached block released longest ago — a released sequence's tail first —
// and the entry goes with it for every layer (with its descendants, no
// longer reachable); adopting a prefix again makes it the most recent.
func TestPrefixEviction(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	const bs = 2
	pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: 8, Layers: []LayerSpec{{}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	s := &stream{r: rand.New(rand.NewPCG(3, 3)), hq: 2, hkv: 2, d: 32, dv: 32, dt: tensor.Float32}
	fill := func(caches []Cache, n int) {
		for _, c := range caches {
			k, v, q := s.chunk(n)
			c.UpdateAndFetch(k, v)
			tensor.Free(k, v, q)
		}
	}
	x, y := ids(0, 6), ids(50, 6)
	for _, toks := range [][]int32{x, y} {
		cs := pool.NewCaches()
		fill(cs, 6)
		if n, err := pool.RegisterPrefix(cs, toks); n != 6 || err != nil {
			t.Fatalf("registered %d (%v)", n, err)
		}
		for _, c := range cs {
			c.Free()
		}
	}
	cached := func() string { return fmt.Sprint(pool.CachedPrefix(x), pool.CachedPrefix(y)) }
	if got := cached(); got != "6 6" {
		t.Fatalf("cached %s", got)
	}
	// X again, adopted and released: now the most recent
	xs := pool.NewCaches()
	if n, _ := pool.AdoptPrefix(xs, x, 6); n != 6 {
		t.Fatalf("adopted %d", n)
	}
	for _, c := range xs {
		c.Free()
	}
	z := pool.NewCaches()
	steps := []struct {
		n    int
		want string
	}{
		{4, "6 6"}, // the two free blocks
		{2, "6 4"}, // Y's tail
		{2, "6 2"},
		{2, "6 0"},
		{2, "4 0"}, // then X's tail
	}
	for i, st := range steps {
		fill(z, st.n)
		if got := cached(); got != st.want {
			t.Fatalf("step %d: cached %s, want %s", i, got, st.want)
		}
	}
	for _, c := range z {
		c.Free()
	}
	// dropping X's head drops the entries chained after it
	pool.prefix.drop(pool.prefix.lookup("", x, 6)[0])
	if st := pool.Stats(); st.PrefixEntries != 0 || st.Cached != 0 || st.Free != st.Capacity {
		t.Fatalf("after dropping the head: %+v", st)
	}
}

// TestPrefixSlidingWindow: a sliding-window layer's blocks are registered
// while its ring holds positions in place (here one first prefill chunk
// longer than the window), stay intact when the ring then moves on, and
// give an adopting sequence what a contiguous cache restored from that
// prefix's state gives; once the ring has moved, nothing new registers.
func TestPrefixSlidingWindow(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	const bs = 4
	kinds := []pagedKind{
		{"full", LayerSpec{}, func() Cache { return NewKVCache() }},
		{"sliding8", LayerSpec{Window: 8}, func() Cache { return NewRotatingKVCache(8, 0) }},
	}
	pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: 64, Layers: []LayerSpec{kinds[0].spec, kinds[1].spec}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	windows := []int{0, 8}
	s := &stream{r: rand.New(rand.NewPCG(3, 4)), hq: 2, hkv: 2, d: 32, dv: 32, dt: tensor.Float32}
	mk := func() *seqPair {
		return &seqPair{t: t, paged: pool.NewCaches(), twin: []Cache{kinds[0].make(), kinds[1].make()}}
	}
	a := mk()
	defer a.free()
	a.write(s, ids(0, 12), windows)
	if n, _ := pool.RegisterPrefix(a.paged, a.tokens); n != 12 {
		t.Fatalf("registered %d, want 12", n)
	}
	states := make([]State, 2)
	for i, c := range a.twin {
		states[i] = c.State()
		defer states[i].Free()
	}
	for i := range 10 {
		a.write(s, ids(12+i, 1), windows)
	}
	a.write(s, ids(30, 5), windows)

	b := mk()
	defer b.free()
	if n, _ := pool.AdoptPrefix(b.paged, ids(0, 13), 12); n != 12 {
		t.Fatalf("adopted %d", n)
	}
	for i, c := range b.twin {
		if err := c.SetState(states[i]); err != nil {
			t.Fatal(err)
		}
	}
	b.tokens = ids(0, 12)
	b.write(s, ids(12, 1), windows)
	b.write(s, ids(13, 6), windows)
	for i := range 10 {
		b.write(s, ids(19+i, 1), windows)
	}
	c := mk()
	defer c.free()
	c.write(s, ids(500, 6), windows)
	c.write(s, ids(506, 6), windows) // appended: still in place
	c.write(s, ids(512, 6), windows) // the ring drops its oldest: no longer in place
	if n, _ := pool.RegisterPrefix(c.paged, c.tokens); n != 0 {
		t.Fatalf("registered %d tokens of a moved ring", n)
	}
}

// TestPagedChurn runs thousands of random steps of sequences that start
// (adopting cached prefixes), extend, register, clone, trim and end over
// a small pool whose layers run out of blocks (the failed write is
// retried after ending a sequence), checking after every step that the
// block accounting adds up (every block free, cached or held as often as
// the caches' tables say) and that the only live arrays are the pool's
// storage; at the end every block is free again.
func TestPagedChurn(t *testing.T) { pagedChurn(t, 3000) }

func pagedChurn(t *testing.T, steps int) {
	defer tensortest.NoLeaks(t)()
	const bs = 4
	r := rand.New(rand.NewPCG(5, 5))
	s := &stream{r: r, hq: 2, hkv: 2, d: 32, dv: 32, dt: tensor.BFloat16}
	kinds := []LayerSpec{{}, {Window: 12}, {Shared: true}, {Quant: QuantSpec{Bits: 4, GroupSize: 32}}, {Window: 9, Keep: 2, Quant: QuantSpec{Bits: 8, GroupSize: 32}}}
	pool, err := NewPool(PoolConfig{BlockSize: bs, Blocks: 48, Layers: kinds})
	if err != nil {
		t.Fatal(err)
	}
	base := tensor.LiveArrays()
	type seq struct {
		caches []Cache
		tokens []int32
	}
	var live []*seq
	var adopted, exhausted, registered int
	end := func(i int) {
		for _, c := range live[i].caches {
			if c != nil {
				c.Free()
			}
		}
		live = slices.Delete(live, i, i+1)
	}
	// write feeds n tokens to every layer, ending other sequences while a
	// layer is out of blocks; it gives up (ending sq) when sq is alone
	write := func(sq *seq, n int) bool {
		for {
			err := tensor.Try(func() {
				for _, c := range sq.caches {
					if c == nil {
						continue
					}
					k, v, q := s.chunk(n)
					func() {
						defer tensor.Free(k, v, q)
						m := c.MakeMask(n, 0, false)
						defer m.Free()
						o := Attention(q, c.UpdateAndFetch(k, v), m.Options(0))
						o.Free()
					}()
				}
			})
			if err == nil {
				break
			}
			if !errors.Is(err, ErrPoolExhausted) {
				t.Fatal(err)
			}
			exhausted++
			// layers before the failing one took the tokens: end this
			// sequence rather than leave its layers out of step
			i := slices.Index(live, sq)
			end(i)
			if len(live) > 0 {
				end(r.IntN(len(live)))
			}
			return false
		}
		sq.tokens = append(sq.tokens, ids(int(r.Int32N(50)), n)...)
		return true
	}
	prompts := [][]int32{ids(0, 20), ids(1000, 9), ids(2000, 33)}
	for stepN := range steps {
		switch op := r.IntN(10); {
		case op < 2 || len(live) == 0:
			sq := &seq{caches: pool.NewCaches()}
			p := prompts[r.IntN(len(prompts))]
			n, err := pool.AdoptPrefix(sq.caches, p, len(p)-1)
			if err != nil {
				t.Fatal(err)
			}
			sq.tokens = slices.Clone(p[:n])
			live = append(live, sq)
			if n > 0 {
				adopted++
			}
			if write(sq, len(p)-n) {
				sq.tokens = append(sq.tokens[:n], p[n:]...)
				got, err := pool.RegisterPrefix(sq.caches, sq.tokens)
				if err != nil {
					t.Fatal(err)
				}
				if got > n {
					registered++
				}
			}
		case op < 6:
			sq := live[r.IntN(len(live))]
			n := 1
			if r.IntN(4) == 0 {
				n = 2 + r.IntN(10)
			}
			write(sq, n)
		case op < 7:
			sq := live[r.IntN(len(live))]
			d := &seq{tokens: slices.Clone(sq.tokens)}
			for _, c := range sq.caches {
				if c == nil {
					d.caches = append(d.caches, nil)
				} else {
					d.caches = append(d.caches, c.Clone())
				}
			}
			live = append(live, d)
		case op < 8:
			sq := live[r.IntN(len(live))]
			n := r.IntN(6)
			ok := true
			for _, c := range sq.caches {
				ok = ok && (c == nil || c.IsTrimmable())
			}
			if ok && n <= len(sq.tokens) {
				for _, c := range sq.caches {
					if c != nil {
						c.Trim(n)
					}
				}
				sq.tokens = sq.tokens[:len(sq.tokens)-n]
			}
		default:
			end(r.IntN(len(live)))
		}
		if stepN%7 == 0 || stepN == steps-1 {
			checkAccounting(t, pool, func(yield func(*PagedCache) bool) {
				for _, sq := range live {
					for _, c := range sq.caches {
						if c != nil && !yield(c.(*PagedCache)) {
							return
						}
					}
				}
			})
			if got, want := tensor.LiveArrays(), base+int64(storageArrays(pool)); got != want {
				t.Fatalf("step %d: %d live arrays, want %d (the pool's storage)", stepN, got, want)
			}
		}
	}
	for len(live) > 0 {
		end(0)
	}
	pool.DropPrefixCache()
	st := pool.Stats()
	if st.Used != 0 || st.Cached != 0 || st.Free != st.Capacity || st.PrefixEntries != 0 {
		t.Fatalf("after the churn: %+v", st)
	}
	for i, lp := range pool.layers {
		if len(lp.free) != lp.nAlloc {
			t.Fatalf("layer %d: %d blocks on the free list of %d allocated", i, len(lp.free), lp.nAlloc)
		}
	}
	t.Logf("%d adoptions, %d registrations, %d exhausted writes; peak blocks %d of %d", adopted, registered, exhausted, st.Peak, st.Capacity)
	if adopted == 0 || registered == 0 || exhausted == 0 {
		t.Fatal("the churn did not exercise adoption, registration and exhaustion")
	}
	pool.Free()
}

func storageArrays(p *Pool) int {
	n := 0
	for _, lp := range p.layers {
		n += len(lp.parts)
	}
	return n
}

// checkAccounting recounts every block's holders from the caches' tables
// and checks each layer's free list, eviction list and counts against it.
func checkAccounting(t *testing.T, p *Pool, caches func(func(*PagedCache) bool)) {
	t.Helper()
	for li, lp := range p.layers {
		if lp.spec.Shared {
			continue
		}
		refs := make([]int32, lp.nAlloc)
		for c := range caches {
			if c.lp != lp {
				continue
			}
			for _, b := range append(slices.Clone(c.table), c.deferred...) {
				refs[b]++
			}
		}
		state := make([]int, lp.nAlloc) // 1 free, 2 idle cached
		for _, b := range lp.free {
			state[b]++
		}
		for b := lp.lru.head; b >= 0; b = lp.lru.next[b] {
			state[b] += 2
		}
		used := 0
		for b := range lp.nAlloc {
			switch {
			case refs[b] != lp.refs[b]:
				t.Fatalf("layer %d block %d: %d holders counted, %d recorded", li, b, refs[b], lp.refs[b])
			case refs[b] > 0 && state[b] != 0:
				t.Fatalf("layer %d block %d: held and listed (%d)", li, b, state[b])
			case refs[b] == 0 && lp.entries[b] == nil && state[b] != 1:
				t.Fatalf("layer %d block %d: unheld and uncached but list state %d", li, b, state[b])
			case refs[b] == 0 && lp.entries[b] != nil && state[b] != 2:
				t.Fatalf("layer %d block %d: idle cached but list state %d", li, b, state[b])
			}
			if refs[b] > 0 {
				used++
			}
		}
		if used != lp.used || lp.used > lp.capacity {
			t.Fatalf("layer %d: %d used counted, %d recorded", li, used, lp.used)
		}
	}
	for _, e := range p.prefix.entries {
		for i, b := range e.blocks {
			if b >= 0 && p.layers[i].entries[b] != e {
				t.Fatalf("entry %d: layer %d block %d registered elsewhere", e.id, i, b)
			}
		}
	}
}

// TestPrefixNamespaces: blocks registered in one namespace are never
// adopted from another (the same tokens under another adapter set have
// other keys and values); within a namespace they are.
func TestPrefixNamespaces(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	const bs = 4
	pool, windows := prefixPool(t, bs, 256)
	defer pool.Free()
	s := &stream{r: rand.New(rand.NewPCG(8, 1)), hq: 4, hkv: 2, d: 32, dv: 32, dt: tensor.BFloat16}
	a := newSeqPair(t, pool)
	defer a.free()
	a.write(s, ids(100, 9), windows)
	if n, err := pool.RegisterPrefixIn("lora:x", a.paged, a.tokens); err != nil || n != 8 {
		t.Fatalf("registered %d (%v)", n, err)
	}
	if n := pool.CachedPrefix(a.tokens); n != 0 {
		t.Errorf("the default namespace sees %d tokens of lora:x's prefix", n)
	}
	if n := pool.CachedPrefixIn("lora:y", a.tokens); n != 0 {
		t.Errorf("lora:y sees %d tokens of lora:x's prefix", n)
	}
	c := pool.NewCaches()
	defer func() {
		for _, x := range c {
			if x != nil {
				x.Free()
			}
		}
	}()
	if n, err := pool.AdoptPrefixIn("lora:x", c, a.tokens, len(a.tokens)-1); err != nil || n != 8 {
		t.Errorf("lora:x adopted %d tokens (%v), want 8", n, err)
	}
}
