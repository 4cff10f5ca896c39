package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var fuzzSeeds = []string{
	"", "Hello, world!", "I'm fine.\n\n  ok", "<|im_start|>user\nhi<|im_end|>", "<bos><start_of_turn>",
	"日本語 🧑🏾‍🚀 Ελληνικά", "e\u0301", "\xff\xfe", "a\xe2\x82b", "\xf0\x9f\x98", "\x00\x01\x7f", "▁▁ x",
	strings.Repeat(" ", 50), strings.Repeat("\n", 40),
}

// FuzzEncode feeds arbitrary bytes to the real tokenizers: encoding never
// panics, every id decodes, and valid UTF-8 round-trips through Decode (after
// the tokenizer's own normalization: NFC for Qwen; Gemma turns "▁" into " ").
func FuzzEncode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	toks := make([]*Tokenizer, len(realNames))
	for i, name := range realNames {
		toks[i] = realTokenizer(f, name)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, tk := range toks {
			name := realNames[i]
			ids := tk.Encode(s, true)
			plain := tk.Encode(s, false)
			for _, id := range ids {
				if _, ok := tk.Token(id); !ok {
					t.Fatalf("%s: id %d has no token", name, id)
				}
			}
			got := tk.Decode(plain, false)
			if !utf8.ValidString(s) {
				if !utf8.ValidString(got) {
					t.Fatalf("%s: decode of %q is not valid UTF-8: %q", name, s, got)
				}
				continue
			}
			want := s
			switch name {
			case "qwen3":
				want = norm.NFC.String(s)
			case "gemma3":
				if strings.ContainsRune(s, '▁') {
					continue
				}
			}
			if got != want {
				t.Fatalf("%s: round trip of %q gave %q (ids %v)", name, s, got, plain)
			}
			d := tk.NewDetokenizer(false)
			var b strings.Builder
			for _, id := range plain {
				b.WriteString(d.Add(id))
			}
			b.WriteString(d.Flush())
			if b.String() != got {
				t.Fatalf("%s: stream %q != decode %q", name, b.String(), got)
			}
		}
	})
}

// FuzzLoad feeds arbitrary tokenizer.json files to New: errors, never panics.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "a"]]}}`))
	f.Add([]byte(`{"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]}, "model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"}}`))
	f.Add([]byte(`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"}, "model": {}}`))
	f.Add([]byte(`{"added_tokens": [{"id": 5, "content": "x"}], "model": {"type": "WordPiece", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}, "decoder": {"type": "Strip", "content": " ", "start": 9, "stop": 9}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := New(data)
		if err != nil {
			return
		}
		for _, s := range []string{"", "ab a", "\xff x", "héllo wörld 12"} {
			ids := tk.Encode(s, true)
			tk.Decode(ids, false)
			tk.Decode(ids, true)
		}
	})
}
