package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

type schemaCase struct {
	name    string
	schema  string
	opt     JSONOptions
	valid   []string
	invalid []string
}

var handCases = []schemaCase{
	{name: "object", schema: `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150}},"required":["name"]}`,
		valid:   []string{`{"name":"Ann"}`, `{"name":"Bob","age":42}`, `{"name":"C","age":0,"other":[1,"x"]}`, `{"name":"日本語 \"q\"","age":150}`},
		invalid: []string{`{}`, `{"age":1}`, `{"name":1}`, `{"name":"x","age":151}`, `{"name":"x","age":-1}`, `{"name":"x","age":1.5}`, `{"name":"x",}`}},
	{name: "strict", schema: `{"type":"object","properties":{"a":{"type":"boolean"}},"additionalProperties":false}`,
		valid: []string{`{}`, `{"a":true}`}, invalid: []string{`{"b":1}`, `{"a":true,"a2":1}`, `{"a":null}`}},
	{name: "addl-schema", schema: `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}}`,
		valid: []string{`{"a":1,"b":"x","c":"y"}`, `{"zz":""}`}, invalid: []string{`{"b":1}`, `{"a":"x"}`}},
	{name: "patternProperties", schema: `{"type":"object","patternProperties":{"^x_":{"type":"integer"}},"additionalProperties":false}`,
		valid: []string{`{}`, `{"x_a":1,"x_b":2}`}, invalid: []string{`{"y":1}`, `{"x_a":"s"}`}},
	{name: "union", schema: `{"type":["string","integer","null"]}`,
		valid: []string{`"s"`, `12`, `null`, `-7`}, invalid: []string{`1.5`, `true`, `[]`}},
	{name: "enum", schema: `{"enum":["red","green",3,null,{"a":[1]}]}`,
		valid: []string{`"red"`, `3`, `null`, `{"a":[1]}`}, invalid: []string{`"blue"`, `4`, `{"a":[2]}`}},
	{name: "const", schema: `{"const":"only"}`, valid: []string{`"only"`}, invalid: []string{`"onl"`, `"only1"`}},
	{name: "anyOf", schema: `{"anyOf":[{"type":"string","maxLength":3},{"type":"number","minimum":10}]}`,
		valid: []string{`"abc"`, `10`, `11.5`, `1000`}, invalid: []string{`"abcd"`, `9`, `9.99`}},
	{name: "oneOf", schema: `{"oneOf":[{"type":"boolean"},{"type":"array","items":{"type":"integer"}}]}`,
		valid: []string{`true`, `[1,2]`, `[]`}, invalid: []string{`"x"`, `[1.5]`}},
	{name: "allOf", schema: `{"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}},"required":["b"]}]}`,
		valid: []string{`{"a":1,"b":"x"}`}, invalid: []string{`{"a":1}`, `{"b":"x"}`}},
	{name: "ref-recursive", schema: `{"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"c":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["v"],"additionalProperties":false}},"$ref":"#/$defs/t"}`,
		valid: []string{`{"v":1}`, `{"v":1,"c":[{"v":2,"c":[{"v":3}]},{"v":4}]}`}, invalid: []string{`{"v":1,"c":[{}]}`, `{"v":1,"c":[{"v":"x"}]}`}},
	{name: "definitions", schema: `{"definitions":{"p":{"type":"string","minLength":2}},"type":"array","items":{"$ref":"#/definitions/p"}}`,
		valid: []string{`["ab","cde"]`}, invalid: []string{`["a"]`}},
	{name: "items", schema: `{"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3}`,
		valid: []string{`[1]`, `[1,2.5,-3]`}, invalid: []string{`[]`, `[1,2,3,4]`, `["x"]`}},
	{name: "prefixItems", schema: `{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false}`,
		valid: []string{`[]`, `["a"]`, `["a",1]`}, invalid: []string{`[1]`, `["a",1,2]`}},
	{name: "prefixItems-rest", schema: `{"type":"array","prefixItems":[{"const":1}],"items":{"type":"string"},"minItems":2}`,
		valid: []string{`[1,"a"]`, `[1,"a","b"]`}, invalid: []string{`[1]`, `[1,2]`}},
	{name: "lengths", schema: `{"type":"string","minLength":2,"maxLength":4}`,
		valid: []string{`"ab"`, `"日本語!"`, `"\n\"x"`}, invalid: []string{`"a"`, `"abcde"`}},
	{name: "pattern", schema: `{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"}`,
		valid: []string{`"AB-123"`}, invalid: []string{`"Ab-123"`, `"AB-12"`}},
	{name: "pattern-search", schema: `{"type":"string","pattern":"o+k"}`,
		valid: []string{`"ok"`, `"xxoook yy"`}, invalid: []string{`"o k"`}},
	{name: "pattern-len", schema: `{"type":"string","pattern":"^[a-z]+$","maxLength":3}`,
		valid: []string{`"abc"`, `"a"`}, invalid: []string{`"abcd"`, `"A"`}},
	{name: "int-bounds", schema: `{"type":"integer","exclusiveMinimum":-5,"exclusiveMaximum":120}`,
		valid: []string{`-4`, `0`, `119`, `57`}, invalid: []string{`-5`, `120`, `1000`}},
	{name: "num-bounds", schema: `{"type":"number","minimum":-1,"maximum":1}`,
		valid: []string{`-1`, `1`, `0.5`, `-0.999`, `1.0`}, invalid: []string{`1.01`, `-1.5`, `2`}},
	{name: "num-excl", schema: `{"type":"number","exclusiveMinimum":0}`,
		valid: []string{`0.001`, `5`, `123456.5`}, invalid: []string{`0`, `-1`, `0.0`}},
	{name: "multipleOf", schema: `{"type":"integer","multipleOf":7,"minimum":0,"maximum":100}`,
		valid: []string{`0`, `7`, `98`}, invalid: []string{`8`, `105`, `-7`}},
	{name: "multipleOf-free", schema: `{"type":"integer","multipleOf":3}`,
		valid: []string{`-9`, `300`, `0`}, invalid: []string{`10`}},
	{name: "bool-schema", schema: `true`, valid: []string{`{"a":[1,2,{"b":null}]}`, `"x"`, `-1.5e3`}, invalid: []string{`{a:1}`}},
	{name: "ws-any", schema: `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}}`, opt: JSONOptions{Whitespace: AnyWhitespace},
		valid: []string{`{ "a" : [ 1 , 2 ] }`, "{\n\t\"a\":[]\n}", `{}`, `{ }`}, invalid: []string{`{"a":[1,]}`}},
	{name: "ws-indent", schema: `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"object"}}}`, opt: JSONOptions{Whitespace: Indent},
		valid: []string{"{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}", `{}`}, invalid: []string{`{"a":[1]}`, "{\n\"a\": []\n}"}},
	{name: "strict-option", schema: `{"type":"object","properties":{"a":{"type":"integer"}}}`, opt: JSONOptions{StrictProperties: true},
		valid: []string{`{"a":1}`}, invalid: []string{`{"a":1,"b":2}`}},
	{name: "no-type-keywords", schema: `{"properties":{"a":{"type":"integer"}},"required":["a"]}`,
		valid: []string{`{"a":1}`, `"str"`, `5`}, invalid: []string{`{}`, `{"a":"x"}`}},
}

