package grammar

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
)

// gschema is a randomly generated JSON Schema that can also produce
// instances: valid ones in the canonical layout the grammar generates
// (compact, declared properties in schema order) and mutated ones that
// are usually invalid (each is classified by the reference validator).
type gschema struct {
	kind      string // string integer number boolean null enum const array tuple object anyOf oneOf allOf ref nullable
	minL      int
	maxL      int // -1 none
	pattern   string
	patGen    func(r *rand.Rand) string
	format    string
	lo, hi    *int
	exLo      bool
	exHi      bool
	mult      int
	values    []string // enum / const literals (JSON)
	items     *gschema
	prefix    []*gschema
	minI      int
	maxI      int // -1 none
	props     []gprop
	addl      string // "" absent, "false", "true", "schema"
	addS      *gschema
	subs      []*gschema
	refName   string
	recursive bool
}

type gprop struct {
	name string
	s    *gschema
	req  bool
}

var patterns = []struct {
	re  string
	gen func(r *rand.Rand) string
}{
	{`^[a-z]{2,6}$`, func(r *rand.Rand) string { return randFrom(r, "abcdefghijklmnopqrstuvwxyz", 2+r.Intn(5)) }},
	{`^[A-Z][a-z]+-[0-9]{3}$`, func(r *rand.Rand) string {
		return randFrom(r, "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 1) + randFrom(r, "abcdefghij", 1+r.Intn(6)) + "-" + randFrom(r, "0123456789", 3)
	}},
	{`^\d+(\.\d{1,2})?$`, func(r *rand.Rand) string { return strconv.Itoa(r.Intn(5000)) + ".5" }},
	{`^(red|green|blue)$`, func(r *rand.Rand) string { return []string{"red", "green", "blue"}[r.Intn(3)] }},
	{`^\+?[0-9 ]{7,12}$`, func(r *rand.Rand) string { return "+" + randFrom(r, "0123456789 ", 7+r.Intn(5)) }},
	{`abc`, func(r *rand.Rand) string {
		return randFrom(r, "xyz", r.Intn(3)) + "abc" + randFrom(r, "é ", r.Intn(3))
	}},
	{`^[^"\\]*$`, func(r *rand.Rand) string { return randFrom(r, "hello wörld!", r.Intn(8)) }},
}

var formatSamples = map[string][]string{
	"date":      {"2024-01-31", "1999-12-01", "2023-02-28"},
	"time":      {"12:30:00Z", "23:59:59+01:00", "00:00:00.5Z"},
	"date-time": {"2024-05-06T07:08:09Z", "2020-11-30T23:00:00.123-05:30"},
	"duration":  {"P1D", "PT5M", "P2Y3M4DT5H6M7S", "P3W"},
	"email":     {"a.b@example.com", "user+x@mail.example.org"},
	"uuid":      {"123e4567-e89b-12d3-a456-426614174000"},
	"uri":       {"https://example.com/a/b?x=1#f", "ftp://files.example.org/"},
	"ipv4":      {"192.168.0.1", "8.8.8.8", "255.255.255.0"},
	"ipv6":      {"::1", "2001:db8::8a2e:370:7334", "fe80::1", "1:2:3:4:5:6:7:8"},
	"hostname":  {"example.com", "a-b.c-d.example", "localhost"},
}

var formatNames = []string{"date", "time", "date-time", "duration", "email", "uuid", "uri", "ipv4", "ipv6", "hostname"}

func randFrom(r *rand.Rand, alphabet string, n int) string {
	rs := []rune(alphabet)
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteRune(rs[r.Intn(len(rs))])
	}
	return b.String()
}

func ip(v int) *int { return &v }

