package grammar

import (
	"strings"
	"testing"
)

// byteVocab is every single byte plus a few multi-byte tokens and an EOS.
func byteVocab(t testing.TB, extra ...string) (*TokenizerInfo, map[string]int) {
	t.Helper()
	var pieces []string
	for b := 0; b < 256; b++ {
		pieces = append(pieces, string([]byte{byte(b)}))
	}
	pieces = append(pieces, extra...)
	pieces = append(pieces, "<eos>")
	special := make([]bool, len(pieces))
	special[len(pieces)-1] = true
	v, err := NewSimpleVocab(VocabRaw, pieces, special, []int{len(pieces) - 1})
	if err != nil {
		t.Fatal(err)
	}
	ti, err := NewTokenizerInfo(v)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for i, p := range pieces {
		ids[p] = i
	}
	return ti, ids
}

// acceptText feeds text byte by byte and reports whether all of it was
// accepted and the grammar is complete.
func acceptBytes(m *Matcher, ids map[string]int, text string) (ok, done bool) {
	for i := 0; i < len(text); i++ {
		if !m.AcceptToken(ids[text[i:i+1]]) {
			return false, false
		}
	}
	return true, m.IsCompleted()
}

func TestBasicSchema(t *testing.T) {
	ti, ids := byteVocab(t, `{"`, `":`, `",`, `"}`)
	g, err := JSONSchemaGrammar([]byte(`{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name"],"additionalProperties":false}`), JSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cg := CompileGrammar(g, ti, CompileOptions{})
	cases := []struct {
		text     string
		ok, done bool
	}{
		{`{"name":"x","age":42}`, true, true},
		{`{"name":"x"}`, true, true},
		{`{"age":4`, false, false},
		{`{"name":"x","age":151}`, false, false},
		{`{"name":"x","age":15`, true, false},
		{`{"name":"x","zz":1}`, false, false},
	}
	for _, c := range cases {
		m := NewMatcher(cg)
		ok, done := acceptBytes(m, ids, c.text)
		if ok != c.ok || done != c.done {
			t.Errorf("%s: ok=%v done=%v, want %v %v", c.text, ok, done, c.ok, c.done)
		}
	}
	// Mask agrees with AcceptToken for every token at every prefix.
	text := `{"name":"a\"b","age":7}`
	m := NewMatcher(cg)
	mask := make([]int32, ti.BitmaskWords()+3)
	for i := 0; i <= len(text); i++ {
		if err := m.FillNextTokenBitmask(mask); err != nil {
			t.Fatal(err)
		}
		for id := 0; id < ti.VocabSize(); id++ {
			f := m.Fork().(*Matcher)
			want := f.AcceptToken(id)
			got := mask[id>>5]>>(uint(id)&31)&1 == 1
			if got != want {
				t.Fatalf("prefix %q token %q: mask %v accept %v", text[:i], ti.bytes[id], got, want)
			}
		}
		if i < len(text) && !m.AcceptToken(ids[text[i:i+1]]) {
			t.Fatalf("rejected %q at %d", text, i)
		}
	}
	if !m.IsCompleted() || !m.AcceptToken(ids["<eos>"]) || !m.IsTerminated() {
		t.Fatal("should terminate")
	}
	if err := m.Rollback(1); err != nil || m.IsTerminated() {
		t.Fatal("rollback")
	}
	if jf := NewMatcher(cg).JumpForward(); jf != `{"name":"` {
		t.Errorf("jump forward %q", jf)
	}
	_ = strings.Repeat
}
