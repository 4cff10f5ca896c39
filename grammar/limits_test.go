package grammar

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// compileBounded compiles src of the given kind in a goroutine and fails
// the test if no result comes within 30 s: hostile inputs must end in a
// prompt error (or a bounded grammar), never in a compile running on.
func compileBounded(t *testing.T, kind, src string) (*Grammar, error) {
	t.Helper()
	type res struct {
		g   *Grammar
		err error
	}
	ch := make(chan res, 1)
	go func() {
		var r res
		switch kind {
		case "regex":
			r.g, r.err = RegexGrammar(src)
		case "ebnf":
			r.g, r.err = EBNFGrammar(src)
		default:
			r.g, r.err = JSONSchemaGrammar([]byte(src), JSONOptions{})
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		return r.g, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s %q: no result after 30 s", kind, src)
		return nil, nil
	}
}

// TestLimitsRejectHostileInput pins the inputs that used to run for
// seconds to minutes (found by fuzzing and by hand) to a compile error
// that names the location and the limit.
func TestLimitsRejectHostileInput(t *testing.T) {
	cases := []struct {
		kind, src string
		want      []string // substrings of the error
	}{
		{"ebnf", `root ::= ("a"{1000}){1000}`, []string{"line 1", "maxNFAStates"}},
		{"ebnf", "root ::= x{10000}\nx ::= (\"ab\"{100}){1,100}" + strings.Repeat(" x{10000}", 200), []string{"maxNFAStates"}},
		{"regex", `(a|b)*a(a|b){20}`, []string{"rule root", "maxDFANodes"}},
		{"json", `{"type":"string","pattern":"^(.*){50}x$","maxLength":4096}`, []string{"#/maxLength", "maxProductWork"}},
		{"json", `{"type":"string","pattern":"(a|b)*a(a|b){15}","maxLength":1000}`, []string{"#/maxLength", "limit maxProduct"}},
		{"json", `{"type":"string","maxLength":5000}`, []string{"#/maxLength", "4096"}},
		{"json", `{"type":"array","maxItems":10001}`, []string{"#/maxItems", "10000"}},
	}
	for _, c := range cases {
		_, err := compileBounded(t, c.kind, c.src)
		if err == nil {
			t.Errorf("%s %q: compiled, want a limit error", c.kind, c.src)
			continue
		}
		var ge *Error
		if !errors.As(err, &ge) {
			t.Errorf("%s %q: error %v is not a *grammar.Error", c.kind, c.src, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %q: error %q does not mention %q", c.kind, c.src, err, w)
			}
		}
	}
}

// TestLimitsLongChainsCompile covers inputs that are legitimate but made
// the fixpoints in trim and computeMinDone quadratic (one pass per node
// of a long chain): they took 16 s to minutes and must now compile, with
// the shortest completion still exact.
func TestLimitsLongChainsCompile(t *testing.T) {
	cases := []struct {
		kind, src string
		minDone   int32 // fewest bytes from the root to the end
	}{
		{"ebnf", `root ::= [^x]{5000}`, 5000},
		{"json", `{"type":"string","minLength":4000,"maxLength":4096}`, 4002},
		{"json", `{"type":"array","minItems":10000,"maxItems":10000,"items":{"type":"array","minItems":10000,"maxItems":10000}}`, -1},
	}
	for _, c := range cases {
		g, err := compileBounded(t, c.kind, c.src)
		if err != nil {
			t.Errorf("%s %q: %v", c.kind, c.src, err)
			continue
		}
		if c.minDone >= 0 && g.minDone[g.root] != c.minDone {
			t.Errorf("%s %q: shortest completion %d bytes, want %d", c.kind, c.src, g.minDone[g.root], c.minDone)
		}
	}
}

// TestExprSizeSaturates checks the up-front size estimate multiplies
// nested counts and stops at the limit instead of overflowing.
func TestExprSizeSaturates(t *testing.T) {
	a := eByte('a')
	if got := exprSize(eRep(eRep(a, 10, 10), 10, 10), 1<<20); got < 100 || got > 300 {
		t.Errorf("size of (a{10}){10} = %d, want about 100", got)
	}
	e := a
	for i := 0; i < 10; i++ {
		e = eRep(e, 1000, 1000)
	}
	if got := exprSize(e, 1<<20); got != 1<<20+1 {
		t.Errorf("size of 10 nested {1000} = %d, want saturated %d", got, 1<<20+1)
	}
}

// TestAmbiguousBounded: a grammar whose parses multiply with every byte (a
// recursive rule under nested repetition; FuzzEBNF found it taking 3.6 s
// for its 16th byte) stops at maxPositions: the bytes up to the bound are
// accepted, then FillNextTokenBitmask reports ErrAmbiguous and nothing
// more is accepted, every step in bounded work. A plain grammar's long
// text never comes near the bound.
func TestAmbiguousBounded(t *testing.T) {
	ti, ids := byteVocab(t)
	g, err := EBNFGrammar("0::=([^])0+++*")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(CompileGrammar(g, ti, CompileOptions{Lazy: true}))
	mask := make([]int32, ti.BitmaskWords())
	accepted, stopped := 0, false
	for i := 0; i < 64; i++ {
		err := m.FillNextTokenBitmask(mask)
		if errors.Is(err, ErrAmbiguous) {
			stopped = true
			if m.AcceptToken(ids["0"]) || m.AcceptString("0") || m.JumpForward() != "" {
				t.Fatal("accepted more after ErrAmbiguous")
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if mask['0'>>5]>>('0'&31)&1 != 1 || !m.AcceptToken(ids["0"]) {
			t.Fatalf("byte %d: '0' not allowed and accepted", i)
		}
		accepted++
	}
	if !stopped || accepted < 4 {
		t.Fatalf("accepted %d bytes, stopped %v: want a few bytes, then ErrAmbiguous", accepted, stopped)
	}
	// a rollback past the bound resumes
	if err := m.Rollback(1); err != nil {
		t.Fatal(err)
	}
	if err := m.FillNextTokenBitmask(mask); err != nil {
		t.Fatalf("after rolling back past the bound: %v", err)
	}
	// an unambiguous grammar over a long text stays far below the bound
	g2, err := EBNFGrammar(`root ::= ("a" | "b")+`)
	if err != nil {
		t.Fatal(err)
	}
	m2 := NewMatcher(CompileGrammar(g2, ti, CompileOptions{Lazy: true}))
	for i := 0; i < 2000; i++ {
		if err := m2.FillNextTokenBitmask(mask); err != nil {
			t.Fatal(err)
		}
		if !m2.AcceptToken(ids["ab"[i%2:i%2+1]]) {
			t.Fatalf("byte %d refused", i)
		}
	}
}
