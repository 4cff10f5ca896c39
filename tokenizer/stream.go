package tokenizer

import "strings"

// Detokenizer turns generated token ids into text as they arrive. It emits
// text only when it is final: never half of a UTF-8 character (byte-level or
// byte-fallback pieces are held until complete), and with the same spaces
// the full Decode would give (decoders that drop the leading space of the
// first token, such as SentencePiece's, see the previous token as context).
// The concatenation of everything Add and Flush return equals Decode of all
// the ids. A Detokenizer is not safe for concurrent use.
type Detokenizer struct {
	t           *Tokenizer
	skipSpecial bool
	ids         []int
	prefix      int    // start of the decoding window
	read        int    // ids before read have been emitted
	prefixText  string // Decode(ids[prefix:read])
}

// NewDetokenizer starts a stream. With skipSpecial, special tokens produce no text.
func (t *Tokenizer) NewDetokenizer(skipSpecial bool) *Detokenizer {
	return &Detokenizer{t: t, skipSpecial: skipSpecial}
}

// Add appends one id and returns the text that became final, possibly "".
func (d *Detokenizer) Add(id int) string {
	d.ids = append(d.ids, id)
	text := d.t.Decode(d.ids[d.prefix:], d.skipSpecial)
	if len(text) <= len(d.prefixText) || strings.HasSuffix(text, "\uFFFD") || !strings.HasPrefix(text, d.prefixText) {
		return ""
	}
	out := text[len(d.prefixText):]
	d.prefix, d.read = d.read, len(d.ids)
	d.prefixText = d.t.Decode(d.ids[d.prefix:d.read], d.skipSpecial)
	// Keep the window short: ids before prefix are no longer needed.
	if d.prefix > 64 {
		d.ids = append(d.ids[:0], d.ids[d.prefix:]...)
		d.read -= d.prefix
		d.prefix = 0
	}
	return out
}

// Flush returns the text still held back (an incomplete character decodes as
// U+FFFD, as in Decode) and resets the stream.
func (d *Detokenizer) Flush() string {
	text := d.t.Decode(d.ids[d.prefix:], d.skipSpecial)
	out := ""
	if strings.HasPrefix(text, d.prefixText) {
		out = text[len(d.prefixText):]
	} else {
		out = text
	}
	d.Reset()
	return out
}

// Reset forgets the stream.
func (d *Detokenizer) Reset() {
	d.ids, d.prefix, d.read, d.prefixText = d.ids[:0], 0, 0, ""
}
