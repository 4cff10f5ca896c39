package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Whitespace says how JSON output may be laid out.
type Whitespace int

const (
	// Compact allows no whitespace at all: {"a":1,"b":[2,3]}.
	Compact Whitespace = iota
	// AnyWhitespace allows any run of JSON whitespace between tokens.
	AnyWhitespace
	// Indent requires pretty-printing: a newline and Indent spaces per
	// nesting level before every member, ": " after keys.
	Indent
)

// JSONOptions tune JSON Schema compilation.
type JSONOptions struct {
	Whitespace Whitespace
	// IndentWidth is the spaces per level for Indent (default 2).
	IndentWidth int
	// StrictProperties treats a missing additionalProperties as false, so
	// objects hold only the declared properties.
	StrictProperties bool
}

// maxIndentDepth bounds nesting in Indent mode, where each depth needs its
// own rules; deeper free-form values are limited to scalars.
const maxIndentDepth = 16

type schemaCompiler struct {
	b        *builder
	root     any
	opt      JSONOptions
	refRules map[string]int
	anyRules map[int]int
	strRule  int
	inlining map[string]bool
}

// JSONSchemaGrammar compiles a JSON Schema (draft 2020-12 keywords, with
// draft-07 spellings accepted) to a grammar of the JSON texts it allows.
//
// Generation order is fixed: declared properties appear in schema order
// (optional ones may be skipped), additional properties after them. oneOf
// is compiled as anyOf: exact when the branches are disjoint (different
// types or constants), otherwise a text matching two branches is allowed.
func JSONSchemaGrammar(schema []byte, opt JSONOptions) (*Grammar, error) {
	root, err := decodeOrdered(schema)
	if err != nil {
		return nil, &Error{Location: "#", Msg: "schema is not valid JSON: " + err.Error()}
	}
	if opt.IndentWidth <= 0 {
		opt.IndentWidth = 2
	}
	c := &schemaCompiler{b: &builder{}, root: root, opt: opt, refRules: map[string]int{}, anyRules: map[int]int{}, strRule: -1, inlining: map[string]bool{}}
	r := c.b.rule("root")
	e, err := c.compile(root, "#", 0)
	if err != nil {
		return nil, err
	}
	c.b.set(r, e)
	return finishGrammar(c.b, r)
}

// JSONObjectGrammar is OpenAPI's response_format json_object: any object.
func JSONObjectGrammar(opt JSONOptions) (*Grammar, error) {
	return JSONSchemaGrammar([]byte(`{"type":"object"}`), opt)
}

func serr(path, kw, format string, args ...any) error {
	return &Error{Location: path, Keyword: kw, Msg: fmt.Sprintf(format, args...)}
}

// ---- layout ----

func (c *schemaCompiler) ws() *expr {
	if c.opt.Whitespace == AnyWhitespace {
		var s byteSet
		s.addRange(' ', ' ')
		s.addRange('\t', '\t')
		s.addRange('\n', '\n')
		s.addRange('\r', '\r')
		return eStar(eSet(s))
	}
	return eEmpty
}

func (c *schemaCompiler) nl(depth int) *expr {
	return eLit("\n" + strings.Repeat(" ", depth*c.opt.IndentWidth))
}

// seps returns, for a container at depth: after open before first member,
// between members, after last member (before close).
func (c *schemaCompiler) seps(depth int) (first, between, last *expr) {
	if c.opt.Whitespace == Indent {
		return c.nl(depth + 1), eSeq(eLit(","), c.nl(depth+1)), c.nl(depth)
	}
	w := c.ws()
	return w, eSeq(w, eLit(","), w), w
}

func (c *schemaCompiler) colon() *expr {
	switch c.opt.Whitespace {
	case Indent:
		return eLit(": ")
	case AnyWhitespace:
		return eSeq(c.ws(), eLit(":"), c.ws())
	}
	return eLit(":")
}

func (c *schemaCompiler) dkey(depth int) int {
	if c.opt.Whitespace == Indent {
		return depth
	}
	return 0
}

// ---- generic JSON ----

func hexDigit() *expr {
	var s byteSet
	s.addRange('0', '9')
	s.addRange('a', 'f')
	s.addRange('A', 'F')
	return eSet(s)
}