func genSchema(r *rand.Rand, depth int) *gschema {
	kinds := []string{"string", "integer", "number", "boolean", "null", "enum", "const", "nullable"}
	if depth < 3 {
		kinds = append(kinds, "array", "tuple", "object", "object", "object", "anyOf", "oneOf", "allOf", "ref")
	}
	k := kinds[r.Intn(len(kinds))]
	s := &gschema{kind: k, maxL: -1, maxI: -1}
	switch k {
	case "string":
		switch r.Intn(5) {
		case 0:
			s.minL = r.Intn(3)
			s.maxL = s.minL + r.Intn(8)
		case 1:
			p := patterns[r.Intn(len(patterns))]
			s.pattern, s.patGen = p.re, p.gen
		case 2:
			s.format = formatNames[r.Intn(len(formatNames))]
		}
	case "integer", "number":
		if r.Intn(2) == 0 {
			s.lo = ip(r.Intn(200) - 100)
			s.exLo = r.Intn(3) == 0
		}
		if r.Intn(2) == 0 {
			base := -50
			if s.lo != nil {
				base = *s.lo + 2
			}
			s.hi = ip(base + r.Intn(300))
			s.exHi = r.Intn(3) == 0
		}
		if k == "integer" && r.Intn(4) == 0 {
			s.mult = 2 + r.Intn(9)
			if s.lo != nil && s.hi != nil && *s.hi-*s.lo < 3*s.mult {
				s.hi = ip(*s.lo + 3*s.mult + 1)
			}
		}
	case "enum":
		pool := []string{`"a"`, `"b c"`, `1`, `2.5`, `null`, `true`, `"ü"`, `[1,2]`, `{"x":1}`, `"q\"x"`}
		r.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		s.values = pool[:1+r.Intn(4)]
	case "const":
		s.values = []string{[]string{`"fixed"`, `42`, `{"k":[true,null]}`, `false`}[r.Intn(4)]}
	case "nullable":
		s.subs = []*gschema{genSchema(r, 3)}
		for s.subs[0].kind == "null" || s.subs[0].kind == "nullable" || s.subs[0].kind == "enum" || s.subs[0].kind == "const" {
			s.subs[0] = genSchema(r, 3)
		}
	case "array":
		s.items = genSchema(r, depth+1)
		if r.Intn(2) == 0 {
			s.minI = r.Intn(3)
		}
		if r.Intn(2) == 0 {
			s.maxI = s.minI + r.Intn(4)
		}
	case "tuple":
		for i := 0; i < 1+r.Intn(3); i++ {
			s.prefix = append(s.prefix, genSchema(r, depth+1))
		}
		if r.Intn(2) == 0 {
			s.items = genSchema(r, 3)
		}
		s.minI = r.Intn(len(s.prefix) + 1)
	case "object":
		n := r.Intn(5)
		used := map[string]bool{}
		names := []string{"id", "name", "age", "tags", "value", "x", "is_ok", "créé", "a b", "data", "count", "kind"}
		for i := 0; i < n; i++ {
			nm := names[r.Intn(len(names))]
			if used[nm] {
				continue
			}
			used[nm] = true
			s.props = append(s.props, gprop{nm, genSchema(r, depth+1), r.Intn(2) == 0})
		}
		s.addl = []string{"", "false", "false", "true", "schema"}[r.Intn(5)]
		if s.addl == "schema" {
			s.addS = genSchema(r, 3)
		}
	case "anyOf", "oneOf":
		// Branches of different types so oneOf is exact.
		tks := []string{"string", "integer", "boolean", "null", "object", "array"}
		r.Shuffle(len(tks), func(i, j int) { tks[i], tks[j] = tks[j], tks[i] })
		for i := 0; i < 2+r.Intn(2); i++ {
			var b *gschema
			for {
				b = genSchema(r, depth+1)
				if b.kind == tks[i] {
					break
				}
				if tks[i] == "object" || tks[i] == "array" {
					if b.kind == "string" || depth+1 >= 3 {
						b = &gschema{kind: tks[i], maxL: -1, maxI: -1, items: &gschema{kind: "integer", maxL: -1, maxI: -1}}
						break
					}
				}
			}
			s.subs = append(s.subs, b)
		}
	case "allOf":
		a := &gschema{kind: "object", maxL: -1, maxI: -1, props: []gprop{{"p", genSchema(r, depth+1), true}}}
		b := &gschema{kind: "object", maxL: -1, maxI: -1, props: []gprop{{"q", genSchema(r, depth+1), r.Intn(2) == 0}}}
		s.subs = []*gschema{a, b}
	case "ref":
		if r.Intn(2) == 0 {
			s.recursive = true
		} else {
			s.subs = []*gschema{genSchema(r, depth+1)}
		}
	}
	return s
}

