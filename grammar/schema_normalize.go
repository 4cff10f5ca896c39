package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/url"
	"strconv"
	"strings"
)

var annotationKeys = map[string]bool{
	"title": true, "description": true, "$comment": true, "default": true, "examples": true,
	"$schema": true, "$id": true, "$defs": true, "definitions": true, "deprecated": true,
	"readOnly": true, "writeOnly": true, "$anchor": true, "contentMediaType": true,
	"contentEncoding": true, "discriminator": true, "example": true,
}

var unsupportedKeys = []string{"not", "if", "then", "else", "dependentRequired", "dependentSchemas",
	"dependencies", "contains", "minContains", "maxContains", "minProperties", "maxProperties",
	"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"}

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
