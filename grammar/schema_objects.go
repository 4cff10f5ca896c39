package grammar

import (
	"sort"
	"strings"
	"unicode"
)

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
	var nameE *expr // propertyNames' key language (nil: any)
	if pn, ok := m["propertyNames"]; ok {
		var err error
		if nameE, err = c.propertyNames(pn, path+"/propertyNames"); err != nil {
			return nil, err
		}
		for i, pk := range patKeys {
			if pk, err = regularOp(pk, nameE, true); err != nil {
				return nil, serr(path+"/propertyNames", "propertyNames", "%v", err)
			}
			patKeys[i] = pk
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
		if nameE != nil {
			if ke, err = regularOp(ke, nameE, true); err != nil {
				return nil, serr(path+"/propertyNames", "propertyNames", "%v", err)
			}
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

// propertyNames compiles a propertyNames schema to the key texts (between
// the quotes) it allows; nil allows any. Keys are strings, so only the
// string keywords mean anything here (zod 4 writes {"type":"string"} for
// every z.record); declared properties are not checked against it.
func (c *schemaCompiler) propertyNames(pn any, path string) (*expr, error) {
	switch v := pn.(type) {
	case bool:
		if v {
			return nil, nil
		}
		return eNone, nil
	case map[string]any:
		for k, x := range v {
			switch {
			case k == keysKey || annotationKeys[k]:
			case k == "type":
				if t, _ := x.(string); t != "string" {
					return nil, serr(path+"/type", "type", `propertyNames may only have type "string"`)
				}
			case k == "pattern" || k == "format" || k == "minLength" || k == "maxLength" || k == "enum" || k == "const":
			default:
				return nil, serr(path+"/"+k, k, "keyword is not supported in propertyNames")
			}
		}
		var lits []any
		if cv, ok := v["const"]; ok {
			lits = []any{cv}
		} else if ev, ok := v["enum"].([]any); ok {
			lits = ev
		}
		if lits != nil {
			var alts []*expr
			for _, l := range lits {
				if s, ok := l.(string); ok {
					q := canon(s)
					alts = append(alts, eLit(q[1:len(q)-1]))
				}
			}
			return eAlt(alts...), nil
		}
		e, err := c.str(v, path)
		if err != nil {
			return nil, err
		}
		if e.op == opRef { // the plain string rule: any key
			return nil, nil
		}
		// c.str wraps the content in quotes; take the content back out.
		content, err := c.strContent(v, path)
		if err != nil {
			return nil, err
		}
		minL, hasMin, err := intArg(v, "minLength", path)
		if err != nil {
			return nil, err
		}
		maxL, hasMax, err := intArg(v, "maxLength", path)
		if err != nil {
			return nil, err
		}
		if hasMin || hasMax {
			if !hasMax {
				maxL = -1
			}
			lenE := eRep(jsonStrChar(), minL, maxL)
			if content == nil {
				return lenE, nil
			}
			return regularOp(content, lenE, true)
		}
		return content, nil
	}
	return nil, serr(path, "propertyNames", "must be an object or boolean")
}