// schemaJSON renders s; defs collects $defs entries.
func (s *gschema) schemaJSON(defs map[string]string, counter *int) string {
	num := func(k string, v int) string { return fmt.Sprintf(`,%q:%d`, k, v) }
	switch s.kind {
	case "string":
		out := `{"type":"string"`
		if s.maxL >= 0 {
			out += num("minLength", s.minL) + num("maxLength", s.maxL)
		}
		if s.pattern != "" {
			b, _ := json.Marshal(s.pattern)
			out += `,"pattern":` + string(b)
		}
		if s.format != "" {
			out += `,"format":"` + s.format + `"`
		}
		return out + "}"
	case "integer", "number":
		out := `{"type":"` + s.kind + `"`
		if s.lo != nil {
			if s.exLo {
				out += num("exclusiveMinimum", *s.lo)
			} else {
				out += num("minimum", *s.lo)
			}
		}
		if s.hi != nil {
			if s.exHi {
				out += num("exclusiveMaximum", *s.hi)
			} else {
				out += num("maximum", *s.hi)
			}
		}
		if s.mult > 0 {
			out += num("multipleOf", s.mult)
		}
		return out + "}"
	case "boolean", "null":
		return `{"type":"` + s.kind + `"}`
	case "enum":
		return `{"enum":[` + strings.Join(s.values, ",") + `]}`
	case "const":
		return `{"const":` + s.values[0] + `}`
	case "nullable":
		inner := s.subs[0].schemaJSON(defs, counter)
		if s.subs[0].kind == "string" || s.subs[0].kind == "integer" || s.subs[0].kind == "number" || s.subs[0].kind == "boolean" {
			return strings.Replace(inner, `"type":"`+s.subs[0].kind+`"`, `"type":["`+s.subs[0].kind+`","null"]`, 1)
		}
		return `{"anyOf":[` + inner + `,{"type":"null"}]}`
	case "array":
		out := `{"type":"array","items":` + s.items.schemaJSON(defs, counter)
		if s.minI > 0 {
			out += num("minItems", s.minI)
		}
		if s.maxI >= 0 {
			out += num("maxItems", s.maxI)
		}
		return out + "}"
	case "tuple":
		var ps []string
		for _, p := range s.prefix {
			ps = append(ps, p.schemaJSON(defs, counter))
		}
		out := `{"type":"array","prefixItems":[` + strings.Join(ps, ",") + `]`
		if s.items != nil {
			out += `,"items":` + s.items.schemaJSON(defs, counter)
		} else {
			out += `,"items":false`
		}
		return out + num("minItems", s.minI) + "}"
	case "object":
		var ps, req []string
		for _, p := range s.props {
			b, _ := json.Marshal(p.name)
			ps = append(ps, string(b)+":"+p.s.schemaJSON(defs, counter))
			if p.req {
				req = append(req, string(b))
			}
		}
		out := `{"type":"object","properties":{` + strings.Join(ps, ",") + `}`
		if len(req) > 0 {
			out += `,"required":[` + strings.Join(req, ",") + `]`
		}
		switch s.addl {
		case "false", "true":
			out += `,"additionalProperties":` + s.addl
		case "schema":
			out += `,"additionalProperties":` + s.addS.schemaJSON(defs, counter)
		}
		return out + "}"
	case "anyOf", "oneOf":
		var bs []string
		for _, b := range s.subs {
			bs = append(bs, b.schemaJSON(defs, counter))
		}
		return `{"` + s.kind + `":[` + strings.Join(bs, ",") + `]}`
	case "allOf":
		return `{"allOf":[` + s.subs[0].schemaJSON(defs, counter) + `,` + s.subs[1].schemaJSON(defs, counter) + `]}`
	case "ref":
		if s.recursive {
			defs["node"] = `{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"],"additionalProperties":false}`
			return `{"$ref":"#/$defs/node"}`
		}
		*counter++
		name := fmt.Sprintf("d%d", *counter)
		s.refName = name
		defs[name] = s.subs[0].schemaJSON(defs, counter)
		return `{"$ref":"#/$defs/` + name + `"}`
	}
	panic(s.kind)
}

func renderSchema(s *gschema) string {
	defs := map[string]string{}
	counter := 0
	body := s.schemaJSON(defs, &counter)
	if len(defs) == 0 {
		return body
	}
	var ds []string
	for k, v := range defs {
		ds = append(ds, fmt.Sprintf("%q:%s", k, v))
	}
	return `{"$defs":{` + strings.Join(ds, ",") + `},"allOf":[` + body + `]}`
}

func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	// encoding/json escapes <, >, & as \u003c...; the grammar allows raw.
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(b))
}

