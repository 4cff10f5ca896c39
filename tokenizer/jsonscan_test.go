package tokenizer

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
)

// FuzzJSONScan checks the fast vocab/merges scanner against encoding/json.
func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{
		`{"a": 0, "\u0120b": 1, "\ud83d\ude00": 2, "\ud800x": 3, "q\"\\\/\b\f\n\r\t": 4}`,
		`{}`, `{"a":1,}`, `{"a": 1.5}`, `{"a": -1}`,
		`["a b", "#version: 0.2", "\u0120 x"]`, `[["a", "b"], ["\u00e9", " "]]`, `["a b c"]`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := fastVocab(b); err == nil {
			var want map[string]int
			if json.Unmarshal(b, &want) == nil && !maps.Equal(got, want) {
				t.Fatalf("vocab %q: %v != %v", b, got, want)
			}
		}
		if got, err := fastMerges(b); err == nil {
			var strs []string
			var pairs [][]string
			switch {
			case json.Unmarshal(b, &strs) == nil:
				var want [][2]string
				for _, s := range strs {
					if len(s) >= 8 && s[:8] == "#version" {
						continue
					}
					for k := 0; k < len(s); k++ {
						if s[k] == ' ' {
							want = append(want, [2]string{s[:k], s[k+1:]})
							break
						}
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("merges %q: %v != %v", b, got, want)
				}
			case json.Unmarshal(b, &pairs) == nil:
				for i, p := range pairs {
					if len(p) == 2 && got[i] != [2]string{p[0], p[1]} {
						t.Fatalf("merges %q: %v != %v", b, got, pairs)
					}
				}
			}
		}
		rawFields(b)
	})
}
