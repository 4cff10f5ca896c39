package grammar

import (
	"fmt"
	"strconv"
	"strings"
)

// VocabKind says how a tokenizer spells the bytes of its tokens, so that a
// vocabulary can be turned into raw byte strings without importing the
// tokenizer module.
type VocabKind int

const (
	// VocabRaw tokens are their own bytes.
	VocabRaw VocabKind = iota
	// VocabByteLevel tokens use the GPT-2 byte-to-unicode map (Llama 3, Qwen).
	VocabByteLevel
	// VocabByteFallback tokens are SentencePiece pieces: ▁ stands for a space
	// and <0xNN> for one raw byte (Gemma, Llama 2).
	VocabByteFallback
)

// Vocabulary is what the grammar needs from a tokenizer: the raw bytes of
// every token and which ids are special. It is defined here, where it is
// consumed, so that grammar depends on no tokenizer implementation.
type Vocabulary interface {
	// Size is the number of token ids (the largest id plus one).
	Size() int
	// TokenBytes returns the bytes the token stands for in generated text.
	// The slice must not be modified.
	TokenBytes(id int) []byte
	// IsSpecial reports control tokens (BOS, EOS, chat markers...). They are
	// never allowed by a grammar except as stop tokens.
	IsSpecial(id int) bool
	// StopTokens lists the ids that end generation (EOS, end-of-turn). They
	// are allowed exactly when the grammar may end.
	StopTokens() []int
}

// SimpleVocab is a ready Vocabulary built from token strings as they appear
// in a tokenizer.json vocabulary, decoded once according to a VocabKind.
type SimpleVocab struct {
	bytes   [][]byte
	special []bool
	stop    []int
}

// NewSimpleVocab decodes pieces (indexed by token id; "" for unused ids)
// with kind. special marks control tokens (may be nil), stop lists the
// stop-token ids. Special pieces are kept verbatim and never decoded.
func NewSimpleVocab(kind VocabKind, pieces []string, special []bool, stop []int) (*SimpleVocab, error) {
	v := &SimpleVocab{bytes: make([][]byte, len(pieces)), special: make([]bool, len(pieces))}
	for id, p := range pieces {
		if special != nil && id < len(special) && special[id] {
			v.special[id] = true
			v.bytes[id] = []byte(p)
			continue
		}
		b, err := DecodePiece(kind, p)
		if err != nil {
			return nil, fmt.Errorf("grammar: token %d %q: %w", id, p, err)
		}
		v.bytes[id] = b
	}
	for _, s := range stop {
		if s < 0 || s >= len(pieces) {
			return nil, fmt.Errorf("grammar: stop token %d outside vocabulary of %d", s, len(pieces))
		}
	}
	v.stop = append([]int(nil), stop...)
	return v, nil
}

// Size implements Vocabulary.
func (v *SimpleVocab) Size() int { return len(v.bytes) }

// TokenBytes implements Vocabulary.
func (v *SimpleVocab) TokenBytes(id int) []byte {
	if id < 0 || id >= len(v.bytes) {
		return nil
	}
	return v.bytes[id]
}

// IsSpecial implements Vocabulary.
func (v *SimpleVocab) IsSpecial(id int) bool { return id >= 0 && id < len(v.special) && v.special[id] }

// StopTokens implements Vocabulary.
func (v *SimpleVocab) StopTokens() []int { return v.stop }

var gpt2Decode = func() map[rune]byte {
	m := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[rune(b)] = byte(b)
		} else {
			m[rune(256+n)] = byte(b)
			n++
		}
	}
	return m
}()

// DecodePiece turns one vocabulary piece into the bytes it stands for.
func DecodePiece(kind VocabKind, p string) ([]byte, error) {
	switch kind {
	case VocabRaw:
		return []byte(p), nil
	case VocabByteLevel:
		out := make([]byte, 0, len(p))
		for _, r := range p {
			b, ok := gpt2Decode[r]
			if !ok {
				return nil, fmt.Errorf("rune %q is not in the byte-level map", r)
			}
			out = append(out, b)
		}
		return out, nil
	case VocabByteFallback:
		if len(p) == 6 && strings.HasPrefix(p, "<0x") && p[5] == '>' {
			if n, err := strconv.ParseUint(p[3:5], 16, 8); err == nil {
				return []byte{byte(n)}, nil
			}
		}
		return []byte(strings.ReplaceAll(p, "\u2581", " ")), nil
	}
	return nil, fmt.Errorf("unknown vocabulary kind %d", kind)
}
