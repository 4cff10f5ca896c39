package grammar

import (
	"fmt"
	"strings"
)

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

// annotationFormats are formats that constrain nothing a grammar can
// check, or that no one validates (Pydantic's SecretStr is "password",
// bytes "binary", Path "path"; OpenAPI's numeric formats): read as any
// string. ipvanyaddress is Pydantic's IPvAnyAddress.
var annotationFormats = map[string]bool{
	"password": true, "binary": true, "path": true, "json-string": true, "byte": true, "textarea": true,
	"uri-reference": true, "iri": true, "iri-reference": true, "uri-template": true, "regex": true,
	"json-pointer": true, "relative-json-pointer": true, "idn-hostname": true, "idn-email": true,
	"int32": true, "int64": true, "float": true, "double": true, "name-email": true, "multi-host-uri": true,
}

func init() {
	formats["ipvanyaddress"] = `^(?:` + ipv4Re + `|` + ipv6Re + `)$`
}

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
	content, err := c.strContent(m, path)
	if err != nil {
		return nil, err
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
		kw := "maxLength"
		if !hasMax {
			kw = "minLength"
		}
		if content == nil {
			content = lenE
		} else if lo, hi := byteLenRange(content); hi >= 0 && (!hasMax || hi <= maxL) && (minL == 0 || (lo+3)/4 >= minL) {
			// The format already keeps the length in range (Pydantic's
			// AnyUrl has maxLength 2083 beside format uri): intersecting
			// would only cost time.
		} else if content, err = regularOp(content, lenE, true); err != nil {
			return nil, serr(path+"/"+kw, kw, "%v", err)
		}
	}
	if content == nil {
		return c.stringRule(), nil
	}
	return eSeq(eLit(`"`), content, eLit(`"`)), nil
}

// strContent is the content (between the quotes) that format and pattern
// allow; nil when they allow any. An unknown format is an error unless a
// pattern comes with it (zod 4 writes format "starts_with" beside the
// pattern that says it).
func (c *schemaCompiler) strContent(m map[string]any, path string) (*expr, error) {
	var content *expr
	var err error
	_, hasPattern := m["pattern"]
	if f, ok := m["format"]; ok {
		fs, _ := f.(string)
		re, ok := formats[fs]
		switch {
		case ok:
			content, err = parseRegex(re, charJSON, true)
			if err != nil {
				return nil, serr(path+"/format", "format", "%v", err)
			}
		case annotationFormats[fs] || hasPattern:
		default:
			return nil, serr(path+"/format", "format", "format %q is not supported", fs)
		}
	}
	if p, ok := m["pattern"]; ok {
		ps, ok := p.(string)
		if !ok {
			return nil, serr(path+"/pattern", "pattern", "must be a string")
		}
		pe, err := patternExpr(ps)
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
	return content, nil
}

// patternExpr compiles a JSON Schema pattern. Lookaheads at the start,
// ^(?=X) and ^(?!X), which Go's syntax lacks and Pydantic's Decimal
// pattern uses, become an intersection with (or a difference from) the
// texts that start with a match of X.
func patternExpr(ps string) (*expr, error) {
	var looks []*expr
	var neg []bool
	rest := ps
	for strings.HasPrefix(rest, "^(?=") || strings.HasPrefix(rest, "^(?!") {
		end := groupEnd(rest, 1)
		if end < 0 {
			return nil, fmt.Errorf("unbalanced lookahead in %q", ps)
		}
		inner := rest[4:end]
		if !strings.HasPrefix(inner, "^") {
			inner = "^" + inner
		}
		le, err := parseRegex(inner, charJSON, true)
		if err != nil {
			return nil, err
		}
		looks = append(looks, le)
		neg = append(neg, rest[3] == '!')
		rest = "^" + rest[end+1:]
	}
	e, err := parseRegex(rest, charJSON, true)
	if err != nil {
		return nil, err
	}
	for i, le := range looks {
		if e, err = regularOp(e, le, !neg[i]); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// groupEnd is the index of the ')' closing the group opened at s[open],
// skipping escapes and character classes; -1 if none.
func groupEnd(s string, open int) int {
	depth, inClass := 0, false
	for i := open; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case inClass:
			if c == ']' {
				inClass = false
			}
		case c == '[':
			inClass = true
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// byteLenRange is the fewest and most bytes a text of e can have (most
// -1: unbounded, or not known: rule calls and graphs count as unbounded).
func byteLenRange(e *expr) (lo, hi int) {
	switch e.op {
	case opEmpty:
		return 0, 0
	case opNone:
		return 0, 0
	case opBytes:
		return 1, 1
	case opSeq:
		for _, s := range e.subs {
			l, h := byteLenRange(s)
			lo += l
			if hi >= 0 {
				if h < 0 {
					hi = -1
				} else {
					hi += h
				}
			}
		}
		return lo, hi
	case opAlt:
		lo = -1
		for _, s := range e.subs {
			l, h := byteLenRange(s)
			if s.op == opNone {
				continue
			}
			if lo < 0 || l < lo {
				lo = l
			}
			if hi >= 0 && (h < 0 || h > hi) {
				hi = h
			}
		}
		if lo < 0 {
			lo = 0
		}
		return lo, hi
	case opRepeat:
		l, h := byteLenRange(e.subs[0])
		lo = l * e.min
		if e.max < 0 || h < 0 {
			if e.max == 0 {
				return lo, 0
			}
			return lo, -1
		}
		return lo, h * e.max
	}
	return 0, -1
}
