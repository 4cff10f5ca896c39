package grammar

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
)

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
