package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// A minimal JSON scanner for the large parts of tokenizer.json (the vocab and
// the merges, hundreds of thousands of entries), several times faster than
// encoding/json on them. Small components still go through encoding/json.

type jsonScan struct {
	b   []byte
	pos int
}

var errScan = errors.New("malformed JSON")

func (s *jsonScan) fail(what string) error {
	return fmt.Errorf("%w at byte %d: %s", errScan, s.pos, what)
}

func (s *jsonScan) ws() {
	for s.pos < len(s.b) {
		switch s.b[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *jsonScan) peek() byte {
	s.ws()
	if s.pos >= len(s.b) {
		return 0
	}
	return s.b[s.pos]
}

func (s *jsonScan) expect(c byte) error {
	if s.peek() != c {
		return s.fail(fmt.Sprintf("want %q", c))
	}
	s.pos++
	return nil
}

// str reads a JSON string.
func (s *jsonScan) str() (string, error) {
	if s.peek() != '"' {
		return "", s.fail("want a string")
	}
	s.pos++
	start := s.pos
	ascii := true
	for s.pos < len(s.b) {
		c := s.b[s.pos]
		if c == '"' {
			if !ascii && !utf8.Valid(s.b[start:s.pos]) {
				return "", s.fail("invalid UTF-8 in string")
			}
			out := string(s.b[start:s.pos])
			s.pos++
			return out, nil
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
		if c == '\\' {
			return s.strSlow(start)
		}
		if c < 0x20 {
			return "", s.fail("control character in string")
		}
		s.pos++
	}
	return "", s.fail("unterminated string")
}

func (s *jsonScan) strSlow(start int) (string, error) {
	buf := append([]byte(nil), s.b[start:s.pos]...)
	for s.pos < len(s.b) {
		c := s.b[s.pos]
		switch {
		case c == '"':
			s.pos++
			if !utf8.Valid(buf) {
				return "", s.fail("invalid UTF-8 in string")
			}
			return string(buf), nil
		case c < 0x20:
			return "", s.fail("control character in string")
		case c != '\\':
			buf = append(buf, c)
			s.pos++
			continue
		}
		if s.pos+1 >= len(s.b) {
			return "", s.fail("unterminated escape")
		}
		e := s.b[s.pos+1]
		s.pos += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := s.hex4()
			if !ok {
				return "", s.fail("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A pair, or a lone surrogate (which encoding/json turns into U+FFFD).
				r2 := rune(-1)
				if s.pos+1 < len(s.b) && s.b[s.pos] == '\\' && s.b[s.pos+1] == 'u' {
					save := s.pos
					s.pos += 2
					var ok2 bool
					if r2, ok2 = s.hex4(); !ok2 {
						return "", s.fail("bad \\u escape")
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						buf = utf8.AppendRune(buf, d)
						continue
					}
					s.pos = save
				}
				r = utf8.RuneError
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", s.fail("bad escape")
		}
	}
	return "", s.fail("unterminated string")
}

func (s *jsonScan) hex4() (rune, bool) {
	if s.pos+4 > len(s.b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.pos:s.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.pos += 4
	return rune(v), true
}

// integer reads a non-negative JSON integer.
func (s *jsonScan) integer() (int, error) {
	s.ws()
	start := s.pos
	n := 0
	for s.pos < len(s.b) && s.b[s.pos] >= '0' && s.b[s.pos] <= '9' {
		n = n*10 + int(s.b[s.pos]-'0')
		if n > 1<<40 {
			return 0, s.fail("integer too large")
		}
		s.pos++
	}
	if s.pos == start {
		return 0, s.fail("want a non-negative integer")
	}
	if s.pos < len(s.b) && (s.b[s.pos] == '.' || s.b[s.pos] == 'e' || s.b[s.pos] == 'E') {
		return 0, s.fail("want an integer")
	}
	return n, nil
}

// skip skips one JSON value and returns its bytes.
func (s *jsonScan) skip() ([]byte, error) {
	c := s.peek()
	start := s.pos
	switch {
	case c == '"':
		if _, err := s.str(); err != nil {
			return nil, err
		}
	case c == '{' || c == '[':
		depth := 0
		for s.pos < len(s.b) {
			switch s.b[s.pos] {
			case '"':
				if _, err := s.str(); err != nil {
					return nil, err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.pos++
					return s.b[start:s.pos], nil
				}
			}
			s.pos++
		}
		return nil, s.fail("unterminated value")
	case c == 0:
		return nil, s.fail("want a value")
	default:
		for s.pos < len(s.b) {
			b := s.b[s.pos]
			if b == ',' || b == '}' || b == ']' || b == ' ' || b == '\n' || b == '\r' || b == '\t' {
				break
			}
			s.pos++
		}
		if s.pos == start {
			return nil, s.fail("want a value")
		}
	}
	return s.b[start:s.pos], nil
}

// object calls fn for each key of a JSON object; fn must consume the value.
func (s *jsonScan) object(fn func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		k, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := fn(k); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.fail("want ',' or '}'")
		}
	}
}

// array calls fn for each element of a JSON array; fn must consume it.
func (s *jsonScan) array(fn func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := fn(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.fail("want ',' or ']'")
		}
	}
}

// rawFields splits a JSON object into its fields' raw values.
func rawFields(b []byte) (map[string][]byte, error) {
	s := &jsonScan{b: b}
	out := map[string][]byte{}
	err := s.object(func(k string) error {
		v, err := s.skip()
		out[k] = v
		return err
	})
	if err == nil && s.peek() != 0 {
		err = s.fail("trailing data")
	}
	return out, err
}

// objectFields is rawFields where the fast scanner succeeds; where it
// refuses (it is strict), encoding/json decides and words the error.
func objectFields(b []byte) (map[string][]byte, error) {
	if f, err := rawFields(b); err == nil {
		return f, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	f := make(map[string][]byte, len(m))
	for k, v := range m {
		f[k] = v
	}
	return f, nil
}

// fastVocab parses {"token": id, ...}.
func fastVocab(b []byte) (map[string]int, error) {
	s := &jsonScan{b: b}
	m := make(map[string]int, len(b)/16)
	err := s.object(func(k string) error {
		id, err := s.integer()
		m[k] = id
		return err
	})
	return m, err
}

// fastMerges parses ["a b", ...] or [["a", "b"], ...].
func fastMerges(b []byte) ([][2]string, error) {
	s := &jsonScan{b: b}
	out := make([][2]string, 0, len(b)/12)
	err := s.array(func(i int) error {
		if s.peek() == '[' {
			s.pos++
			a, err := s.str()
			if err != nil {
				return err
			}
			if err := s.expect(','); err != nil {
				return err
			}
			c, err := s.str()
			if err != nil {
				return err
			}
			out = append(out, [2]string{a, c})
			return s.expect(']')
		}
		line, err := s.str()
		if err != nil {
			return err
		}
		if len(line) >= 8 && line[:8] == "#version" {
			return nil
		}
		k := strings.IndexByte(line, ' ')
		if k < 0 {
			return s.fail("merge without a space")
		}
		if strings.IndexByte(line[k+1:], ' ') >= 0 {
			return s.fail("merge with more than two tokens")
		}
		out = append(out, [2]string{line[:k], line[k+1:]})
		return nil
	})
	return out, err
}
