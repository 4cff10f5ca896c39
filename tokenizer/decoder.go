package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoder turns tokens back into text pieces (HF "decoder"); decoders chain
// on the list of pieces, and the final text is their concatenation.
type decoder interface {
	decodeChain(tokens []string) []string
}

type decSequence []decoder

func (q decSequence) decodeChain(t []string) []string {
	for _, d := range q {
		t = d.decodeChain(t)
	}
	return t
}

type byteLevelDec struct{}

func (byteLevelDec) decodeChain(t []string) []string {
	var b []byte
	for _, tok := range t {
		b = byteLevelDecodeToken(b, tok)
	}
	return []string{lossyUTF8(b)}
}

type metaspaceDec struct {
	replacement rune
	scheme      prependScheme
}

func (m metaspaceDec) decodeChain(t []string) []string {
	out := make([]string, len(t))
	for i, tok := range t {
		if !strings.ContainsRune(tok, m.replacement) {
			out[i] = tok
			continue
		}
		var b strings.Builder
		for _, r := range tok {
			if r == m.replacement {
				if i == 0 && m.scheme != prependNever {
					continue
				}
				r = ' '
			}
			b.WriteRune(r)
		}
		out[i] = b.String()
	}
	return out
}

type byteFallbackDec struct{}

func (byteFallbackDec) decodeChain(t []string) []string {
	out := make([]string, 0, len(t))
	var pend []byte
	flush := func() {
		if len(pend) == 0 {
			return
		}
		if utf8.Valid(pend) {
			out = append(out, string(pend))
		} else {
			for range pend {
				out = append(out, "\uFFFD")
			}
		}
		pend = pend[:0]
	}
	for _, tok := range t {
		if b, ok := parseByteToken(tok); ok {
			pend = append(pend, b)
			continue
		}
		flush()
		out = append(out, tok)
	}
	flush()
	return out
}

// parseByteToken recognizes SentencePiece byte tokens "<0xNN>".
func parseByteToken(tok string) (byte, bool) {
	if len(tok) != 6 || tok[:3] != "<0x" || tok[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexVal(tok[3])
	lo, ok2 := hexVal(tok[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

type fuseDec struct{}

func (fuseDec) decodeChain(t []string) []string { return []string{strings.Join(t, "")} }

type stripDec struct {
	content     rune
	start, stop int
}

func (s stripDec) decodeChain(t []string) []string {
	out := make([]string, len(t))
	for i, tok := range t {
		rs := []rune(tok)
		a := 0
		for k := 0; k < s.start && k < len(rs); k++ {
			if rs[k] != s.content {
				break
			}
			a = k + 1
		}
		z := len(rs)
		for k := 0; k < s.stop && k < len(rs); k++ {
			idx := len(rs) - k - 1
			if rs[idx] != s.content {
				break
			}
			z = idx
		}
		if z < a {
			z = a
		}
		out[i] = string(rs[a:z])
	}
	return out
}

// replaceDec applies the Replace normalizer to each token.
type replaceDec replace

func (r replaceDec) decodeChain(t []string) []string {
	out := make([]string, len(t))
	for i, tok := range t {
		out[i] = replace(r).normalize(tok)
	}
	return out
}

// wordPieceDec is HF's WordPiece decoder.
type wordPieceDec struct {
	prefix  string
	cleanup bool
}

func (w wordPieceDec) decodeChain(t []string) []string {
	out := make([]string, len(t))
	for i, tok := range t {
		if i != 0 {
			if strings.HasPrefix(tok, w.prefix) {
				tok = tok[len(w.prefix):]
			} else {
				tok = " " + tok
			}
		}
		if w.cleanup {
			tok = cleanupTokenization(tok)
		}
		out[i] = tok
	}
	return out
}

// cleanupTokenization is HF's clean_up_tokenization.
func cleanupTokenization(s string) string {
	r := strings.NewReplacer(" .", ".", " ?", "?", " !", "!", " ,", ",", " ' ", "'",
		" n't", "n't", " 'm", "'m", " 's", "'s", " 've", "'ve", " 're", "'re")
	return r.Replace(s)
}

var decoderTypes = map[string]bool{
	"ByteLevel": true, "Metaspace": true, "ByteFallback": true, "Fuse": true, "Strip": true,
	"Replace": true, "Sequence": true, "WordPiece": true,
}

func parseDecoder(raw json.RawMessage, path string) (decoder, error) {
	var c struct {
		Type           string            `json:"type"`
		Decoders       []json.RawMessage `json:"decoders"`
		Replacement    *string           `json:"replacement"`
		PrependScheme  *string           `json:"prepend_scheme"`
		AddPrefixSpace *bool             `json:"add_prefix_space"`
		Content        *string           `json:"content"`
		Start          int               `json:"start"`
		Stop           int               `json:"stop"`
		Pattern        *rawPattern       `json:"pattern"`
		Prefix         *string           `json:"prefix"`
		Cleanup        *bool             `json:"cleanup"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fieldErr(path, err)
	}
	switch c.Type {
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "Metaspace":
		m := metaspaceDec{replacement: '▁', scheme: prependAlways}
		if c.Replacement != nil {
			r, n := utf8.DecodeRuneInString(*c.Replacement)
			if n == 0 || n != len(*c.Replacement) {
				return nil, fieldErr(path+".replacement", fmt.Errorf("want one character, got %q", *c.Replacement))
			}
			m.replacement = r
		}
		if c.PrependScheme != nil {
			switch *c.PrependScheme {
			case "always":
			case "first":
				m.scheme = prependFirst
			case "never":
				m.scheme = prependNever
			default:
				return nil, fieldErr(path+".prepend_scheme", fmt.Errorf("want always, first or never, got %q", *c.PrependScheme))
			}
		}
		if c.AddPrefixSpace != nil && !*c.AddPrefixSpace {
			m.scheme = prependNever
		}
		return m, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Strip":
		if c.Content == nil || utf8.RuneCountInString(*c.Content) != 1 {
			return nil, fieldErr(path+".content", fmt.Errorf("want one character"))
		}
		r, _ := utf8.DecodeRuneInString(*c.Content)
		return stripDec{r, c.Start, c.Stop}, nil
	case "Replace":
		r, err := parseReplace(c.Pattern, c.Content, path)
		if err != nil {
			return nil, err
		}
		return replaceDec(r), nil
	case "WordPiece":
		w := wordPieceDec{prefix: "##", cleanup: true}
		if c.Prefix != nil {
			w.prefix = *c.Prefix
		}
		if c.Cleanup != nil {
			w.cleanup = *c.Cleanup
		}
		return w, nil
	case "Sequence":
		q, err := parseSequence(c.Decoders, path+".decoders", parseDecoder)
		if err != nil {
			return nil, err
		}
		return decSequence(q), nil
	}
	return nil, typeErr(path, "decoder", c.Type, decoderTypes)
}
