package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is a substring on its way to the model. atStart marks a piece that
// begins at offset 0 of the original text (Metaspace's "first" scheme).
type piece struct {
	s       string
	atStart bool
}

// preTokenizer splits a piece into smaller pieces (HF "pre_tokenizer"). It
// calls emit for each non-empty piece, in order.
type preTokenizer interface {
	split(p piece, emit func(piece))
}

type preSequence []preTokenizer

func (q preSequence) split(p piece, emit func(piece)) {
	q.run(0, p, emit)
}

func (q preSequence) run(k int, p piece, emit func(piece)) {
	if k == len(q) {
		emit(p)
		return
	}
	q[k].split(p, func(c piece) { q.run(k+1, c, emit) })
}

// emitSpans emits the kept spans of p.
func emitSpans(p piece, spans []span, emit func(piece)) {
	for _, sp := range spans {
		if sp.end > sp.start {
			emit(piece{p.s[sp.start:sp.end], p.atStart && sp.start == 0})
		}
	}
}

type splitPre struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (sp splitPre) split(p piece, emit func(piece)) {
	if f, ok := sp.m.(splitterFunc); ok && sp.behavior == behaviorIsolated {
		// Fast path: every match and gap becomes a piece.
		prev := 0
		f(p.s, func(start, end int) {
			if prev < start {
				emit(piece{p.s[prev:start], p.atStart && prev == 0})
			}
			emit(piece{p.s[start:end], p.atStart && start == 0})
			prev = end
		})
		if prev < len(p.s) {
			emit(piece{p.s[prev:], p.atStart && prev == 0})
		}
		return
	}
	var buf [16]span
	emitSpans(p, applyBehavior(findSpans(sp.m, p.s, sp.invert, buf[:0]), sp.behavior), emit)
}

type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

func (b byteLevelPre) split(p piece, emit func(piece)) {
	if b.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
		p.s = " " + p.s
	}
	mapped := func(q piece) {
		emit(piece{string(byteLevelEncode(make([]byte, 0, 2*len(q.s)), q.s)), q.atStart})
	}
	if !b.useRegex {
		mapped(p)
		return
	}
	// The GPT-2 splitter's pieces tile the text, so nothing falls between them.
	splitGPT2(p.s, func(start, end int) {
		mapped(piece{p.s[start:end], p.atStart && start == 0})
	})
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

type metaspacePre struct {
	replacement string
	scheme      prependScheme
	splitRepl   bool // split on the replacement, merged with the next piece
}

func (m metaspacePre) split(p piece, emit func(piece)) {
	s := strings.ReplaceAll(p.s, " ", m.replacement)
	if !strings.HasPrefix(s, m.replacement) &&
		(m.scheme == prependAlways || m.scheme == prependFirst && p.atStart) {
		s = m.replacement + s
	}
	q := piece{s, p.atStart}
	if !m.splitRepl {
		emit(q)
		return
	}
	var buf [16]span
	emitSpans(q, applyBehavior(findSpans(literal(m.replacement), s, false, buf[:0]), behaviorMergedWithNext), emit)
}

// charPre splits on characters matching a predicate.
type charPre struct {
	is       func(rune) bool
	behavior splitBehavior
}

func (c charPre) split(p piece, emit func(piece)) {
	var spans []span
	if p.s == "" {
		spans = []span{{0, 0, false}}
	}
	last := 0
	for i := 0; i < len(p.s); {
		r, n := utf8.DecodeRuneInString(p.s[i:])
		if c.is(r) && !(r == utf8.RuneError && n == 1) {
			if last < i {
				spans = append(spans, span{last, i, false})
			}
			spans = append(spans, span{i, i + n, true})
			last = i + n
		}
		i += n
	}
	if last < len(p.s) {
		spans = append(spans, span{last, len(p.s), false})
	}
	emitSpans(p, applyBehavior(spans, c.behavior), emit)
}

// isPunct is Rust's char::is_ascii_punctuation || char::is_punctuation.
func isPunct(r rune) bool {
	if r < 128 {
		return r > ' ' && r < 127 && !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}
	return unicode.IsPunct(r)
}

// isNumeric is Rust's char::is_numeric (general categories Nd, Nl, No).
func isNumeric(r rune) bool { return unicode.IsNumber(r) }

// isWordChar is the Rust regex crate's Unicode \w.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

// whitespacePre is HF's Whitespace: keep runs matching `\w+|[^\w\s]+`.
type whitespacePre struct{}

