package generate_test

import (
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// filled returns one plain (or rotating, window > 0) cache holding n
// tokens whose keys encode their position, so trimming can be checked.
func filled(n, window int) []kv.Cache {
	var c kv.Cache = kv.NewKVCache()
	if window > 0 {
		c = kv.NewRotatingKVCache(window, 0)
	}
	v := make([]float32, n*4)
	for i := range v {
		v[i] = float32(i / 4)
	}
	sc := tensor.NewScope()
	k := tensor.FromFloat32(v, []int{1, 1, n, 4}, tensor.Float32)
	c.UpdateAndFetch(k, k)
	sc.Close()
	return []kv.Cache{c, nil}
}

func toks(n int, base int32) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = base + int32(i)
	}
	return out
}

func TestPromptCacheLongestPrefix(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	pc := generate.NewPromptCache(1 << 20)
	defer pc.Clear()
	a := toks(10, 0)                         // 0..9
	b := append(toks(4, 0), toks(6, 100)...) // 0..3 100..105
	pc.Put(a, filled(10, 0))
	pc.Put(b, filled(10, 0))
	cases := []struct {
		prompt []int32
		want   int
	}{
		{toks(12, 0), 10},                         // extends a
		{toks(10, 0), 9},                          // equals a: at most len−1
		{toks(6, 0), 5},                           // shorter than a: trimmed
		{append(toks(4, 0), 100, 101, 7), 6},      // follows b
		{[]int32{50, 51}, 0},                      // nothing
		{append(toks(3, 0), 9, 9, 9, 9, 9, 9), 3}, // shared start only
	}
	for _, c := range cases {
		caches, n := pc.Take(c.prompt)
		if n != c.want {
			t.Errorf("Take(%v) = %d tokens, want %d", c.prompt, n, c.want)
		}
		if n > 0 {
			if caches[0].Offset() != n || caches[1] != nil {
				t.Errorf("Take(%v): offset %d", c.prompt, caches[0].Offset())
			}
			st := caches[0].State()
			keys := st.Arrays[0].Float32s()
			if len(keys) != 4*n || keys[len(keys)-1] != float32(n-1) {
				t.Errorf("Take(%v): trimmed keys end with %v", c.prompt, keys[len(keys)-4:])
			}
			st.Free()
			for _, c := range caches {
				if c != nil {
					c.Free()
				}
			}
		} else if caches != nil {
			t.Errorf("no match but caches %v", caches)
		}
	}
	if pc.Len() != 2 {
		t.Errorf("%d entries", pc.Len())
	}
}

func TestPromptCacheRotatingWholeOnly(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	pc := generate.NewPromptCache(1 << 20)
	defer pc.Clear()
	pc.Put(toks(10, 0), filled(10, 6)) // window 6, wrapped: not trimmable
	if _, n := pc.Take(toks(8, 0)); n != 0 {
		t.Errorf("a wrapped rotating cache matched %d tokens of a shorter prompt", n)
	}
	caches, n := pc.Take(toks(11, 0))
	if n != 10 {
		t.Errorf("full match gave %d", n)
	}
	for _, c := range caches {
		if c != nil {
			c.Free()
		}
	}
	pc.Put(toks(4, 50), filled(4, 6)) // not wrapped: trimmable
	caches, n = pc.Take(append(toks(3, 50), 1))
	if n != 3 {
		t.Errorf("unwrapped rotating cache: %d", n)
	}
	for _, c := range caches {
		if c != nil {
			c.Free()
		}
	}
}

func TestPromptCacheEviction(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	one := filled(10, 0)
	size := one[0].Bytes()
	one[0].Free()
	pc := generate.NewPromptCache(2*size + size/2)
	pc.Put(toks(10, 0), filled(10, 0))
	pc.Put(toks(10, 100), filled(10, 0))
	// Touch the first: the second is now least recent.
	for _, c := range must(pc.Take(toks(11, 0))) {
		if c != nil {
			c.Free()
		}
	}
	pc.Put(toks(10, 200), filled(10, 0))
	if pc.Len() != 2 || pc.Bytes() != 2*size {
		t.Errorf("%d entries, %d bytes", pc.Len(), pc.Bytes())
	}
	if _, n := pc.Take(toks(11, 100)); n != 0 {
		t.Error("the least recently used entry survived")
	}
	pc.Put(toks(10, 300), filled(10*4, 0)) // larger than the cap: dropped
	if pc.Len() != 2 {
		t.Errorf("oversized entry stored: %d entries", pc.Len())
	}
	// A longer entry replaces its trimmable prefix.
	pc.Put(toks(15, 0), filled(15, 0))
	if pc.Len() != 2 {
		t.Errorf("prefix entry kept: %d entries", pc.Len())
	}
	pc.Clear()
	if pc.Len() != 0 || pc.Bytes() != 0 {
		t.Error("Clear left entries")
	}
}

func must(c []kv.Cache, _ int) []kv.Cache { return c }

// TestPromptCacheConcurrent hammers Take and Put from several goroutines
// (run with -race to check the locking).
func TestPromptCacheConcurrent(t *testing.T) {
	pc := generate.NewPromptCache(1 << 20)
	defer pc.Clear()
	var mu sync.Mutex // tensor scopes are process-wide: serialise array creation
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				mu.Lock()
				c := filled(4+i%3, 0)
				mu.Unlock()
				pc.Put(toks(4+i%3, int32(g*10)), c)
				got, _ := pc.Take(toks(8, int32(g*10)))
				mu.Lock()
				for _, c := range got {
					if c != nil {
						c.Free()
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if pc.Len() == 0 {
		t.Error("no entries")
	}
}
