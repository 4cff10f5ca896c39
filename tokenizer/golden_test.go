package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type goldenFile struct {
	Meta   map[string]any `json:"meta"`
	Encode []struct {
		Text       string `json:"text"`
		IDs        []int  `json:"ids"`
		IDsPlain   []int  `json:"ids_plain"`
		Decode     string `json:"decode"`
		DecodeSkip string `json:"decode_skip"`
		TFIDs      []int  `json:"tf_ids"`
		TFDecode   string `json:"tf_decode"`
	} `json:"encode"`
	Chat []goldenChat `json:"chat"`
}

type goldenChat struct {
	Name                string          `json:"name"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	Documents           json.RawMessage `json:"documents"`
	AddGenerationPrompt bool            `json:"add_generation_prompt"`
	Kwargs              json.RawMessage `json:"kwargs"`
	Output              *string         `json:"output"`
	Error               string          `json:"error"`
	ErrorType           string          `json:"error_type"`
}

// readGzJSON decodes the gzipped JSON file at path into v.
func readGzJSON(t testing.TB, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.NewDecoder(zr).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func readGolden(t testing.TB, name string) *goldenFile {
	t.Helper()
	var g goldenFile
	readGzJSON(t, filepath.Join("testdata", "golden_"+name+".json.gz"), &g)
	return &g
}

// TestGoldenEncode compares ids and decoded text with HF tokenizers on the
// whole corpus, with and without special tokens, and with transformers'
// AutoTokenizer (which adds BOS/EOS from tokenizer_config.json).
func TestGoldenEncode(t *testing.T) {
	for _, name := range realNames {
		t.Run(name, func(t *testing.T) {
			tk := realTokenizer(t, name)
			g := readGolden(t, name)
			var bad, badPlain, badDec, badSkip, badTF, badTFDec int
			for i, e := range g.Encode {
				got := tk.Encode(e.Text, true)
				if !slices.Equal(got, e.IDs) {
					if bad++; bad <= 5 {
						t.Errorf("#%d %q:\n got %v\nwant %v", i, truncate(e.Text, 80), truncIDs(got), truncIDs(e.IDs))
					}
				}
				if got := tk.Encode(e.Text, false); !slices.Equal(got, e.IDsPlain) {
					if badPlain++; badPlain <= 3 {
						t.Errorf("#%d no special %q:\n got %v\nwant %v", i, truncate(e.Text, 80), truncIDs(got), truncIDs(e.IDsPlain))
					}
				}
				if got := tk.Decode(e.IDs, false); got != e.Decode {
					if badDec++; badDec <= 3 {
						t.Errorf("#%d decode:\n got %q\nwant %q", i, truncate(got, 80), truncate(e.Decode, 80))
					}
				}
				if got := tk.Decode(e.IDs, true); got != e.DecodeSkip {
					if badSkip++; badSkip <= 3 {
						t.Errorf("#%d decode skip special:\n got %q\nwant %q", i, truncate(got, 80), truncate(e.DecodeSkip, 80))
					}
				}
				if e.TFIDs != nil && !slices.Equal(got, e.TFIDs) {
					if badTF++; badTF <= 3 {
						t.Errorf("#%d transformers %q:\n got %v\nwant %v", i, truncate(e.Text, 80), truncIDs(got), truncIDs(e.TFIDs))
					}
				}
				if e.TFIDs != nil {
					if got := tk.Decode(e.TFIDs, false); got != e.TFDecode {
						if badTFDec++; badTFDec <= 3 {
							t.Errorf("#%d transformers decode:\n got %q\nwant %q", i, truncate(got, 80), truncate(e.TFDecode, 80))
						}
					}
				}
			}
			n := len(g.Encode)
			t.Logf("%s: %d strings; ids %d/%d, ids without special %d/%d, decode %d/%d, decode skipping special %d/%d, transformers ids %d/%d, transformers decode %d/%d",
				name, n, n-bad, n, n-badPlain, n, n-badDec, n, n-badSkip, n, n-badTF, n, n-badTFDec, n)
		})
	}
}

func truncIDs(ids []int) string {
	if len(ids) > 40 {
		return fmt.Sprint(ids[:40]) + fmt.Sprintf("… (%d)", len(ids))
	}
	return fmt.Sprint(ids)
}
