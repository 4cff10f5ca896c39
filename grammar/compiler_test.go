package grammar

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestCompilerCache(t *testing.T) {
	ti, _ := byteVocab(t)
	c := NewCompiler(ti, CompileOptions{}, 2)
	var wg sync.WaitGroup
	res := make([]*CompiledGrammar, 8)
	for i := range res {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cg, err := c.JSONSchema(`{"type":"integer"}`, JSONOptions{})
			if err != nil {
				t.Error(err)
			}
			res[i] = cg
		}(i)
	}
	wg.Wait()
	for _, r := range res {
		if r != res[0] {
			t.Fatal("same schema compiled twice")
		}
	}
	if cg, _ := c.JSONSchema(`{"type":"integer"}`, JSONOptions{Whitespace: AnyWhitespace}); cg == res[0] {
		t.Fatal("options must be part of the key")
	}
	if _, err := c.Regex("a+"); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 2 {
		t.Fatalf("cache holds %d, want 2 (bounded)", c.Len())
	}
	if _, err := c.Choice([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EBNF(`root ::= "x"`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JSONObject(JSONOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestSchemaErrors(t *testing.T) {
	cases := []struct{ schema, loc, kw string }{
		{`{"type":"object","properties":{"a":{"type":"string","pattern":"(("}}}`, "#/properties/a/pattern", "pattern"},
		{`{"type":"strin"}`, "#/type", "type"},
		{`{"not":{"type":"string"}}`, "#/not", "not"},
		{`{"$ref":"#/$defs/missing"}`, "#", "$ref"},
		{`{"$ref":"http://x/y.json"}`, "#", "$ref"},
		{`{"type":"string","format":"credit-card"}`, "#/format", "format"},
		{`{"type":"array","items":{"type":"integer","multipleOf":0.5}}`, "#/items/multipleOf", "multipleOf"},
		{`{"type":"string","maxLength":-1}`, "#/maxLength", "maxLength"},
		{`{"anyOf":[]}`, "#/anyOf", "anyOf"},
		{`{"type":"object","required":["a"],"additionalProperties":false}`, "#/required", "required"},
		{`{"enum":[1,2],"type":"string"}`, "#/enum", "enum"},
		{`{"type":"integer","minimum":1e999}`, "#/minimum", "minimum"},
	}
	for _, c := range cases {
		_, err := JSONSchemaGrammar([]byte(c.schema), JSONOptions{})
		var ge *Error
		if !errors.As(err, &ge) {
			t.Errorf("%s: want *Error, got %v", c.schema, err)
			continue
		}
		if ge.Location != c.loc || ge.Keyword != c.kw {
			t.Errorf("%s: got %s / %s (%v), want %s / %s", c.schema, ge.Location, ge.Keyword, err, c.loc, c.kw)
		}
	}
	for _, bad := range []string{``, `{`, `[1,2]`, `{"type":1}`, `{"a":1} x`} {
		if _, err := JSONSchemaGrammar([]byte(bad), JSONOptions{}); err == nil || !strings.HasPrefix(err.Error(), "grammar:") {
			t.Errorf("%q: error %v", bad, err)
		}
	}
}
