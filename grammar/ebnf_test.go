package grammar

import (
	"strings"
	"testing"
)

func matchText(t *testing.T, g *Grammar, text string) (ok, done bool) {
	t.Helper()
	ti, _ := byteVocab(t)
	m := NewMatcher(CompileGrammar(g, ti, CompileOptions{Lazy: true}))
	if !m.AcceptString(text) {
		return false, false
	}
	return true, m.IsCompleted()
}

func TestEBNF(t *testing.T) {
	src := `
# a tiny arithmetic language
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor ("*" factor)*
factor ::= num | "(" expr ")"
num ::= [0-9]+ ("." [0-9]{1,3})?
`
	g, err := EBNFGrammar(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s        string
		ok, done bool
	}{
		{"1+2*(3-4.5)", true, true}, {"(1", true, false}, {"1+", true, false}, {"1++", false, false}, {"1.2345", false, false}, {"x", false, false},
	} {
		ok, done := matchText(t, g, c.s)
		if ok != c.ok || done != c.done {
			t.Errorf("%q: ok=%v done=%v, want %v %v", c.s, ok, done, c.ok, c.done)
		}
	}
	g, err = EBNFGrammar("root ::= [^a-c\\n]+ \"\\x41\" | \"é\"{2}\n")
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"zzA": true, "éé": true, "aA": false, "é": false} {
		ok, done := matchText(t, g, s)
		if (ok && done) != want {
			t.Errorf("%q: %v %v", s, ok, done)
		}
	}
	for _, bad := range []string{"", "root ::= x", "root ::= \"a", "root ::= [a-", "root ::= a\na ::= a \"x\"", "root := \"a\"", "root ::= (\"a\"", "root ::= \"a\"{3,1}", "root ::= \"a\"\nroot ::= \"b\""} {
		if _, err := EBNFGrammar(bad); err == nil {
			t.Errorf("%q: expected an error", bad)
		} else if !strings.Contains(err.Error(), "grammar:") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}

func TestRegexAndChoice(t *testing.T) {
	g, err := RegexGrammar(`^(\d{3})-[A-Za-z]+(x|yz)?$`)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"123-abc": true, "123-abcyz": true, "12-a": false, "123-": false} {
		ok, done := matchText(t, g, s)
		if (ok && done) != want {
			t.Errorf("regex %q: %v %v", s, ok, done)
		}
	}
	g, err = RegexGrammar(`(?i)ab|é.`)
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"AB": true, "aB": true, "é日": true, "é\n": false} {
		ok, done := matchText(t, g, s)
		if (ok && done) != want {
			t.Errorf("regex %q: %v %v", s, ok, done)
		}
	}
	for _, bad := range []string{`a(`, `\bfoo`, `[z-a]`, `a^b`} {
		if _, err := RegexGrammar(bad); err == nil {
			t.Errorf("%q: expected an error", bad)
		}
	}
	g, err = ChoiceGrammar([]string{"yes", "no", "maybe"})
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"yes": true, "no": true, "n": false, "nope": false} {
		ok, done := matchText(t, g, s)
		if (ok && done) != want {
			t.Errorf("choice %q: %v %v", s, ok, done)
		}
	}
	if _, err := ChoiceGrammar(nil); err == nil {
		t.Error("empty choice should fail")
	}
}
