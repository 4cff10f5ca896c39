package grammar

import (
	"testing"
)

// fakeSource is a TokenSource over a piece list; special ids are listed.
type fakeSource struct {
	pieces  []string
	special map[int]bool
}

func (f *fakeSource) Token(id int) (string, bool) {
	if id < 0 || id >= len(f.pieces) || f.pieces[id] == "" {
		return "", false
	}
	return f.pieces[id], true
}

func (f *fakeSource) ID(p string) (int, bool) {
	for i, q := range f.pieces {
		if q == p && q != "" {
			return i, true
		}
	}
	return 0, false
}

func (f *fakeSource) IsSpecial(id int) bool { return f.special[id] }

// TestTokenizerVocab checks kind detection and byte decoding for the three
// vocabulary kinds, the logits-width padding and truncation, and that stop
// ids are special (allowed only as stops, never as text).
func TestTokenizerVocab(t *testing.T) {
	bl := &fakeSource{pieces: []string{"<|eot|>", "Ġ", "Ċ", "Ġ{\"", "é", "Ã©", "<think>", "ok"}, special: map[int]bool{0: true}}
	sp := &fakeSource{pieces: []string{"<pad>", "<eos>", "<0x0A>", "<0xC3>", "▁the", "▁", "x▁y"}, special: map[int]bool{0: true, 1: true}}
	raw := &fakeSource{pieces: []string{"<eos>", "hello", " world", "é"}, special: map[int]bool{0: true}}
	for _, c := range []struct {
		name string
		src  *fakeSource
		kind VocabKind
		size int
		stop []int
		want map[int]string // id -> bytes ("" with the id in none: no bytes)
		none []int
	}{
		{"byte-level", bl, VocabByteLevel, 10, []int{0, 7, 99},
			map[int]string{1: " ", 2: "\n", 3: " {\"", 4: "\xe9", 5: "é", 6: "<think>"}, []int{8, 9}},
		{"byte-fallback", sp, VocabByteFallback, 7, []int{1},
			map[int]string{2: "\n", 3: "\xc3", 4: " the", 5: " ", 6: "x y"}, nil},
		{"raw", raw, VocabRaw, 3, []int{0},
			map[int]string{1: "hello", 2: " world"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if k := DetectVocabKind(c.src); k != c.kind {
				t.Fatalf("kind %d, want %d", k, c.kind)
			}
			v := NewTokenizerVocab(c.src, c.kind, c.size, c.stop)
			if v.Size() != c.size {
				t.Fatalf("size %d, want %d", v.Size(), c.size)
			}
			for id, want := range c.want {
				if got := string(v.TokenBytes(id)); got != want || v.IsSpecial(id) {
					t.Errorf("token %d: %q special=%v, want %q ordinary", id, got, v.IsSpecial(id), want)
				}
			}
			for _, id := range c.none {
				if len(v.TokenBytes(id)) != 0 {
					t.Errorf("token %d beyond the tokenizer has bytes %q", id, v.TokenBytes(id))
				}
			}
			var wantStop []int
			for _, s := range c.stop {
				if s < c.size {
					wantStop = append(wantStop, s)
					if !v.IsSpecial(s) {
						t.Errorf("stop %d not special", s)
					}
				}
			}
			if got := v.StopTokens(); len(got) != len(wantStop) {
				t.Errorf("stops %v, want %v", got, wantStop)
			}
			if _, err := NewTokenizerInfo(v); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A stop id that is ordinary text ("ok" above) is only a stop: a
	// grammar matching "ok" must not accept it as text.
	v := NewTokenizerVocab(bl, VocabByteLevel, 8, []int{7})
	ti, err := NewTokenizerInfo(v)
	if err != nil {
		t.Fatal(err)
	}
	g, err := RegexGrammar("o?k?")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMatcher(CompileGrammar(g, ti, CompileOptions{}))
	mask := make([]int32, ti.BitmaskWords())
	if err := m.FillNextTokenBitmask(mask); err != nil {
		t.Fatal(err)
	}
	if mask[0]&(1<<7) == 0 {
		t.Error("stop token not allowed where the grammar may end")
	}
	if !m.AcceptToken(7) || !m.IsTerminated() {
		t.Error("the stop token did not terminate the grammar")
	}
}
