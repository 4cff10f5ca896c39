package grammar

import (
	"math/rand"
	"testing"
	"time"
)

func TestRealCompileTiming(t *testing.T) {
	rv := loadReal(t, "gemma3")
	g, err := JSONSchemaGrammar([]byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string"}}},"required":["name"]}`), JSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	cg := CompileGrammar(g, rv.ti, CompileOptions{})
	t.Logf("nodes %d compile %v stats %+v", g.NumNodes(), time.Since(t0), cg.Stats())
	text := `{"name":"Bob \"the\" builder","age":42,"tags":["a","bé"],"extra":{"k":[1,2.5e3,null]}}`
	rng := rand.New(rand.NewSource(1))
	for mode := 0; mode < 3; mode++ {
		ids := rv.tokenize(text, mode, rng)
		m := NewMatcher(cg)
		mask := make([]int32, rv.ti.BitmaskWords())
		var worst time.Duration
		for i, id := range ids {
			t1 := time.Now()
			m.FillNextTokenBitmask(mask)
			if d := time.Since(t1); d > worst {
				worst = d
			}
			if mask[id>>5]>>(uint(id)&31)&1 == 0 {
				t.Fatalf("mode %d: token %d %q masked out after %d tokens", mode, id, rv.ti.bytes[id], i)
			}
			if !m.AcceptToken(id) {
				t.Fatalf("mode %d: token %q rejected", mode, rv.ti.bytes[id])
			}
		}
		if !m.IsCompleted() {
			t.Fatal("not complete")
		}
		t.Logf("mode %d: %d tokens, worst fill %v", mode, len(ids), worst)
	}
}
