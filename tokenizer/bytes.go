package tokenizer

import (
	"unicode/utf8"
)

// byteToRune is GPT-2's reversible byte→character map used by ByteLevel
// pre-tokenizers and decoders: printable bytes map to themselves, the rest to
// U+0100 and up, so that every byte string becomes a printable string.
var byteToRune [256]rune

// byteToString caches string(byteToRune[b]).
var byteToString [256]string

// runeToByte inverts byteToRune; entries are -1 for characters outside the map.
var runeToByte [324]int16

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
	}
	for i := range runeToByte {
		runeToByte[i] = -1
	}
	for b := 0; b < 256; b++ {
		byteToString[b] = string(byteToRune[b])
		runeToByte[byteToRune[b]] = int16(b)
	}
}

// byteLevelEncode maps every byte of s through byteToRune.
func byteLevelEncode(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = utf8.AppendRune(dst, byteToRune[s[i]])
	}
	return dst
}

// byteLevelDecodeToken appends the bytes a ByteLevel token stands for. As in
// HF tokenizers, a token with any character outside the byte map is kept as
// its own UTF-8 bytes.
func byteLevelDecodeToken(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		if r < 0 || int(r) >= len(runeToByte) || runeToByte[r] < 0 {
			return append(dst[:start], tok...)
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst
}

// lossyUTF8 converts b to a string the way Rust's String::from_utf8_lossy
// does: each maximal invalid subsequence (per the Unicode "substitution of
// maximal subparts" practice) becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			out = append(out, b[i])
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		// Invalid: skip the maximal prefix of a valid sequence.
		i += invalidPrefixLen(b[i:])
		out = append(out, "\uFFFD"...)
	}
	return string(out)
}

// invalidPrefixLen returns the length of the maximal subpart of an ill-formed
// sequence at the start of b (at least 1).
func invalidPrefixLen(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if x < lo || x > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}

// isWhiteSpace reports Unicode White_Space, which is what Rust's
// char::is_whitespace and Oniguruma's \s match.
func isWhiteSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}
