package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestDetokenizerMatchesDecode streams every corpus encoding id by id: the
// chunks must join to Decode's text, and no chunk may split a character.
func TestDetokenizerMatchesDecode(t *testing.T) {
	for _, name := range realNames {
		t.Run(name, func(t *testing.T) {
			tk := realTokenizer(t, name)
			g := readGolden(t, name)
			bad := 0
			for _, skip := range []bool{false, true} {
				d := tk.NewDetokenizer(skip)
				for _, e := range g.Encode {
					var b strings.Builder
					for _, id := range e.IDs {
						chunk := d.Add(id)
						if !utf8.ValidString(chunk) {
							t.Errorf("invalid chunk %q", chunk)
						}
						b.WriteString(chunk)
					}
					b.WriteString(d.Flush())
					want := e.Decode
					if skip {
						want = e.DecodeSkip
					}
					if b.String() != want {
						if bad++; bad <= 5 {
							t.Errorf("skip=%v %q: stream %q, decode %q", skip, truncate(e.Text, 60), truncate(b.String(), 80), truncate(want, 80))
						}
					}
				}
			}
		})
	}
}

// TestDetokenizerHoldsPartialCharacters checks that a multi-byte character
// split over byte tokens is emitted whole.
func TestDetokenizerHoldsPartialCharacters(t *testing.T) {
	for _, name := range realNames {
		tk := realTokenizer(t, name)
		text := "a€ 🧑🏾‍🚀 ok"
		ids := tk.Encode(text, false)
		d := tk.NewDetokenizer(false)
		var chunks []string
		for _, id := range ids {
			if c := d.Add(id); c != "" {
				chunks = append(chunks, c)
			}
		}
		if c := d.Flush(); c != "" {
			chunks = append(chunks, c)
		}
		if got := strings.Join(chunks, ""); got != tk.Decode(ids, false) {
			t.Errorf("%s: %q != %q", name, got, tk.Decode(ids, false))
		}
		for _, c := range chunks {
			if strings.ContainsRune(c, utf8.RuneError) {
				t.Errorf("%s: chunk %q has U+FFFD (ids %v)", name, c, ids)
			}
		}
	}
}
