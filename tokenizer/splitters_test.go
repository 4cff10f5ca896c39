package tokenizer

import (
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The hand-written splitters must find exactly the matches a backtracking
// engine finds for the original patterns (lookahead included).
var splitterCases = []struct {
	name    string
	pattern string
	split   func(string, func(int, int))
}{
	{"gpt2", gpt2Pattern, splitGPT2},
	{"llama3", llama3Pattern, func(s string, fn func(int, int)) { splitCL100K(s, 3, fn) }},
	{"qwen2", qwen2Pattern, func(s string, fn func(int, int)) { splitCL100K(s, 1, fn) }},
}

func splitterSpans(split func(string, func(int, int)), s string) [][2]int {
	var out [][2]int
	split(s, func(a, b int) { out = append(out, [2]int{a, b}) })
	return out
}

func regexSpans(t testing.TB, re *regexp2.Regexp, s string) [][2]int {
	idx, err := re.FindAllStringIndex(s, -1)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][2]int, len(idx))
	for i, m := range idx {
		out[i] = [2]int{m[0], m[1]}
	}
	return out
}

func equalSpans(a, b [][2]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// splitterPool holds the characters the patterns treat differently.
var splitterPool = []string{
	"a", "Z", "é", "ß", "ж", "中", "ー", "ا", "\u0301", "\u0903", "1", "9", "٣", "Ⅻ", "½", "²",
	" ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\v", "\f", "\u200b",
	"'", "'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'x", "’s",
	".", ",", "!", "?", "-", "_", "(", ")", "\"", "#", "$", "😀", "👍🏽", "\u200d", "\ufe0f", "\x00", "\x7f", "\ufffd",
}

func randomSplitterInput(r *rand.Rand) string {
	var b strings.Builder
	for n := r.Intn(24); n >= 0; n-- {
		b.WriteString(splitterPool[r.Intn(len(splitterPool))])
	}
	return b.String()
}

func TestSplittersMatchRegex(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	inputs := []string{"", "Hello world", "I'm   fine\n\n  ok", "x  \n y", "  \t\nz", "$100,000.50!!\n"}
	for i := 0; i < 20000; i++ {
		inputs = append(inputs, randomSplitterInput(r))
	}
	for _, c := range splitterCases {
		re := regexp2.MustCompile(c.pattern, regexp2.None)
		bad := 0
		for _, s := range inputs {
			got, want := splitterSpans(c.split, s), regexSpans(t, re, s)
			if !equalSpans(got, want) {
				if bad++; bad <= 5 {
					t.Errorf("%s %q:\n got %v\nwant %v", c.name, s, got, want)
				}
			}
		}
	}
}

func FuzzSplitters(f *testing.F) {
	for _, s := range []string{"Hello world", "I'm   fine\n\n  ok", "x  \n y", "$100,000.50!!\r\n", "’s 'S 'll"} {
		f.Add(s)
	}
	res := make([]*regexp2.Regexp, len(splitterCases))
	for i, c := range splitterCases {
		res[i] = regexp2.MustCompile(c.pattern, regexp2.None)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, c := range splitterCases {
			got := splitterSpans(c.split, s)
			// Spans must tile the input, valid UTF-8 or not.
			prev := 0
			for _, sp := range got {
				if sp[0] != prev || sp[1] <= sp[0] {
					t.Fatalf("%s %q: spans do not tile: %v", c.name, s, got)
				}
				prev = sp[1]
			}
			if prev != len(s) {
				t.Fatalf("%s %q: spans end at %d of %d", c.name, s, prev, len(s))
			}
			// ſ (U+017F) case-folds to s in Oniguruma, not in regexp2.
			if !utf8.ValidString(s) || strings.ContainsRune(s, 'ſ') {
				continue
			}
			if want := regexSpans(t, res[i], s); !equalSpans(got, want) {
				t.Fatalf("%s %q:\n got %v\nwant %v", c.name, s, got, want)
			}
		}
	})
}
