package tokenizer

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// matcher finds the non-overlapping matches of a Split/Replace pattern, left
// to right, calling fn with each match's byte span.
type matcher interface {
	find(s string, fn func(start, end int))
}

// literal matches a fixed string (HF's "String" patterns).
type literal string

func (l literal) find(s string, fn func(start, end int)) {
	if l == "" {
		return
	}
	off := 0
	for {
		i := strings.Index(s[off:], string(l))
		if i < 0 {
			return
		}
		fn(off+i, off+i+len(l))
		off += i + len(l)
	}
}

// splitterFunc is a hand-written matcher for a known regex; see splitters.go.
type splitterFunc func(s string, fn func(start, end int))

func (f splitterFunc) find(s string, fn func(start, end int)) { f(s, fn) }

// backtracking runs a regex with lookaround through regexp2, whose .NET
// syntax and Unicode classes are close to the Oniguruma engine HF uses.
type backtracking struct{ re *regexp2.Regexp }

func (b backtracking) find(s string, fn func(start, end int)) {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD") // offsets are then approximate; never panics
	}
	idx, err := b.re.FindAllStringIndex(s, -1)
	if err != nil {
		return
	}
	prev := 0
	for _, m := range idx {
		if m[0] < prev || m[1] < m[0] || m[1] > len(s) {
			continue
		}
		fn(m[0], m[1])
		prev = m[1]
	}
}

// compilePattern builds a matcher for a Split or Replace pattern: a fixed
// string, or a regex (known tokenizer regexes get a hand-written splitter).
func compilePattern(isRegex bool, p string) (matcher, error) {
	if !isRegex {
		return literal(p), nil
	}
	if f := knownSplitter(p); f != nil {
		return splitterFunc(f), nil
	}
	re, err := regexp2.Compile(p, regexp2.None)
	if err != nil {
		return nil, err
	}
	return backtracking{re}, nil
}

// span is one piece of a string after pattern matching: a match or the text
// between matches.
type span struct {
	start, end int
	match      bool
}

// findSpans mirrors HF's Pattern::find_matches: matches and the gaps between
// them, covering s; an empty s gives one empty non-match.
func findSpans(m matcher, s string, invert bool, dst []span) []span {
	if s == "" {
		return append(dst, span{0, 0, invert})
	}
	prev := 0
	m.find(s, func(start, end int) {
		if prev != start {
			dst = append(dst, span{prev, start, invert})
		}
		dst = append(dst, span{start, end, !invert})
		prev = end
	})
	if prev != len(s) {
		dst = append(dst, span{prev, len(s), invert})
	}
	return dst
}

// splitBehavior is HF's SplitDelimiterBehavior.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed":            behaviorRemoved,
	"Isolated":           behaviorIsolated,
	"MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext":     behaviorMergedWithNext,
	"Contiguous":         behaviorContiguous,
}

func parseBehavior(s string) (splitBehavior, error) {
	b, ok := splitBehaviors[s]
	if !ok {
		return 0, errors.New("unknown behavior " + quote(s) + " (want one of " + strings.Join(keys(splitBehaviors), ", ") + ")")
	}
	return b, nil
}

// applyBehavior turns matched spans into the pieces to keep, as HF's
// NormalizedString::split does. Kept pieces are returned as spans with
// match=false; removed ones are dropped.
func applyBehavior(spans []span, b splitBehavior) []span {
	switch b {
	case behaviorIsolated:
		for i := range spans {
			spans[i].match = false
		}
		return spans
	case behaviorRemoved:
		out := spans[:0]
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
		return out
	case behaviorContiguous:
		out := spans[:0]
		prev := false
		for i, sp := range spans {
			if i > 0 && sp.match == prev && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prev = sp.match
		}
		return out
	case behaviorMergedWithPrevious:
		out := spans[:0]
		prev := false
		for _, sp := range spans {
			if sp.match && !prev && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prev = sp.match
		}
		return out
	case behaviorMergedWithNext:
		// Walk backwards, merging a match into the piece after it.
		rev := make([]span, 0, len(spans))
		prev := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prev && len(rev) > 0 {
				rev[len(rev)-1].start = sp.start
			} else {
				rev = append(rev, span{sp.start, sp.end, false})
			}
			prev = sp.match
		}
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		return rev
	}
	return spans
}

func quote(s string) string { return `"` + s + `"` }
