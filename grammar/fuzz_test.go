package grammar

import (
	"errors"
	"testing"
)

// exercise runs a compiled grammar a little: masks and a few bytes.
func exercise(t *testing.T, g *Grammar, input string) {
	ti, ids := byteVocab(t)
	m := NewMatcher(CompileGrammar(g, ti, CompileOptions{Lazy: true}))
	mask := make([]int32, ti.BitmaskWords())
	for i := 0; i < len(input) && i < 16; i++ {
		if err := m.FillNextTokenBitmask(mask); errors.Is(err, ErrAmbiguous) {
			if m.AcceptToken(ids[input[i:i+1]]) || m.JumpForward() != "" {
				t.Fatal("a matcher past its parse bound accepted more")
			}
			return
		} else if err != nil {
			t.Fatal(err)
		}
		allowed := mask[input[i]>>5]>>(uint(input[i])&31)&1 == 1
		if m.AcceptToken(ids[input[i:i+1]]) != allowed {
			t.Fatalf("mask and AcceptToken disagree on %q", input[i])
		}
	}
	_ = m.JumpForward()
}

func FuzzJSONSchema(f *testing.F) {
	for _, c := range handCases {
		f.Add(c.schema, c.valid[0])
	}
	f.Add(`{"type":"integer","minimum":-3,"exclusiveMaximum":1e3}`, "12")
	f.Fuzz(func(t *testing.T, schema, input string) {
		g, err := JSONSchemaGrammar([]byte(schema), JSONOptions{})
		if err != nil {
			return
		}
		if g.NumNodes() > 20000 {
			return
		}
		exercise(t, g, input)
	})
}

func FuzzRegex(f *testing.F) {
	for _, s := range []string{`a+b*`, `^\d{2,4}$`, `(?i)x|[^a-z]`, `.{0,3}é`, `(a|b)*c?`} {
		f.Add(s, "aab")
	}
	f.Fuzz(func(t *testing.T, pattern, input string) {
		g, err := RegexGrammar(pattern)
		if err != nil || g.NumNodes() > 20000 {
			return
		}
		exercise(t, g, input)
	})
}

func FuzzEBNF(f *testing.F) {
	f.Add("root ::= \"a\" b*\nb ::= [x-z] | \"(\" root \")\"", "a(a)x")
	f.Add(`root ::= ([^"]{1,3} "|")+`, "ab|")
	f.Fuzz(func(t *testing.T, src, input string) {
		g, err := EBNFGrammar(src)
		if err != nil || g.NumNodes() > 20000 {
			return
		}
		exercise(t, g, input)
	})
}
