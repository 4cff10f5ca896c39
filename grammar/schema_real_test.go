package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// realSchemaCase is one schema of testdata/schemas/pydantic.json: the
// shapes Pydantic v2's model_json_schema() writes for common field types,
// with texts it must and must not allow.
type realSchemaCase struct {
	Name    string          `json:"name"`
	Schema  json.RawMessage `json:"schema"`
	Valid   []string        `json:"valid"`
	Invalid []string        `json:"invalid"`
}

// refValidator compiles schema with the reference validator, or returns
// nil when it cannot (its Go regexps lack lookaheads, which Pydantic's
// Decimal pattern has).
func refValidator(schema string) *jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return nil
	}
	if c.AddResource("mem://s.json", doc) != nil {
		return nil
	}
	sch, err := c.Compile("mem://s.json")
	if err != nil {
		return nil
	}
	return sch
}

// TestPydanticSchemas: every Pydantic-shaped schema compiles, allows its
// valid texts and refuses its invalid ones; the reference validator, where
// it can read the schema, agrees that the valid texts are valid (it does
// not know Pydantic's own formats, so it cannot judge the invalid ones).
func TestPydanticSchemas(t *testing.T) {
	raw, err := os.ReadFile("testdata/schemas/pydantic.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []realSchemaCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("only %d schemas", len(cases))
	}
	ti, ids := byteVocab(t)
	for _, c := range cases {
		g, err := JSONSchemaGrammar(c.Schema, JSONOptions{})
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		cg := CompileGrammar(g, ti, CompileOptions{Lazy: true})
		ref := refValidator(string(c.Schema))
		for _, v := range c.Valid {
			if ref != nil && !refValid(ref, v) {
				t.Errorf("%s: test text %s is invalid for the reference validator", c.Name, v)
			}
			if ok, done := acceptBytes(NewMatcher(cg), ids, v); !ok || !done {
				t.Errorf("%s: valid %s refused (accepted %v, complete %v)", c.Name, v, ok, done)
			}
		}
		for _, v := range c.Invalid {
			if ok, done := acceptBytes(NewMatcher(cg), ids, v); ok && done {
				t.Errorf("%s: invalid %s allowed", c.Name, v)
			}
		}
	}
}

// TestWideNumericBounds: integer and number bounds far beyond float64's
// exact range (zod's ±(2^53-1), int64, 10^30) allow exactly the numbers
// inside them, checked with big-integer arithmetic on random texts near
// the bounds.
func TestWideNumericBounds(t *testing.T) {
	ti, ids := byteVocab(t)
	r := rand.New(rand.NewSource(3))
	pow := func(b, e int64) *big.Int { return new(big.Int).Exp(big.NewInt(b), big.NewInt(e), nil) }
	safe := new(big.Int).Sub(pow(2, 53), big.NewInt(1))
	i64 := new(big.Int).Sub(pow(2, 63), big.NewInt(1))
	cases := []struct {
		lo, hi     *big.Int // nil: none
		exLo, exHi bool
		integer    bool
	}{
		{new(big.Int).Neg(safe), safe, false, false, true},
		{new(big.Int).Neg(new(big.Int).Add(i64, big.NewInt(1))), i64, false, false, true},
		{pow(10, 30), nil, true, false, true},
		{nil, new(big.Int).Neg(pow(10, 20)), false, true, true},
		{new(big.Int).Neg(pow(10, 30)), pow(10, 30), false, false, false},
		{big.NewInt(0), safe, true, false, false},
	}
	for _, c := range cases {
		m := map[string]any{}
		if c.integer {
			m["type"] = "integer"
		} else {
			m["type"] = "number"
		}
		if c.lo != nil {
			m[map[bool]string{false: "minimum", true: "exclusiveMinimum"}[c.exLo]] = json.Number(c.lo.String())
		}
		if c.hi != nil {
			m[map[bool]string{false: "maximum", true: "exclusiveMaximum"}[c.exHi]] = json.Number(c.hi.String())
		}
		schema, _ := json.Marshal(m)
		g, err := JSONSchemaGrammar(schema, JSONOptions{})
		if err != nil {
			t.Errorf("%s: %v", schema, err)
			continue
		}
		cg := CompileGrammar(g, ti, CompileOptions{Lazy: true})
		var probes []*big.Int
		for _, b := range []*big.Int{c.lo, c.hi} {
			if b == nil {
				continue
			}
			for d := int64(-3); d <= 3; d++ {
				probes = append(probes, new(big.Int).Add(b, big.NewInt(d)))
			}
			for k := 0; k < 20; k++ {
				x := new(big.Int).Rand(r, new(big.Int).Abs(b))
				if r.Intn(2) == 0 {
					x.Neg(x)
				}
				probes = append(probes, x, new(big.Int).Mul(x, big.NewInt(10)))
			}
		}
		for _, x := range probes {
			in := (c.lo == nil || x.Cmp(c.lo) > 0 || (x.Cmp(c.lo) == 0 && !c.exLo)) &&
				(c.hi == nil || x.Cmp(c.hi) < 0 || (x.Cmp(c.hi) == 0 && !c.exHi))
			texts := []string{x.String()}
			if !c.integer {
				texts = append(texts, x.String()+".5")
			}
			for _, text := range texts {
				want := in
				if strings.HasSuffix(text, ".5") { // x+0.5 (or x-0.5 below zero) against the bounds
					f, _ := new(big.Rat).SetString(text)
					want = (c.lo == nil || f.Cmp(new(big.Rat).SetInt(c.lo)) > 0 || (f.Cmp(new(big.Rat).SetInt(c.lo)) == 0 && !c.exLo)) &&
						(c.hi == nil || f.Cmp(new(big.Rat).SetInt(c.hi)) < 0 || (f.Cmp(new(big.Rat).SetInt(c.hi)) == 0 && !c.exHi))
				}
				ok, done := acceptBytes(NewMatcher(cg), ids, text)
				if got := ok && done; got != want {
					t.Errorf("%s: %s allowed %v, want %v", schema, text, got, want)
				}
			}
		}
	}
	// Beyond maxBoundDigits the bound is refused with its location.
	_, err := JSONSchemaGrammar([]byte(fmt.Sprintf(`{"type":"integer","maximum":1%s}`, strings.Repeat("0", 500))), JSONOptions{})
	var ge *Error
	if !errors.As(err, &ge) || ge.Location != "#/maximum" {
		t.Errorf("a 501-digit bound: %v", err)
	}
}
