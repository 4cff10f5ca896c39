package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Go's regexp has no lookahead, and the regexes of GPT-2, Llama 3 and Qwen
// end in `\s+(?!\S)|\s+`. These hand-written splitters reproduce what
// Oniguruma (HF tokenizers' engine) matches for those exact patterns; the
// tests check them against regexp2 and against HF on the corpus.

const (
	// gpt2Pattern is GPT-2's regex, also the built-in regex of ByteLevel.
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// llama3Pattern is the cl100k-style regex of Llama 3 (digits in groups of up to 3).
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Pattern is Qwen2/Qwen3's variant with single digits.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// knownSplitter returns the hand-written matcher for a known regex, or nil.
func knownSplitter(p string) func(string, func(int, int)) {
	switch p {
	case gpt2Pattern:
		return splitGPT2
	case llama3Pattern:
		return func(s string, fn func(int, int)) { splitCL100K(s, 3, fn) }
	case qwen2Pattern:
		return func(s string, fn func(int, int)) { splitCL100K(s, 1, fn) }
	}
	return nil
}

// Character classes. Invalid UTF-8 bytes decode as utf8.RuneError (an
// "other" character, like U+FFFD), one byte each.
const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
)

// asciiClass classifies the ASCII range without table lookups.
var asciiClass [128]uint8

func init() {
	for c := 0; c < 128; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			asciiClass[c] = clsLetter
		case c >= '0' && c <= '9':
			asciiClass[c] = clsNumber
		case c == ' ' || (c >= '\t' && c <= '\r'):
			asciiClass[c] = clsSpace
		default:
			asciiClass[c] = clsOther
		}
	}
}

// classAt decodes the character at s[i:] and returns its class and width.
func classAt(s string, i int) (rune, int, uint8) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case n == 1:
		return r, 1, clsOther
	case unicode.IsLetter(r):
		return r, n, clsLetter
	case unicode.IsNumber(r):
		return r, n, clsNumber
	case isWhiteSpace(r):
		return r, n, clsSpace
	}
	return r, n, clsOther
}

// contraction returns the length of `'s|'t|'re|'ve|'m|'ll|'d` at s[i:]
// (s[i] == '\”), case-insensitively if fold, or 0.
func contraction(s string, i int, fold bool) int {
	rest := s[i+1:]
	lower := func(k int) (byte, int) {
		if k >= len(rest) {
			return 0, 0
		}
		c := rest[k]
		if fold {
			if c >= 'A' && c <= 'Z' {
				return c + 32, 1
			}
			// U+017F LATIN SMALL LETTER LONG S case-folds to 's'.
			if c == 0xC5 && k+1 < len(rest) && rest[k+1] == 0xBF {
				return 's', 2
			}
		}
		return c, 1
	}
	c0, n0 := lower(0)
	switch c0 {
	case 's', 't', 'm', 'd':
		return 1 + n0
	case 'r', 'v', 'l':
		c1, n1 := lower(n0)
		if (c0 == 'r' || c0 == 'v') && c1 == 'e' || c0 == 'l' && c1 == 'l' {
			return 1 + n0 + n1
		}
	}
	return 0
}

// whitespaceRun returns the end of the run of whitespace starting at i, and
// the start of its last character.
func whitespaceRun(s string, i int) (end, lastStart int) {
	end, lastStart = i, i
	for end < len(s) {
		_, n, cls := classAt(s, end)
		if cls != clsSpace {
			break
		}
		lastStart = end
		end += n
	}
	return end, lastStart
}

// spaceTail matches `\s+(?!\S)|\s+` at i (s[i] is whitespace): the whole run
// if it ends the string or is one character, else the run minus its last
// character.
func spaceTail(s string, i int) int {
	end, last := whitespaceRun(s, i)
	if end == len(s) || last == i {
		return end
	}
	return last
}

// splitCL100K matches the Llama 3 (maxDigits 3) and Qwen 2 (maxDigits 1) regex.
func splitCL100K(s string, maxDigits int, fn func(int, int)) {
	for i := 0; i < len(s); {
		r, n, cls := classAt(s, i)
		end := i + n
		switch {
		case r == '\'' && contraction(s, i, true) > 0:
			end = i + contraction(s, i, true)
		case cls == clsLetter:
			end = classRun(s, end, clsLetter)
		case cls != clsNumber && r != '\r' && r != '\n' && end < len(s) && isLetterAt(s, end):
			// [^\r\n\p{L}\p{N}]?\p{L}+ with the optional character.
			end = classRun(s, end, clsLetter)
		case cls == clsNumber:
			for d := 1; d < maxDigits && end < len(s); d++ {
				_, n2, c2 := classAt(s, end)
				if c2 != clsNumber {
					break
				}
				end += n2
			}
		case cls == clsOther || (r == ' ' && end < len(s) && isOtherAt(s, end)):
			//  ?[^\s\p{L}\p{N}]+[\r\n]*
			end = classRun(s, end, clsOther)
			for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
				end++
			}
		default: // whitespace
			// \s*[\r\n]+ : up to and including the last newline of the run.
			runEnd, _ := whitespaceRun(s, i)
			nl := -1
			for k := i; k < runEnd; k++ {
				if s[k] == '\r' || s[k] == '\n' {
					nl = k
				}
			}
			if nl >= 0 {
				end = nl + 1
			} else {
				end = spaceTail(s, i)
			}
		}
		fn(i, end)
		i = end
	}
}

// splitGPT2 matches GPT-2's regex.
func splitGPT2(s string, fn func(int, int)) {
	for i := 0; i < len(s); {
		r, n, cls := classAt(s, i)
		end := i + n
		if r == ' ' && end < len(s) {
			if _, n2, c2 := classAt(s, end); c2 != clsSpace {
				cls = c2 // " ?" prefix: the class of the next character decides
				end += n2
			}
		}
		switch {
		case r == '\'' && contraction(s, i, false) > 0:
			end = i + contraction(s, i, false)
		case cls != clsSpace: // ?\p{L}+, ?\p{N}+ or ?[^\s\p{L}\p{N}]+
			end = classRun(s, end, cls)
		default:
			end = spaceTail(s, i)
		}
		fn(i, end)
		i = end
	}
}

// classRun returns the end of the run of characters of class cls starting
// at i.
func classRun(s string, i int, cls uint8) int {
	for i < len(s) {
		_, n, c := classAt(s, i)
		if c != cls {
			break
		}
		i += n
	}
	return i
}

func isLetterAt(s string, i int) bool { _, _, c := classAt(s, i); return c == clsLetter }
func isOtherAt(s string, i int) bool  { _, _, c := classAt(s, i); return c == clsOther }
