package grammar

import (
	"math/rand"
	"testing"
)

// TestMaskMatchesAccept checks the token-mask cache against the parser on
// the full real vocabularies: at several states of several grammars, a
// token's mask bit must equal whether AcceptToken takes it.
func TestMaskMatchesAccept(t *testing.T) {
	schemas := []struct{ schema, text string }{
		{`{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer","minimum":-5,"maximum":300}},"required":["name"]}`, `{"name":"a\"é日","n":-3,"x_y":[1,{"k":null}]}`},
		{`{"type":"array","items":{"type":"number","exclusiveMinimum":0},"maxItems":4}`, `[1.5,0.25,7]`},
		{`{"anyOf":[{"type":"string","format":"date-time"},{"type":"string","pattern":"^[a-z]+[0-9]*$","maxLength":6}]}`, `"2024-01-02T03:04:05Z"`},
		{`{"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"c":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/t"}`, `{"v":1,"c":[{"v":2,"c":[]}]}`},
	}
	for _, name := range []string{"gemma3", "llama3"} {
		rv := loadReal(t, name)
		r := rand.New(rand.NewSource(3))
		checked := 0
		for _, s := range schemas {
			g, err := JSONSchemaGrammar([]byte(s.schema), JSONOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cg := CompileGrammar(g, rv.ti, CompileOptions{Lazy: true})
			ids := rv.tokenize(s.text, 1, r)
			m := NewMatcher(cg)
			mask := make([]int32, rv.ti.BitmaskWords())
			for i := 0; i <= len(ids); i++ {
				if i%2 == 0 || i == len(ids) {
					if err := m.FillNextTokenBitmask(mask); err != nil {
						t.Fatal(err)
					}
					for id := 0; id < rv.ti.size; id++ {
						got := mask[id>>5]>>(uint(id)&31)&1 == 1
						want := m.AcceptToken(id)
						if want {
							m.Rollback(1)
						}
						if got != want {
							t.Fatalf("%s %s after %d tokens: token %d %q mask=%v accept=%v", name, s.schema, i, id, rv.ti.bytes[id], got, want)
						}
					}
					checked++
				}
				if i < len(ids) && !m.AcceptToken(ids[i]) {
					t.Fatalf("rejected %q", rv.ti.bytes[ids[i]])
				}
			}
		}
		t.Logf("%s: %d states checked over the whole vocabulary", name, checked)
	}
}
