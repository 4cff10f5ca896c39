package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization (HF "normalizer").
type normalizer interface {
	normalize(s string) string
}

type normSequence []normalizer

func (q normSequence) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

type unicodeForm struct{ f norm.Form }

func (u unicodeForm) normalize(s string) string {
	if u.f.IsNormalString(s) {
		return s
	}
	return u.f.String(s)
}

type lowercase struct{}

// normalize lowercases character by character, as Rust's char::to_lowercase
// (no context-dependent final sigma; U+0130 becomes "i̇").
func (lowercase) normalize(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf || (s[i] >= 'A' && s[i] <= 'Z') {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteByte(s[i])
		} else if r == 0x130 {
			b.WriteString("i\u0307")
		} else {
			b.WriteRune(unicode.ToLower(r))
		}
		i += n
	}
	return b.String()
}

type strip struct{ left, right bool }

func (st strip) normalize(s string) string {
	if st.left {
		s = strings.TrimLeftFunc(s, isWhiteSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, isWhiteSpace)
	}
	return s
}

type prepend string

func (p prepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

type replace struct {
	m       matcher
	content string
}

func (r replace) normalize(s string) string {
	if l, ok := r.m.(literal); ok {
		if l == "" {
			return s
		}
		return strings.ReplaceAll(s, string(l), r.content)
	}
	var b strings.Builder
	prev := 0
	r.m.find(s, func(start, end int) {
		b.WriteString(s[prev:start])
		b.WriteString(r.content)
		prev = end
	})
	if prev == 0 && b.Len() == 0 {
		return s
	}
	b.WriteString(s[prev:])
	return b.String()
}

// stripAccents removes combining marks (HF StripAccents).
type stripAccents struct{}

func (stripAccents) normalize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s)
}

var normalizerTypes = map[string]bool{
	"NFC": true, "NFD": true, "NFKC": true, "NFKD": true, "Lowercase": true, "Strip": true,
	"StripAccents": true, "Prepend": true, "Replace": true, "Sequence": true,
}

type rawPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func (p *rawPattern) compile() (matcher, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("missing")
	case p.String != nil:
		return compilePattern(false, *p.String)
	case p.Regex != nil:
		m, err := compilePattern(true, *p.Regex)
		if err != nil {
			return nil, fmt.Errorf("Regex %q: %w", *p.Regex, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf(`want {"String": ...} or {"Regex": ...}`)
}

func parseNormalizer(raw json.RawMessage, path string) (normalizer, error) {
	var c struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		StripLeft   *bool             `json:"strip_left"`
		StripRight  *bool             `json:"strip_right"`
		Prepend     *string           `json:"prepend"`
		Pattern     *rawPattern       `json:"pattern"`
		Content     *string           `json:"content"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fieldErr(path, err)
	}
	switch c.Type {
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "StripAccents":
		return stripAccents{}, nil
	case "Strip":
		return strip{c.StripLeft == nil || *c.StripLeft, c.StripRight == nil || *c.StripRight}, nil
	case "Prepend":
		if c.Prepend == nil {
			return nil, fieldErr(path+".prepend", fmt.Errorf("missing"))
		}
		return prepend(*c.Prepend), nil
	case "Replace":
		r, err := parseReplace(c.Pattern, c.Content, path)
		if err != nil {
			return nil, err
		}
		return r, nil
	case "Sequence":
		q, err := parseSequence(c.Normalizers, path+".normalizers", parseNormalizer)
		if err != nil {
			return nil, err
		}
		return normSequence(q), nil
	}
	return nil, typeErr(path, "normalizer", c.Type, normalizerTypes)
}

// parseReplace reads the pattern and content of a Replace normalizer or
// decoder at path.
func parseReplace(p *rawPattern, content *string, path string) (replace, error) {
	m, err := p.compile()
	if err != nil {
		return replace{}, fieldErr(path+".pattern", err)
	}
	if content == nil {
		return replace{}, fieldErr(path+".content", fmt.Errorf("missing"))
	}
	return replace{m, *content}, nil
}
