package safetensors

import (
	"encoding/json"
	"fmt"
)

// maxDepth bounds the nesting of values skipped in unknown fields, like
// encoding/json's own limit, so a crafted header cannot exhaust the stack.
const maxDepth = 10000

// scanner is a strict RFC 8259 JSON reader over an in-memory header. It
// exists because headers of large checkpoints list 100k tensors and
// encoding/json's Decoder.Token walk (the stdlib way to see duplicate
// keys, which Unmarshal silently merges) allocates for every token; this
// reads names and numbers in place. Input must already be valid UTF-8.
type scanner struct {
	file string
	doc  string // "header" or "index", for messages
	b    []byte
	i    int
}

// syntaxErr reports malformed JSON with the offset within the header.
func (s *scanner) syntaxErr(format string, args ...any) error {
	return formatErr(s.file, "invalid JSON %s: %s at offset %d", s.doc, fmt.Sprintf(format, args...), s.i)
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// eof is what peek returns at the end of the input.
const eof = -1

// peek skips whitespace and returns the next byte, or eof.
func (s *scanner) peek() int {
	s.ws()
	if s.i == len(s.b) {
		return eof
	}
	return int(s.b[s.i])
}

// valueStart reports whether c can begin a JSON value.
func valueStart(c int) bool {
	switch c {
	case '{', '[', '"', 't', 'f', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// typeErr returns err, the complaint that the next value has the wrong
// type, unless there is no well-formed value there at all, which is a
// syntax error and reported as such.
func (s *scanner) typeErr(err error) error {
	switch c := s.peek(); {
	case c == eof:
		return s.syntaxErr("unexpected end of %s, want a value", s.doc)
	case !valueStart(c):
		return s.syntaxErr("unexpected %q, want a value", rune(c))
	}
	return err
}

// expect consumes byte c after optional whitespace.
func (s *scanner) expect(c byte) error {
	switch got := s.peek(); got {
	case int(c):
		s.i++
		return nil
	case eof:
		return s.syntaxErr("unexpected end of %s, want %q", s.doc, c)
	default:
		return s.syntaxErr("unexpected %q, want %q", rune(got), c)
	}
}

// kind names the value that starts next, for "x is a number" messages.
func (s *scanner) kind() string {
	switch c := s.peek(); {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	case c == eof:
		return "the end of the " + s.doc
	default:
		return fmt.Sprintf("%q", rune(c))
	}
}

// str reads a string value.
func (s *scanner) str() (string, error) {
	raw, escaped, err := s.rawStr()
	if err != nil || !escaped {
		return string(raw), err
	}
	// Escapes are rare in headers; let encoding/json decode them
	// (surrogate pairs, lone surrogates) exactly as it would.
	var out string
	if err := json.Unmarshal(s.b[s.i-len(raw)-2:s.i], &out); err != nil {
		return "", s.syntaxErr("bad string: %v", err)
	}
	return out, nil
}

// rawStr reads a string value and returns its bytes between the quotes,
// still escaped when escaped is true, without copying.
func (s *scanner) rawStr() (raw []byte, escaped bool, err error) {
	if err := s.expect('"'); err != nil {
		return nil, false, err
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], escaped, nil
		case c == '\\':
			escaped = true
			s.i++
			if s.i == len(s.b) {
				return nil, false, s.syntaxErr("unexpected end of %s in string", s.doc)
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for k := 0; k < 4; k++ {
					if s.i == len(s.b) || !isHex(s.b[s.i]) {
						return nil, false, s.syntaxErr("bad \\u escape in string")
					}
					s.i++
				}
			default:
				return nil, false, s.syntaxErr("bad escape \\%c in string", s.b[s.i])
			}
		case c < 0x20:
			return nil, false, s.syntaxErr("control character %#x in string", c)
		default:
			s.i++
		}
	}
	return nil, false, s.syntaxErr("unexpected end of %s in string", s.doc)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads a number and returns its literal text.
func (s *scanner) number() (string, error) {
	s.ws()
	start := s.i
	digits := func() bool {
		n := s.i
		for s.i < len(s.b) && isDigit(s.b[s.i]) {
			s.i++
		}
		return s.i > n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case !digits():
		return "", s.syntaxErr("malformed number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !digits() {
			return "", s.syntaxErr("malformed number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !digits() {
			return "", s.syntaxErr("malformed number")
		}
	}
	return string(s.b[start:s.i]), nil
}

// literal reads true, false or null.
func (s *scanner) literal() error {
	s.ws()
	for _, w := range []string{"true", "false", "null"} {
		if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
			s.i += len(w)
			return nil
		}
	}
	if s.i == len(s.b) {
		return s.syntaxErr("unexpected end of %s, want a value", s.doc)
	}
	return s.syntaxErr("unexpected %q, want a value", s.b[s.i])
}

// members reads the members of an object whose '{' is next, calling f with
// each key with the scanner at the value, which f must consume.
func (s *scanner) members(f func(key string) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := f(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		case eof:
			return s.syntaxErr("unexpected end of %s in object", s.doc)
		default:
			return s.syntaxErr("unexpected %q in object, want ',' or '}'", s.b[s.i])
		}
	}
}

// elements reads the elements of an array whose '[' is next, calling f
// with the scanner at each element, which f must consume.
func (s *scanner) elements(f func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := f(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		case eof:
			return s.syntaxErr("unexpected end of %s in array", s.doc)
		default:
			return s.syntaxErr("unexpected %q in array, want ',' or ']'", s.b[s.i])
		}
	}
}

// skip consumes one value of any kind, checking its syntax.
func (s *scanner) skip(depth int) error {
	if depth > maxDepth {
		return s.syntaxErr("values nested too deeply")
	}
	switch c := s.peek(); {
	case c == '{':
		return s.members(func(string) error { return s.skip(depth + 1) })
	case c == '[':
		return s.elements(func() error { return s.skip(depth + 1) })
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		_, err := s.number()
		return err
	default:
		return s.literal()
	}
}

// end checks that only whitespace (the writer's padding) remains.
func (s *scanner) end(what string) error {
	if s.peek() != eof {
		return s.syntaxErr("%s after the %s object", s.kind(), what)
	}
	return nil
}