func (whitespacePre) split(p piece, emit func(piece)) {
	s := p.s
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if isWhiteSpace(r) {
			i += n
			continue
		}
		word := isWordChar(r)
		j := i + n
		for j < len(s) {
			r2, n2 := utf8.DecodeRuneInString(s[j:])
			if isWhiteSpace(r2) || isWordChar(r2) != word {
				break
			}
			j += n2
		}
		emit(piece{s[i:j], p.atStart && i == 0})
		i = j
	}
}

// bertPre is HF's BertPreTokenizer: split on whitespace (removed) and
// punctuation (isolated).
type bertPre struct{}

func (bertPre) split(p piece, emit func(piece)) {
	charPre{isWhiteSpace, behaviorRemoved}.split(p, func(q piece) {
		charPre{isPunct, behaviorIsolated}.split(q, emit)
	})
}

var preTokenizerTypes = map[string]bool{
	"ByteLevel": true, "Split": true, "Metaspace": true, "Digits": true, "Punctuation": true,
	"Whitespace": true, "WhitespaceSplit": true, "BertPreTokenizer": true, "Sequence": true,
}

func parsePreTokenizer(raw json.RawMessage, path string) (preTokenizer, error) {
	var c struct {
		Type             string            `json:"type"`
		Pretokenizers    []json.RawMessage `json:"pretokenizers"`
		AddPrefixSpace   *bool             `json:"add_prefix_space"`
		UseRegex         *bool             `json:"use_regex"`
		Pattern          *rawPattern       `json:"pattern"`
		Behavior         *string           `json:"behavior"`
		Invert           bool              `json:"invert"`
		Replacement      *string           `json:"replacement"`
		PrependScheme    *string           `json:"prepend_scheme"`
		Split            *bool             `json:"split"`
		IndividualDigits bool              `json:"individual_digits"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fieldErr(path, err)
	}
	switch c.Type {
	case "ByteLevel":
		return byteLevelPre{c.AddPrefixSpace == nil || *c.AddPrefixSpace, c.UseRegex == nil || *c.UseRegex}, nil
	case "Split":
		m, err := c.Pattern.compile()
		if err != nil {
			return nil, fieldErr(path+".pattern", err)
		}
		if c.Behavior == nil {
			return nil, fieldErr(path+".behavior", fmt.Errorf("missing"))
		}
		b, err := parseBehavior(*c.Behavior)
		if err != nil {
			return nil, fieldErr(path+".behavior", err)
		}
		return splitPre{m, b, c.Invert}, nil
	case "Metaspace":
		m := metaspacePre{replacement: "▁", scheme: prependAlways, splitRepl: c.Split == nil || *c.Split}
		if c.Replacement != nil {
			if utf8.RuneCountInString(*c.Replacement) != 1 {
				return nil, fieldErr(path+".replacement", fmt.Errorf("want one character, got %q", *c.Replacement))
			}
			m.replacement = *c.Replacement
		}
		if c.PrependScheme != nil {
			switch *c.PrependScheme {
			case "always":
				m.scheme = prependAlways
			case "first":
				m.scheme = prependFirst
			case "never":
				m.scheme = prependNever
			default:
				return nil, fieldErr(path+".prepend_scheme", fmt.Errorf("want always, first or never, got %q", *c.PrependScheme))
			}
		}
		if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
			if c.PrependScheme != nil && m.scheme != prependNever {
				return nil, fieldErr(path+".add_prefix_space", fmt.Errorf("false does not match prepend_scheme %q", *c.PrependScheme))
			}
			m.scheme = prependNever
		}
		return m, nil
	case "Digits":
		if c.IndividualDigits {
			return charPre{isNumeric, behaviorIsolated}, nil
		}
		return charPre{isNumeric, behaviorContiguous}, nil
	case "Punctuation":
		b := behaviorIsolated
		if c.Behavior != nil {
			var err error
			if b, err = parseBehavior(*c.Behavior); err != nil {
				return nil, fieldErr(path+".behavior", err)
			}
		}
		return charPre{isPunct, b}, nil
	case "Whitespace":
		return whitespacePre{}, nil
	case "WhitespaceSplit":
		return charPre{isWhiteSpace, behaviorRemoved}, nil
	case "BertPreTokenizer":
		return bertPre{}, nil
	case "Sequence":
		q, err := parseSequence(c.Pretokenizers, path+".pretokenizers", parsePreTokenizer)
		if err != nil {
			return nil, err
		}
		return preSequence(q), nil
	}
	return nil, typeErr(path, "pre_tokenizer", c.Type, preTokenizerTypes)
}