// valid produces a valid instance in canonical layout.
func (s *gschema) valid(r *rand.Rand, depth int) string {
	switch s.kind {
	case "string":
		if s.patGen != nil {
			return jsonStr(s.patGen(r))
		}
		if s.format != "" {
			f := formatSamples[s.format]
			return jsonStr(f[r.Intn(len(f))])
		}
		n := r.Intn(6)
		if s.maxL >= 0 {
			n = s.minL + r.Intn(s.maxL-s.minL+1)
		}
		return jsonStr(randFrom(r, "abc xyzé\"\\\n日本", n))
	case "integer", "number":
		lo, hi := -1000, 1000
		if s.lo != nil {
			lo = *s.lo
			if s.exLo {
				lo++
			}
		}
		if s.hi != nil {
			hi = *s.hi
			if s.exHi {
				hi--
			}
		}
		for tries := 0; tries < 1000; tries++ {
			v := lo + r.Intn(hi-lo+1)
			if s.mult > 0 && v%s.mult != 0 {
				continue
			}
			if s.kind == "number" && r.Intn(2) == 0 && v+1 <= hi {
				return strconv.Itoa(v) + ".25"
			}
			if s.kind == "number" && v < 0 && r.Intn(2) == 0 && v+1 <= hi {
				return "-" + strconv.Itoa(-v-1) + ".5"
			}
			return strconv.Itoa(v)
		}
		return strconv.Itoa(lo)
	case "boolean":
		return []string{"true", "false"}[r.Intn(2)]
	case "null":
		return "null"
	case "enum", "const":
		return canonJSON(s.values[r.Intn(len(s.values))])
	case "nullable":
		if r.Intn(3) == 0 {
			return "null"
		}
		return s.subs[0].valid(r, depth)
	case "array", "tuple":
		n := len(s.prefix)
		if s.kind == "array" {
			n = s.minI + r.Intn(3)
			if s.maxI >= 0 && n > s.maxI {
				n = s.maxI
			}
		} else {
			n = s.minI + r.Intn(len(s.prefix)-s.minI+1)
			if s.items != nil && r.Intn(2) == 0 {
				n = len(s.prefix) + r.Intn(2)
			}
		}
		var el []string
		for i := 0; i < n; i++ {
			if i < len(s.prefix) {
				el = append(el, s.prefix[i].valid(r, depth+1))
			} else {
				el = append(el, s.items.valid(r, depth+1))
			}
		}
		return "[" + strings.Join(el, ",") + "]"
	case "object":
		var m []string
		for _, p := range s.props {
			if p.req || r.Intn(2) == 0 {
				m = append(m, jsonStr(p.name)+":"+p.s.valid(r, depth+1))
			}
		}
		if (s.addl == "" || s.addl == "true") && r.Intn(2) == 0 {
			m = append(m, `"extra_`+randFrom(r, "xyzé", 3)+`":[1,{"z":null}]`)
		}
		if s.addl == "schema" && r.Intn(2) == 0 {
			m = append(m, `"more":`+s.addS.valid(r, depth+1))
		}
		return "{" + strings.Join(m, ",") + "}"
	case "anyOf", "oneOf":
		return s.subs[r.Intn(len(s.subs))].valid(r, depth)
	case "allOf":
		return "{" + `"p":` + s.subs[0].props[0].s.valid(r, depth+1) + `,"q":` + s.subs[1].props[0].s.valid(r, depth+1) + "}"
	case "ref":
		if s.recursive {
			return genNode(r, 0)
		}
		return s.subs[0].valid(r, depth)
	}
	panic(s.kind)
}

func genNode(r *rand.Rand, d int) string {
	out := `{"v":` + strconv.Itoa(r.Intn(100))
	if d < 3 && r.Intn(2) == 0 {
		var kids []string
		for i := 0; i < r.Intn(3); i++ {
			kids = append(kids, genNode(r, d+1))
		}
		out += `,"kids":[` + strings.Join(kids, ",") + `]`
	}
	return out + "}"
}

func canonJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// mutate returns likely-invalid variants of a valid instance.
func mutate(r *rand.Rand, valid string) []string {
	out := []string{
		valid[:len(valid)/2],
		valid + "x",
		`"` + valid,
		strings.Replace(valid, ":", `:"oops",`, 1),
		strings.Replace(valid, "[", "[true,", 1),
		`{"zzz_unknown":1}`,
		`[[[]]]`,
		`12.5`,
		`"text"`,
		`null`,
	}
	if i := strings.IndexAny(valid, "0123456789"); i >= 0 {
		out = append(out, valid[:i]+"9999999"+valid[i:])
		out = append(out, valid[:i]+"-"+valid[i:])
	}
	if i := strings.Index(valid, `":`); i >= 0 {
		out = append(out, valid[:i]+`Q":`+valid[i+2:])
	}
	if i := strings.Index(valid, `,`); i >= 0 {
		out = append(out, valid[:i]+valid[i+1:])
	}
	return out
}