// jsonStrChar is one character of a JSON string: raw UTF-8 except '"', '\'
// and controls, or an escape. \u escapes of surrogates are left out so that
// every text decodes to valid Unicode with a well-defined length.
func jsonStrChar() *expr {
	h := hexDigit()
	var nonSur1, sur byteSet
	nonSur1.addRange('0', '9')
	nonSur1.addRange('a', 'c')
	nonSur1.addRange('A', 'C')
	nonSur1.addRange('e', 'f')
	nonSur1.addRange('E', 'F')
	sur.addRange('d', 'd')
	sur.addRange('D', 'D')
	u := eAlt(eSeq(eSet(nonSur1), h, h, h), eSeq(eSet(sur), eRange('0', '7'), h, h))
	var esc byteSet
	for _, b := range []byte(`"\/bfnrt`) {
		esc.addRange(b, b)
	}
	return eAlt(eRunes(0x20, 0x21), eRunes(0x23, 0x5B), eRunes(0x5D, unicode.MaxRune),
		eSeq(eLit(`\`), eAlt(eSet(esc), eSeq(eLit("u"), u))))
}

func (c *schemaCompiler) stringRule() *expr {
	if c.strRule < 0 {
		c.strRule = c.b.rule("string")
		c.b.set(c.strRule, eSeq(eLit(`"`), eStar(jsonStrChar()), eLit(`"`)))
	}
	return eRef(c.strRule)
}

func digits() *expr { return eRange('0', '9') }

func jsonInteger() *expr {
	return eSeq(eOpt(eLit("-")), eAlt(eLit("0"), eSeq(eRange('1', '9'), eStar(digits()))))
}

func jsonNumber() *expr {
	var e byteSet
	e.addRange('e', 'e')
	e.addRange('E', 'E')
	var pm byteSet
	pm.addRange('+', '+')
	pm.addRange('-', '-')
	return eSeq(jsonInteger(), eOpt(eSeq(eLit("."), eRep(digits(), 1, -1))),
		eOpt(eSeq(eSet(e), eOpt(eSet(pm)), eRep(digits(), 1, 3))))
}

// anyValue is a rule for any JSON value laid out for depth.
func (c *schemaCompiler) anyValue(depth int) *expr {
	k := c.dkey(depth)
	if r, ok := c.anyRules[k]; ok {
		return eRef(r)
	}
	r := c.b.rule(fmt.Sprintf("value@%d", k))
	c.anyRules[k] = r
	scalars := []*expr{eLit("null"), eLit("true"), eLit("false"), jsonNumber(), c.stringRule()}
	if c.opt.Whitespace == Indent && depth >= maxIndentDepth {
		c.b.set(r, eAlt(scalars...))
		return eRef(r)
	}
	inner := c.anyValue(depth + 1)
	first, between, last := c.seps(depth)
	arr := eAlt(eLit("[]"), eSeq(eLit("["), first, inner, eStar(eSeq(between, inner)), last, eLit("]")))
	if c.opt.Whitespace == AnyWhitespace {
		arr = eAlt(eSeq(eLit("["), c.ws(), eLit("]")), eSeq(eLit("["), first, inner, eStar(eSeq(between, inner)), last, eLit("]")))
	}
	member := eSeq(c.stringRule(), c.colon(), inner)
	obj := eAlt(eSeq(eLit("{"), c.wsEmpty(), eLit("}")), eSeq(eLit("{"), first, member, eStar(eSeq(between, member)), last, eLit("}")))
	c.b.set(r, eAlt(append(scalars, arr, obj)...))
	return eRef(r)
}

func (c *schemaCompiler) wsEmpty() *expr {
	if c.opt.Whitespace == AnyWhitespace {
		return c.ws()
	}
	return eEmpty
}

// ---- schema normalisation ----

var annotationKeys = map[string]bool{
	"title": true, "description": true, "$comment": true, "default": true, "examples": true,
	"$schema": true, "$id": true, "$defs": true, "definitions": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "$anchor": true, "contentMediaType": true,
	"contentEncoding": true, "discriminator": true, "example": true,
}

var unsupportedKeys = []string{"not", "if", "then", "else", "dependentRequired", "dependentSchemas",
	"dependencies", "contains", "minContains", "maxContains", "minProperties", "maxProperties",
	"propertyNames", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"}

func (c *schemaCompiler) resolve(ref, path string) (any, error) {
	if !strings.HasPrefix(ref, "#") {
		return nil, serr(path, "$ref", "only local references (#/...) are supported, got %q", ref)
	}
	frag, err := url.PathUnescape(ref[1:])
	if err != nil {
		return nil, serr(path, "$ref", "bad reference %q", ref)
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		return nil, serr(path, "$ref", "anchor references (%q) are not supported", ref)
	}
	cur := c.root
	if frag != "" {
		for _, tok := range strings.Split(frag[1:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch v := cur.(type) {
			case map[string]any:
				nx, ok := v[tok]
				if !ok {
					return nil, serr(path, "$ref", "reference %q not found", ref)
				}
				cur = nx
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(v) {
					return nil, serr(path, "$ref", "reference %q not found", ref)
				}
				cur = v[i]
			default:
				return nil, serr(path, "$ref", "reference %q not found", ref)
			}
		}
	}
	return cur, nil
}

// mergeSchemas is allOf: one schema whose instances satisfy both.
func (c *schemaCompiler) mergeSchemas(a, b any, path string) (any, error) {
	ab, aIsBool := a.(bool)
	bb, bIsBool := b.(bool)
	if aIsBool {
		if !ab {
			return false, nil
		}
		return b, nil
	}
	if bIsBool {
		if !bb {
			return false, nil
		}
		return a, nil
	}
	am, ok1 := a.(map[string]any)
	bm, ok2 := b.(map[string]any)
	if !ok1 || !ok2 {
		return nil, serr(path, "allOf", "subschema must be an object or boolean")
	}
	out := map[string]any{}
	for k, v := range am {
		out[k] = v
	}
	for k, v := range bm {
		old, has := out[k]
		if !has || annotationKeys[k] {
			out[k] = v
			continue
		}
		switch k {
		case keysKey:
			out[k] = append(append([]string(nil), keyOrder(am)...), keyOrder(bm)...)
		case "type":
			ta, tb := typeSet(old), typeSet(v)
			var inter []any
			for _, t := range allTypes {
				ina := ta[t] || (t == "integer" && ta["number"])
				inb := tb[t] || (t == "integer" && tb["number"])
				if ina && inb {
					inter = append(inter, t)
				}
			}
			out[k] = inter
		case "properties", "patternProperties":
			pa, _ := old.(map[string]any)
			pb, _ := v.(map[string]any)
			np := map[string]any{}
			for kk, vv := range pa {
				np[kk] = vv
			}
			for kk, vv := range pb {
				if o, ok := np[kk]; ok {
					np[kk] = map[string]any{"allOf": []any{o, vv}}
				} else {
					np[kk] = vv
				}
			}
			np[keysKey] = append(append([]string(nil), keyOrder(pa)...), keyOrder(pb)...)
			out[k] = np
		case "required":
			ra, _ := old.([]any)
			rb, _ := v.([]any)
			out[k] = append(append([]any(nil), ra...), rb...)
		case "minimum", "exclusiveMinimum", "minLength", "minItems":
			if numCmp(v, old) > 0 {
				out[k] = v
			}
		case "maximum", "exclusiveMaximum", "maxLength", "maxItems":
			if numCmp(v, old) < 0 {
				out[k] = v
			}
		case "items", "additionalProperties":
			out[k] = map[string]any{"allOf": []any{old, v}}
		case "anyOf", "oneOf":
			la, _ := old.([]any)
			lb, _ := v.([]any)
			var cross []any
			for _, x := range la {
				for _, y := range lb {
					cross = append(cross, map[string]any{"allOf": []any{x, y}})
				}
			}
			out[k] = cross
		case "allOf":
			la, _ := old.([]any)
			lb, _ := v.([]any)
			out[k] = append(append([]any(nil), la...), lb...)
		case "enum":
			la, _ := old.([]any)
			lb, _ := v.([]any)
			var inter []any
			for _, x := range la {
				for _, y := range lb {
					if canon(x) == canon(y) {
						inter = append(inter, x)
						break
					}
				}
			}
			out[k] = inter
		default:
			if canon(old) != canon(v) {
				if k == "const" {
					return false, nil
				}
				return nil, serr(path, k, "allOf with two different %q values is not supported", k)
			}
		}
	}
	return out, nil
}

// keysKey holds, in every decoded object, its keys in document order:
// properties are generated in the order the schema lists them.
const keysKey = "\x00keys"

func keyOrder(m map[string]any) []string {
	o, _ := m[keysKey].([]string)
	return o
}

func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the schema")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch d := t.(type) {
	case json.Delim:
		switch d {
		case '{':
			m := map[string]any{}
			var keys []string
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := m[k]; !dup {
					keys = append(keys, k)
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			m[keysKey] = keys
			return m, nil
		case '[':
			l := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return l, nil
		}
		return nil, fmt.Errorf("unexpected %v", d)
	}
	return t, nil
}

// plain strips the key-order entries so a value marshals as written.
func plain(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, vv := range x {
			if k != keysKey {
				out[k] = plain(vv)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, vv := range x {
			out[i] = plain(vv)
		}
		return out
	}
	return v
}

func numCmp(a, b any) int {
	x, ok1 := toRat(a)
	y, ok2 := toRat(b)
	if !ok1 || !ok2 {
		return 0
	}
	return x.Cmp(y)
}

func toRat(v any) (*big.Rat, bool) {
	switch n := v.(type) {
	case json.Number:
		r, ok := new(big.Rat).SetString(string(n))
		return r, ok
	case float64:
		r := new(big.Rat)
		if r.SetFloat64(n) == nil {
			return nil, false
		}
		return r, true
	case int:
		return new(big.Rat).SetInt64(int64(n)), true
	}
	return nil, false
}

func canon(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(plain(v))
	return strings.TrimSuffix(buf.String(), "\n")
}

var allTypes = []string{"null", "boolean", "object", "array", "string", "number", "integer"}

func typeSet(v any) map[string]bool {
	out := map[string]bool{}
	switch t := v.(type) {
	case string:
		out[t] = true
	case []any:
		for _, x := range t {
			if s, ok := x.(string); ok {
				out[s] = true
			}
		}
	}
	return out
}

// normalize resolves $ref-with-siblings and allOf so that compile sees
// one flat schema (anyOf/oneOf are distributed by compile).
func (c *schemaCompiler) normalize(s any, path string) (any, error) {
	m, ok := s.(map[string]any)
	if !ok {
		return s, nil
	}
	if all, ok := m["allOf"]; ok {
		list, ok := all.([]any)
		if !ok {
			return nil, serr(path, "allOf", "must be an array")
		}
		rest := map[string]any{}
		for k, v := range m {
			if k != "allOf" {
				rest[k] = v
			}
		}
		var acc any = rest
		acc, err := c.normalize(acc, path)
		if err != nil {
			return nil, err
		}
		for i, sub := range list {
			sp := fmt.Sprintf("%s/allOf/%d", path, i)
			ns, err := c.normalize(sub, sp)
			if err != nil {
				return nil, err
			}
			acc, err = c.mergeSchemas(acc, ns, sp)
			if err != nil {
				return nil, err
			}
			acc, err = c.normalize(acc, sp)
			if err != nil {
				return nil, err
			}
		}
		return acc, nil
	}
	if ref, ok := m["$ref"].(string); ok && hasValidationKeys(m) {
		if c.inlining[ref] {
			return nil, serr(path, "$ref", "recursive reference %q with sibling keywords is not supported", ref)
		}
		tgt, err := c.resolve(ref, path)
		if err != nil {
			return nil, err
		}
		c.inlining[ref] = true
		defer delete(c.inlining, ref)
		nt, err := c.normalize(tgt, path+"/$ref")
		if err != nil {
			return nil, err
		}
		rest := map[string]any{}
		for k, v := range m {
			if k != "$ref" {
				rest[k] = v
			}
		}
		merged, err := c.mergeSchemas(nt, rest, path)
		if err != nil {
			return nil, err
		}
		return c.normalize(merged, path)
	}
	return m, nil
}

func hasValidationKeys(m map[string]any) bool {
	for k := range m {
		if k != "$ref" && k != keysKey && !annotationKeys[k] {
			return true
		}
	}
	return false
}

// ---- compile ----

func (c *schemaCompiler) compile(s any, path string, depth int) (*expr, error) {
	s, err := c.normalize(s, path)
	if err != nil {
		return nil, err
	}
	switch v := s.(type) {
	case bool:
		if v {
			return c.anyValue(depth), nil
		}
		return eNone, nil
	case map[string]any:
		return c.compileMap(v, path, depth)
	}
	return nil, serr(path, "", "schema must be an object or boolean")
}

func (c *schemaCompiler) compileMap(m map[string]any, path string, depth int) (*expr, error) {
	for _, k := range unsupportedKeys {
		if _, ok := m[k]; ok {
			return nil, serr(path+"/"+k, k, "keyword is not supported")
		}
	}
	if u, ok := m["uniqueItems"].(bool); ok && u {
		return nil, serr(path+"/uniqueItems", "uniqueItems", "uniqueItems: true is not supported")
	}
	if ref, ok := m["$ref"].(string); ok {
		return c.refRule(ref, path, depth)
	}
	for _, kw := range []string{"anyOf", "oneOf"} {
		raw, ok := m[kw]
		if !ok {
			continue
		}
		list, ok := raw.([]any)
		if !ok || len(list) == 0 {
			return nil, serr(path+"/"+kw, kw, "must be a non-empty array")
		}
		base := map[string]any{}
		for k, v := range m {
			if k != kw {
				base[k] = v
			}
		}
		var alts []*expr
		for i, br := range list {
			bp := fmt.Sprintf("%s/%s/%d", path, kw, i)
			var e *expr
			var err error
			if len(base) == 0 || !hasValidationKeys(base) {
				e, err = c.compile(br, bp, depth)
			} else {
				nb, err2 := c.normalize(br, bp)
				if err2 != nil {
					return nil, err2
				}
				if nm, ok := nb.(map[string]any); ok {
					if ref, ok := nm["$ref"].(string); ok && !hasValidationKeys(nm) {
						t, err3 := c.resolve(ref, bp)
						if err3 != nil {
							return nil, err3
						}
						nb = t
					}
				}
				merged, err2 := c.mergeSchemas(base, nb, bp)
				if err2 != nil {
					return nil, err2
				}
				e, err = c.compile(merged, bp, depth)
			}
			if err != nil {
				return nil, err
			}
			alts = append(alts, e)
		}
		return eAlt(alts...), nil
	}
	types := typeSet(m["type"])
	if t, ok := m["type"]; ok {
		switch t.(type) {
		case string, []any:
		default:
			return nil, serr(path+"/type", "type", "must be a string or an array of strings")
		}
		for k := range types {
			if !contains(allTypes, k) {
				return nil, serr(path+"/type", "type", "unknown type %q", k)
			}
		}
		if len(types) == 0 {
			return eNone, nil
		}
	} else {
		for _, t := range allTypes {
			types[t] = true
		}
	}
	if n, ok := m["nullable"].(bool); ok && n {
		types["null"] = true
	}
	if cv, ok := m["const"]; ok {
		return c.literals([]any{cv}, types, path+"/const")
	}
	if ev, ok := m["enum"]; ok {
		list, ok := ev.([]any)
		if !ok {
			return nil, serr(path+"/enum", "enum", "must be an array")
		}
		return c.literals(list, types, path+"/enum")
	}
	var alts []*expr
	if types["null"] {
		alts = append(alts, eLit("null"))
	}
	if types["boolean"] {
		alts = append(alts, eLit("true"), eLit("false"))
	}
	if types["number"] {
		e, err := c.number(m, path, false)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	} else if types["integer"] {
		e, err := c.number(m, path, true)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types["string"] {
		e, err := c.str(m, path)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types["array"] {
		e, err := c.array(m, path, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types["object"] {
		e, err := c.object(m, path, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return eAlt(alts...), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (c *schemaCompiler) refRule(ref, path string, depth int) (*expr, error) {
	if c.opt.Whitespace == Indent && depth > maxIndentDepth {
		return eNone, nil
	}
	key := fmt.Sprintf("%s@%d", ref, c.dkey(depth))
	if r, ok := c.refRules[key]; ok {
		return eRef(r), nil
	}
	tgt, err := c.resolve(ref, path)
	if err != nil {
		return nil, err
	}
	r := c.b.rule("ref " + key)
	c.refRules[key] = r
	e, err := c.compile(tgt, ref, depth)
	if err != nil {
		return nil, err
	}
	c.b.set(r, e)
	return eRef(r), nil
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		if r, ok := new(big.Rat).SetString(string(x)); ok && r.IsInt() {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return ""
}

func (c *schemaCompiler) literals(vals []any, types map[string]bool, path string) (*expr, error) {
	var alts []*expr
	seen := map[string]bool{}
	for _, v := range vals {
		t := jsonType(v)
		if !types[t] && !(t == "integer" && types["number"]) {
			continue
		}
		s := canon(v)
		if seen[s] {
			continue
		}
		seen[s] = true
		alts = append(alts, eLit(s))
	}
	if len(alts) == 0 {
		return nil, serr(path, lastSeg(path), "no value is allowed by the schema")
	}
	return eAlt(alts...), nil
}

func lastSeg(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// ---- strings ----

var formats = map[string]string{
	"date":      `^` + dateRe + `$`,
	"time":      `^` + timeRe + `$`,
	"date-time": `^` + dateRe + `T` + timeRe + `$`,
	"duration":  `^P(?:[0-9]{1,9}W|[0-9]{1,9}Y(?:[0-9]{1,9}M)?(?:[0-9]{1,9}D)?(?:` + durT + `)?|[0-9]{1,9}M(?:[0-9]{1,9}D)?(?:` + durT + `)?|[0-9]{1,9}D(?:` + durT + `)?|` + durT + `)$`,
	"email":     `^[A-Za-z0-9_+\-]{1,20}(?:\.[A-Za-z0-9_+\-]{1,20}){0,2}@` + hostRe + `$`,
	"uuid":      `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`,
	"uri":       `^[a-zA-Z][a-zA-Z0-9+.\-]{0,15}://` + hostRe + `(?:/[A-Za-z0-9\-._~]{0,40}){0,8}(?:\?[A-Za-z0-9\-._~=&]{0,60})?(?:#[A-Za-z0-9\-._~]{0,30})?$`,
	"ipv4":      `^` + ipv4Re + `$`,
	"ipv6":      `^` + ipv6Re + `$`,
	"hostname":  `^` + hostRe + `$`,
}

const (
	durT   = `T(?:[0-9]{1,9}H(?:[0-9]{1,9}M)?(?:[0-9]{1,9}S)?|[0-9]{1,9}M(?:[0-9]{1,9}S)?|[0-9]{1,9}S)`
	dateRe = `[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))`
	timeRe = `(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?(?:Z|[+\-](?:[01][0-9]|2[0-3]):[0-5][0-9])`
	label  = `[A-Za-z0-9](?:[A-Za-z0-9\-]{0,20}[A-Za-z0-9])?`
	hostRe = label + `(?:\.` + label + `){0,4}`
	octet  = `(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`
	ipv4Re = octet + `\.` + octet + `\.` + octet + `\.` + octet
	h16    = `[0-9a-fA-F]{1,4}`
	ipv6Re = `(?:(?:` + h16 + `:){7}` + h16 +
		`|(?:` + h16 + `:){1,7}:` +
		`|(?:` + h16 + `:){1,6}:` + h16 +
		`|(?:` + h16 + `:){1,5}(?::` + h16 + `){1,2}` +
		`|(?:` + h16 + `:){1,4}(?::` + h16 + `){1,3}` +
		`|(?:` + h16 + `:){1,3}(?::` + h16 + `){1,4}` +
		`|(?:` + h16 + `:){1,2}(?::` + h16 + `){1,5}` +
		`|` + h16 + `:(?::` + h16 + `){1,6}` +
		`|:(?::` + h16 + `){1,7}|::)`
)

func intArg(m map[string]any, k, path string) (int, bool, error) {
	v, ok := m[k]
	if !ok {
		return 0, false, nil
	}
	r, ok := toRat(v)
	if !ok || !r.IsInt() || r.Sign() < 0 || !r.Num().IsInt64() || r.Num().Int64() > 1<<20 {
		return 0, false, serr(path+"/"+k, k, "must be a non-negative integer (at most %d)", 1<<20)
	}
	return int(r.Num().Int64()), true, nil
}

func (c *schemaCompiler) str(m map[string]any, path string) (*expr, error) {
	minL, hasMin, err := intArg(m, "minLength", path)
	if err != nil {
		return nil, err
	}
	maxL, hasMax, err := intArg(m, "maxLength", path)
	if err != nil {
		return nil, err
	}
	var content *expr
	if f, ok := m["format"]; ok {
		fs, _ := f.(string)
		re, ok := formats[fs]
		if !ok {
			return nil, serr(path+"/format", "format", "format %q is not supported", fs)
		}
		content, err = parseRegex(re, charJSON, true)
		if err != nil {
			return nil, serr(path+"/format", "format", "%v", err)
		}
	}
	if p, ok := m["pattern"]; ok {
		ps, ok := p.(string)
		if !ok {
			return nil, serr(path+"/pattern", "pattern", "must be a string")
		}
		pe, err := parseRegex(ps, charJSON, true)
		if err != nil {
			return nil, serr(path+"/pattern", "pattern", "%v", err)
		}
		if content != nil {
			if content, err = regularOp(content, pe, true); err != nil {
				return nil, serr(path+"/pattern", "pattern", "%v", err)
			}
		} else {
			content = pe
		}
	}
	if hasMin || hasMax {
		if !hasMax {
			maxL = -1
		}
		if hasMax && maxL < minL {
			return eNone, nil
		}
		if !hasMax && minL > 4096 || maxL > 4096 {
			return nil, serr(path+"/maxLength", "maxLength", "lengths above 4096 are not supported")
		}
		lenE := eRep(jsonStrChar(), minL, maxL)
		if content != nil {
			kw := "maxLength"
			if !hasMax {
				kw = "minLength"
			}
			if content, err = regularOp(content, lenE, true); err != nil {
				return nil, serr(path+"/"+kw, kw, "%v", err)
			}
		} else {
			content = lenE
		}
	}
	if content == nil {
		return c.stringRule(), nil
	}
	return eSeq(eLit(`"`), content, eLit(`"`)), nil
}

// ---- numbers ----

type bound struct {
	set  bool
	v    *big.Rat
	excl bool
}

func (c *schemaCompiler) number(m map[string]any, path string, integer bool) (*expr, error) {
	var lo, hi bound
	rd := func(k string) (*big.Rat, bool, error) {
		v, ok := m[k]
		if !ok {
			return nil, false, nil
		}
		r, ok := toRat(v)
		if !ok {
			return nil, false, serr(path+"/"+k, k, "must be a number")
		}
		lim := new(big.Rat).SetInt64(1e15)
		if new(big.Rat).Abs(r).Cmp(lim) > 0 {
			return nil, false, serr(path+"/"+k, k, "bounds beyond ±1e15 are not supported")
		}
		return r, true, nil
	}
	for _, k := range []string{"minimum", "exclusiveMinimum"} {
		r, ok, err := rd(k)
		if err != nil {
			return nil, err
		}
		if ok && (!lo.set || r.Cmp(lo.v) >= 0) {
			lo = bound{true, r, k == "exclusiveMinimum"}
		}
	}
	for _, k := range []string{"maximum", "exclusiveMaximum"} {
		r, ok, err := rd(k)
		if err != nil {
			return nil, err
		}
		if ok && (!hi.set || r.Cmp(hi.v) <= 0) {
			hi = bound{true, r, k == "exclusiveMaximum"}
		}
	}
	var mult int64
	if mv, ok := m["multipleOf"]; ok {
		r, ok := toRat(mv)
		if !ok || r.Sign() <= 0 {
			return nil, serr(path+"/multipleOf", "multipleOf", "must be a positive number")
		}
		if !r.IsInt() || !r.Num().IsInt64() || r.Num().Int64() > 100000 {
			return nil, serr(path+"/multipleOf", "multipleOf", "only integer multipleOf up to 100000 is supported")
		}
		mult = r.Num().Int64()
		integer = true
	}
	var e *expr
	if integer {
		e = intBounded(lo, hi)
	} else if !lo.set && !hi.set {
		e = jsonNumber()
	} else {
		e = numBounded(lo, hi)
	}
	if mult > 1 {
		me := multipleOfExpr(mult)
		if lo.set || hi.set {
			var err error
			if e, err = regularOp(e, me, true); err != nil {
				return nil, serr(path+"/multipleOf", "multipleOf", "%v", err)
			}
		} else {
			e = me
		}
	}
	if e.op == opNone {
		return nil, serr(path, "minimum", "no number satisfies the bounds")
	}
	return e, nil
}

// intBounded matches integers within the bounds (non-integer bounds are
// rounded inward, which is exact for integers).
func intBounded(lo, hi bound) *expr {
	const inf = int64(1) << 62
	l, h := -inf, inf
	if lo.set {
		f := ratCeil(lo.v)
		if lo.excl && lo.v.IsInt() {
			f++
		}
		l = f
	}
	if hi.set {
		f := ratFloor(hi.v)
		if hi.excl && hi.v.IsInt() {
			f--
		}
		h = f
	}
	if l > h {
		return eNone
	}
	var alts []*expr
	if h >= 0 {
		a := l
		if a < 0 {
			a = 0
		}
		alts = append(alts, digitsRange(uint64(a), uint64(h), h == inf))
	}
	if l < 0 {
		a := h
		if a > -1 {
			a = -1
		}
		alts = append(alts, eSeq(eLit("-"), digitsRange(uint64(-a), uint64(-l), l == -inf)))
	}
	return eAlt(alts...)
}

func ratFloor(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for positive denominators
	return q.Int64()
}

func ratCeil(r *big.Rat) int64 {
	f := ratFloor(r)
	if !r.IsInt() {
		f++
	}
	return f
}

// numBounded matches decimal numbers (no exponent) within the bounds.
// Bounds are rounded inward to integers: exact for integer bounds, a safe
// subset otherwise.
func numBounded(lo, hi bound) *expr {
	// Round non-integer bounds inward to inclusive integer bounds.
	if lo.set && !lo.v.IsInt() {
		lo = bound{true, new(big.Rat).SetInt64(ratCeil(lo.v)), false}
	}
	if hi.set && !hi.v.IsInt() {
		hi = bound{true, new(big.Rat).SetInt64(ratFloor(hi.v)), false}
	}
	in := func(x *big.Rat) bool {
		if lo.set {
			c := x.Cmp(lo.v)
			if c < 0 || (c == 0 && lo.excl) {
				return false
			}
		}
		if hi.set {
			c := x.Cmp(hi.v)
			if c > 0 || (c == 0 && hi.excl) {
				return false
			}
		}
		return true
	}
	half := big.NewRat(1, 2)
	var alts []*expr
	for _, neg := range []bool{false, true} {
		crit := map[int64]bool{}
		if neg {
			crit[0] = true // "-0" is excluded, so 0 is its own segment
		}
		for _, b := range []bound{lo, hi} {
			if b.set {
				v := b.v.Num().Int64()
				if neg {
					v = -v
				}
				if v >= 0 {
					crit[v] = true
				}
			}
		}
		var cs []int64
		for v := range crit {
			cs = append(cs, v)
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i] < cs[j] })
		type seg struct {
			a, b int64
			inf  bool
		}
		var segs []seg
		start := int64(0)
		for _, cp := range cs {
			if cp > start {
				segs = append(segs, seg{start, cp - 1, false})
			}
			segs = append(segs, seg{cp, cp, false})
			start = cp + 1
		}
		segs = append(segs, seg{start, 0, true})
		for _, s := range segs {
			x := new(big.Rat).SetInt64(s.a)
			xf := new(big.Rat).Add(x, half)
			if neg {
				x.Neg(x)
				xf.Neg(xf)
			}
			zeroOK := in(x) && !(neg && s.a == 0)
			fracOK := in(xf)
			if !zeroOK && !fracOK {
				continue
			}
			var ie *expr
			if s.inf {
				ie = digitsRange(uint64(s.a), 0, true)
			} else {
				ie = digitsRange(uint64(s.a), uint64(s.b), false)
			}
			var suf *expr
			switch {
			case zeroOK && fracOK:
				suf = eOpt(eSeq(eLit("."), eRep(digits(), 1, -1)))
			case zeroOK:
				suf = eOpt(eSeq(eLit("."), eRep(eLit("0"), 1, -1)))
			default:
				suf = eSeq(eLit("."), eStar(digits()), eRange('1', '9'), eStar(digits()))
			}
			if neg {
				alts = append(alts, eSeq(eLit("-"), ie, suf))
			} else {
				alts = append(alts, eSeq(ie, suf))
			}
		}
	}
	return eAlt(alts...)
}

// digitsRange matches the canonical decimal spelling of integers in
// [a, b] (b ignored when inf: no upper end).
func digitsRange(a, b uint64, inf bool) *expr {
	as := strconv.FormatUint(a, 10)
	var alts []*expr
	for n := len(as); ; n++ {
		lo := uint64(0)
		if n > 1 {
			lo = pow10(n - 1)
		}
		if a > lo {
			lo = a
		}
		hiN := pow10(n) - 1
		if inf && n >= len(as) {
			alts = append(alts, sameLen(strconv.FormatUint(lo, 10), strconv.FormatUint(hiN, 10)))
			alts = append(alts, eSeq(eRange('1', '9'), eRep(digits(), n, -1)))
			break
		}
		if hiN > b {
			hiN = b
		}
		if lo <= hiN {
			alts = append(alts, sameLen(strconv.FormatUint(lo, 10), strconv.FormatUint(hiN, 10)))
		}
		if hiN >= b || n >= 19 {
			break
		}
	}
	return eAlt(alts...)
}

func pow10(n int) uint64 {
	r := uint64(1)
	for i := 0; i < n; i++ {
		r *= 10
	}
	return r
}

func sameLen(lo, hi string) *expr {
	if len(lo) == 0 {
		return eEmpty
	}
	if lo == hi {
		return eLit(lo)
	}
	if lo[0] == hi[0] {
		return eSeq(eLit(lo[:1]), sameLen(lo[1:], hi[1:]))
	}
	rest := len(lo) - 1
	all0 := strings.Trim(lo[1:], "0") == ""
	all9 := strings.Trim(hi[1:], "9") == ""
	var alts []*expr
	s, e := lo[0], hi[0]
	if !all0 {
		alts = append(alts, eSeq(eLit(lo[:1]), sameLen(lo[1:], strings.Repeat("9", rest))))
		s++
	}
	if !all9 {
		alts = append(alts, eSeq(eLit(hi[:1]), sameLen(strings.Repeat("0", rest), hi[1:])))
		e--
	}
	if s <= e {
		alts = append(alts, eSeq(eRange(s, e), eRep(digits(), rest, rest)))
	}
	return eAlt(alts...)
}

// multipleOfExpr matches integers divisible by k: a remainder automaton.
func multipleOfExpr(k int64) *expr {
	g := &expr{op: opGraph, gn: int(k) + 1, gstart: int(k)}
	g.gfinal = []int{0}
	for d := 1; d <= 9; d++ {
		g.gedges = append(g.gedges, gedge{int(k), int(int64(d) % k), eByte(byte('0' + d))})
	}
	for r := int64(0); r < k; r++ {
		for d := int64(0); d <= 9; d++ {
			g.gedges = append(g.gedges, gedge{int(r), int((r*10 + d) % k), eByte(byte('0' + d))})
		}
	}
	return eAlt(eLit("0"), eSeq(eOpt(eLit("-")), g))
}

// ---- arrays ----

func (c *schemaCompiler) array(m map[string]any, path string, depth int) (*expr, error) {
	minI, _, err := intArg(m, "minItems", path)
	if err != nil {
		return nil, err
	}
	maxI, hasMax, err := intArg(m, "maxItems", path)
	if err != nil {
		return nil, err
	}
	if hasMax && maxI > 10000 || minI > 10000 {
		return nil, serr(path+"/maxItems", "maxItems", "item counts above 10000 are not supported")
	}
	var prefix []*expr
	if pv, ok := m["prefixItems"]; ok {
		list, ok := pv.([]any)
		if !ok {
			return nil, serr(path+"/prefixItems", "prefixItems", "must be an array")
		}
		for i, s := range list {
			e, err := c.compile(s, fmt.Sprintf("%s/prefixItems/%d", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			prefix = append(prefix, e)
		}
	}
	var item *expr
	itemsKey := "items"
	if il, ok := m["items"].([]any); ok { // draft-07 tuple form
		if len(prefix) > 0 {
			return nil, serr(path+"/items", "items", "array form together with prefixItems")
		}
		for i, s := range il {
			e, err := c.compile(s, fmt.Sprintf("%s/items/%d", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			prefix = append(prefix, e)
		}
		itemsKey = "additionalItems"
	}
	if iv, ok := m[itemsKey]; ok {
		e, err := c.compile(iv, path+"/"+itemsKey, depth+1)
		if err != nil {
			return nil, err
		}
		if e.op != opNone {
			r := c.b.rule(path + "/" + itemsKey)
			c.b.set(r, e)
			item = eRef(r)
		}
	} else {
		item = c.anyValue(depth + 1)
	}
	k := len(prefix)
	// Graph states: number of elements so far, capped where nothing changes.
	limit := k
	if minI > limit {
		limit = minI
	}
	if hasMax && maxI < limit {
		limit = maxI
	}
	if hasMax && item != nil && maxI > limit {
		limit = maxI
	}
	if !hasMax && item != nil && limit < 1 {
		limit = 1 // the looping state must come after the first element
	}
	first, between, last := c.seps(depth)
	g := &expr{op: opGraph, gn: limit + 2, gstart: 0}
	end := limit + 1
	for i := 0; i <= limit; i++ {
		var el *expr
		if i < k {
			el = prefix[i]
		} else {
			el = item
		}
		sep := between
		if i == 0 {
			sep = first
		}
		if el != nil && (!hasMax || i < maxI) {
			to := i + 1
			if i == limit {
				to = i // unbounded tail loops
			}
			g.gedges = append(g.gedges, gedge{i, to, eSeq(sep, el)})
		}
		if i >= minI {
			if i == 0 {
				g.gedges = append(g.gedges, gedge{0, end, eSeq(c.wsEmpty(), eLit("]"))})
			} else {
				g.gedges = append(g.gedges, gedge{i, end, eSeq(last, eLit("]"))})
			}
		}
	}
	g.gfinal = []int{end}
	return eSeq(eLit("["), g), nil
}

// ---- objects ----

func (c *schemaCompiler) object(m map[string]any, path string, depth int) (*expr, error) {
	props, _ := m["properties"].(map[string]any)
	if _, ok := m["properties"]; ok && props == nil {
		return nil, serr(path+"/properties", "properties", "must be an object")
	}
	order := keyOrder(props)
	var names []string
	seen := map[string]bool{}
	for _, n := range order {
		if _, ok := props[n]; ok && !seen[n] {
			names = append(names, n)
			seen[n] = true
		}
	}
	var rest []string
	for n := range props {
		if n != keysKey && !seen[n] {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	names = append(names, rest...)
	req := map[string]bool{}
	if rv, ok := m["required"]; ok {
		list, ok := rv.([]any)
		if !ok {
			return nil, serr(path+"/required", "required", "must be an array of strings")
		}
		for _, x := range list {
			s, ok := x.(string)
			if !ok {
				return nil, serr(path+"/required", "required", "must be an array of strings")
			}
			req[s] = true
		}
	}
	// Additional members: patternProperties, then additionalProperties.
	var addAlts []*expr
	var patKeys []*expr
	colon := c.colon()
	if pp, ok := m["patternProperties"].(map[string]any); ok {
		var pats []string
		for p := range pp {
			if p != keysKey {
				pats = append(pats, p)
			}
		}
		sort.Strings(pats)
		for _, p := range pats {
			pth := path + "/patternProperties/" + escPtr(p)
			ke, err := parseRegex(p, charJSON, true)
			if err != nil {
				return nil, serr(pth, "patternProperties", "%v", err)
			}
			ke, err = c.excludeNames(ke, names)
			if err != nil {
				return nil, serr(pth, "patternProperties", "%v", err)
			}
			patKeys = append(patKeys, ke)
			ve, err := c.compile(pp[p], pth, depth+1)
			if err != nil {
				return nil, err
			}
			if ke.op != opNone && ve.op != opNone {
				addAlts = append(addAlts, eSeq(eLit(`"`), ke, eLit(`"`), colon, ve))
			}
		}
	}
	ap, hasAP := m["additionalProperties"]
	if !hasAP {
		ap = !c.opt.StrictProperties
	}
	ve, err := c.compile(ap, path+"/additionalProperties", depth+1)
	if err != nil {
		return nil, err
	}
	if ve.op != opNone {
		// Keys: plain JSON string content (no escapes, so a key cannot
		// spell a declared name differently), minus names and patterns.
		ke := eStar(eAlt(eRunes(0x20, 0x21), eRunes(0x23, 0x5B), eRunes(0x5D, unicode.MaxRune)))
		if ke, err = c.excludeNames(ke, names); err != nil {
			return nil, serr(path+"/additionalProperties", "additionalProperties", "%v", err)
		}
		for _, pk := range patKeys {
			if ke, err = regularOp(ke, pk, false); err != nil {
				return nil, serr(path+"/additionalProperties", "additionalProperties", "%v", err)
			}
		}
		if ke.op != opNone {
			addAlts = append(addAlts, eSeq(eLit(`"`), ke, eLit(`"`), colon, ve))
		}
	}
	for n := range req {
		if !seen[n] && len(addAlts) == 0 {
			return nil, serr(path+"/required", "required", "required property %q is not allowed by the schema", n)
		}
	}
	var extraReq []string
	for n := range req {
		if !seen[n] {
			extraReq = append(extraReq, n)
		}
	}
	sort.Strings(extraReq)
	type member struct {
		e        *expr
		required bool
	}
	var members []member
	for _, n := range names {
		pe, err := c.compile(props[n], path+"/properties/"+escPtr(n), depth+1)
		if err != nil {
			return nil, err
		}
		if pe.op == opNone {
			if req[n] {
				return nil, serr(path+"/properties/"+escPtr(n), "properties", "required property %q allows no value", n)
			}
			continue
		}
		members = append(members, member{eSeq(eLit(canon(n)), colon, pe), req[n]})
	}
	for _, n := range extraReq {
		// Required but undeclared: value from additionalProperties.
		members = append(members, member{eSeq(eLit(canon(n)), colon, ve), true})
	}
	first, between, last := c.seps(depth)
	// States (i, e): i members considered, e = something emitted.
	n := len(members)
	id := func(i, e int) int { return 2*i + e }
	end := 2*(n+1) + 0
	g := &expr{op: opGraph, gn: end + 1, gstart: id(0, 0), gfinal: []int{end}}
	for i, mb := range members {
		for e := 0; e < 2; e++ {
			sep := between
			if e == 0 {
				sep = first
			}
			g.gedges = append(g.gedges, gedge{id(i, e), id(i+1, 1), eSeq(sep, mb.e)})
			if !mb.required {
				g.gedges = append(g.gedges, gedge{id(i, e), id(i+1, e), eEmpty})
			}
		}
	}
	if len(addAlts) > 0 {
		// One rule for the additional members, shared by both edges, so
		// its automaton (and token-mask cache) exists once.
		ar := c.b.rule(path + "/additional")
		c.b.set(ar, eAlt(addAlts...))
		add := eRef(ar)
		g.gedges = append(g.gedges, gedge{id(n, 0), id(n, 1), eSeq(first, add)})
		g.gedges = append(g.gedges, gedge{id(n, 1), id(n, 1), eSeq(between, add)})
	}
	g.gedges = append(g.gedges, gedge{id(n, 0), end, eSeq(c.wsEmpty(), eLit("}"))})
	g.gedges = append(g.gedges, gedge{id(n, 1), end, eSeq(last, eLit("}"))})
	return eSeq(eLit("{"), g), nil
}

func escPtr(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// excludeNames removes the JSON spellings of names from a key language.
func (c *schemaCompiler) excludeNames(ke *expr, names []string) (*expr, error) {
	if len(names) == 0 {
		return ke, nil
	}
	var alts []*expr
	for _, n := range names {
		s := canon(n)
		alts = append(alts, eLit(s[1:len(s)-1]))
	}
	return regularOp(ke, eAlt(alts...), false)
}
