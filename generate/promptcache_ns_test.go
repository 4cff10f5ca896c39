package generate_test

import (
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestPromptCacheNamespaces: an entry serves only its own namespace (an
// adapter set's KV never reaches the base model or another set), entries
// of one namespace replace only their own, and ClearIn frees one
// namespace alone.
func TestPromptCacheNamespaces(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	pc := generate.NewPromptCache(1 << 20)
	defer pc.Clear()
	p := toks(10, 0)
	pc.PutIn("a#1", p, filled(10, 0))
	take := func(ns string, prompt []int32) int {
		c, n := pc.TakeIn(ns, prompt)
		for _, x := range c {
			if x != nil {
				x.Free()
			}
		}
		return n
	}
	if n := take("a#1", toks(12, 0)); n != 10 {
		t.Errorf("own namespace: %d tokens, want 10", n)
	}
	if c, n := pc.Take(toks(12, 0)); c != nil || n != 0 {
		t.Errorf("base model got %d tokens of adapter a's KV", n)
	}
	if n := take("b#2", toks(12, 0)); n != 0 {
		t.Errorf("adapter b got %d tokens of adapter a's KV", n)
	}
	// the same tokens in another namespace are another entry; a longer
	// prompt in a's namespace replaces a's shorter one only
	pc.Put(p, filled(10, 0))
	pc.PutIn("b#2", toks(6, 0), filled(6, 0))
	pc.PutIn("a#1", toks(14, 0), filled(14, 0))
	if pc.Len() != 3 {
		t.Fatalf("%d entries, want 3 (base, a, b)", pc.Len())
	}
	for _, c := range []struct {
		ns   string
		want int
	}{{"", 10}, {"a#1", 14}, {"b#2", 6}} {
		if n := take(c.ns, toks(20, 0)); n != c.want {
			t.Errorf("namespace %q: %d tokens, want %d", c.ns, n, c.want)
		}
	}
	before := pc.Bytes()
	if n := pc.ClearIn("a#1"); n != 1 {
		t.Errorf("ClearIn freed %d entries, want 1", n)
	}
	if n := take("a#1", toks(20, 0)); n != 0 {
		t.Errorf("after ClearIn, adapter a still got %d tokens", n)
	}
	if n := take("", toks(20, 0)); n != 10 {
		t.Errorf("after ClearIn(a), base got %d tokens, want 10", n)
	}
	if pc.Len() != 2 || pc.Bytes() >= before {
		t.Errorf("after ClearIn: %d entries, %d bytes (was %d)", pc.Len(), pc.Bytes(), before)
	}
}

// TestPromptCacheNamespaceEviction: the byte cap is shared, LRU across
// namespaces.
func TestPromptCacheNamespaceEviction(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	one := filled(10, 0)
	per := one[0].Bytes()
	for _, c := range one {
		if c != nil {
			c.Free()
		}
	}
	pc := generate.NewPromptCache(2*per + per/2)
	defer pc.Clear()
	pc.PutIn("a", toks(10, 0), filled(10, 0))
	pc.PutIn("b", toks(10, 0), filled(10, 0))
	if c, _ := pc.TakeIn("a", toks(11, 0)); c != nil { // a is now the most recent
		kvFree(c)
	}
	pc.Put(toks(10, 0), filled(10, 0))
	if pc.Len() != 2 {
		t.Fatalf("%d entries, want 2", pc.Len())
	}
	if c, n := pc.TakeIn("b", toks(11, 0)); c != nil || n != 0 {
		t.Errorf("b, least recently used, was not evicted (%d tokens)", n)
	}
	for _, ns := range []string{"a", ""} {
		c, n := pc.TakeIn(ns, toks(11, 0))
		kvFree(c)
		if n != 10 {
			t.Errorf("namespace %q: %d tokens, want 10", ns, n)
		}
	}
}

func kvFree(cs []kv.Cache) {
	for _, c := range cs {
		if c != nil {
			c.Free()
		}
	}
}
