package grammar

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
