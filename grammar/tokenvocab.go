package grammar

import "slices"

// TokenSource is the part of a tokenizer a grammar vocabulary is read
// from. *tokenizer.Tokenizer (module github.com/mlxgo/mlxgo/tokenizer)
// implements it as is, so callers holding both packages connect them with
// NewTokenizerVocab and neither package imports the other.
type TokenSource interface {
	// Token returns the vocabulary string of id (an added token's content,
	// or the model's piece as tokenizer.json spells it).
	Token(id int) (string, bool)
	// ID returns the id of a piece; DetectVocabKind probes marker pieces.
	ID(piece string) (int, bool)
	// IsSpecial reports control tokens, which a grammar never allows as text.
	IsSpecial(id int) bool
}

// DetectVocabKind guesses how src spells token bytes from marker pieces
// every tokenizer of a kind has: SentencePiece vocabularies have ▁ or the
// byte pieces <0x00>…<0xFF>, GPT-2 byte-level ones spell space and newline
// as Ġ and Ċ. Anything else is taken as raw text. Callers that know the
// kind from tokenizer.json's decoder should pass it instead.
func DetectVocabKind(src TokenSource) VocabKind {
	for _, p := range []string{"<0x0A>", "<0x20>", "<0x00>", "\u2581"} {
		if _, ok := src.ID(p); ok {
			return VocabByteFallback
		}
	}
	for _, p := range []string{"Ġ", "Ċ", "ĠĠ", "Ġt"} {
		if _, ok := src.ID(p); ok {
			return VocabByteLevel
		}
	}
	return VocabRaw
}

// NewTokenizerVocab reads a Vocabulary of size ids from src, decoding
// each piece's bytes as kind says. size is the width of the model's
// logits, which may exceed the tokenizer's vocabulary (the extra ids have
// no bytes and are never allowed) or fall short of it (the tokenizer's
// extra ids are dropped). stop lists the ids that end generation (the
// model's EOS ids); ids outside [0, size) are skipped, and stop ids are
// marked special so that they are only ever allowed as stops, never as
// text inside the grammar.
//
// A piece that does not decode as kind (an added token written as plain
// text in a byte-level vocabulary, say) keeps its own UTF-8 bytes, which
// is what Hugging Face's decoders do with it too.
func NewTokenizerVocab(src TokenSource, kind VocabKind, size int, stop []int) *SimpleVocab {
	v := &SimpleVocab{bytes: make([][]byte, size), special: make([]bool, size)}
	for id := 0; id < size; id++ {
		p, ok := src.Token(id)
		if !ok {
			continue
		}
		if src.IsSpecial(id) {
			v.special[id] = true
			v.bytes[id] = []byte(p)
			continue
		}
		b, err := DecodePiece(kind, p)
		if err != nil {
			b = []byte(p)
		}
		v.bytes[id] = b
	}
	for _, s := range stop {
		if s < 0 || s >= size {
			continue
		}
		v.special[s] = true
		if !slices.Contains(v.stop, s) {
			v.stop = append(v.stop, s)
		}
	}
	return v
}