func init() {
	for _, f := range formatNames {
		bad := map[string][]string{
			"date": {`"2024-02-30"`, `"2024-1-01"`}, "time": {`"25:00:00Z"`, `"12:00:00"`}, "date-time": {`"2024-01-01 10:00:00Z"`},
			"duration": {`"P"`, `"1D"`, `"PT"`}, "email": {`"no-at"`, `"a@@b"`}, "uuid": {`"123"`}, "uri": {`"not a uri"`},
			"ipv4": {`"256.1.1.1"`, `"01.2.3.4"`}, "ipv6": {`"1:2"`, `":::"`}, "hostname": {`"-bad.com"`, `"a..b"`},
		}[f]
		var v []string
		for _, s := range formatSamples[f] {
			v = append(v, jsonStr(s))
		}
		handCases = append(handCases, schemaCase{name: "format-" + f, schema: `{"type":"string","format":"` + f + `"}`, valid: v, invalid: bad})
	}
}

var (
	validatorOnce sync.Once
)

func compileValidator(t testing.TB, schema string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	if err := c.AddResource("mem://s.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem://s.json")
	if err != nil {
		t.Fatalf("reference validator rejects schema %s: %v", schema, err)
	}
	return sch
}

func refValid(sch *jsonschema.Schema, text string) bool {
	if !json.Valid([]byte(text)) {
		return false
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
	if err != nil {
		return false
	}
	return sch.Validate(inst) == nil
}

// corpus returns the hand-written cases plus n generated ones.
func corpus(t testing.TB, n int) []schemaCase {
	cases := append([]schemaCase(nil), handCases...)
	r := rand.New(rand.NewSource(7))
	for len(cases) < len(handCases)+n {
		gs := genSchema(r, 0)
		sc := schemaCase{name: fmt.Sprintf("gen%d", len(cases)), schema: renderSchema(gs)}
		for i := 0; i < 3; i++ {
			sc.valid = append(sc.valid, gs.valid(r, 0))
		}
		sc.invalid = mutate(r, sc.valid[0])
		cases = append(cases, sc)
	}
	return cases
}

// feed tokenizes text and reports where the matcher stopped accepting:
// -1 when all tokens and the stop token were accepted.
func feed(m *Matcher, rv *realVocab, ids []int) int {
	for i, id := range ids {
		if !m.AcceptToken(id) {
			return i
		}
	}
	if !m.AcceptToken(rv.eos) {
		return len(ids)
	}
	return -1
}

func TestSchemaCorpus(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	cases := corpus(t, n)
	for _, name := range []string{"gemma3", "llama3"} {
		rv := loadReal(t, name)
		nSchemas, nValid, nInvalid, nTok := 0, 0, 0, 0
		for _, sc := range cases {
			sch := compileValidator(t, sc.schema)
			g, err := JSONSchemaGrammar([]byte(sc.schema), sc.opt)
			if err != nil {
				t.Errorf("%s: compile %s: %v", sc.name, sc.schema, err)
				continue
			}
			cg := CompileGrammar(g, rv.ti, CompileOptions{Lazy: true})
			nSchemas++
			r := rand.New(rand.NewSource(int64(nSchemas)))
			for _, v := range sc.valid {
				if !refValid(sch, v) {
					t.Errorf("%s: test instance %s is not valid for the reference validator", sc.name, v)
					continue
				}
				nValid++
				for mode := 0; mode < 3; mode++ {
					ids := rv.tokenize(v, mode, r)
					if ids == nil {
						t.Fatalf("%s: cannot tokenize %q", name, v)
					}
					nTok += len(ids)
					if at := feed(NewMatcher(cg), rv, ids); at >= 0 {
						t.Errorf("%s/%s: valid %s (tokenization %d) rejected at token %d of %d\nschema %s", name, sc.name, v, mode, at, len(ids), sc.schema)
					}
				}
			}
			for _, v := range sc.invalid {
				if refValid(sch, v) {
					continue // the mutation happened to stay valid
				}
				nInvalid++
				for mode := 0; mode < 2; mode++ {
					ids := rv.tokenize(v, mode, r)
					if at := feed(NewMatcher(cg), rv, ids); at < 0 {
						t.Errorf("%s/%s: invalid %s accepted\nschema %s", name, sc.name, v, sc.schema)
					}
				}
			}
		}
		t.Logf("%s: %d schemas, %d valid instances (x3 tokenizations, %d tokens), %d invalid instances (x2)", name, nSchemas, nValid, nTok, nInvalid)
		if nSchemas < len(cases) {
			t.Errorf("only %d of %d schemas compiled", nSchemas, len(cases))
		}
	}
}
