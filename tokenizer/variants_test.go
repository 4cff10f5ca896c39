package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A variant patches a real tokenizer.json with other components
// (tools/oracle/variants.json); golden_variants.json.gz holds HF's ids and
// decodes of every third corpus string for each.
type variantSpec struct {
	Name      string                     `json:"name"`
	Base      string                     `json:"base"`
	Set       map[string]json.RawMessage `json:"set"`
	Model     map[string]json.RawMessage `json:"model"`
	AddTokens []json.RawMessage          `json:"add_tokens"`
}

func buildVariant(t *testing.T, v variantSpec) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(realTokenizerDir(t, v.Base), "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	for k, val := range v.Set {
		top[k] = val
	}
	if len(v.Model) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(top["model"], &m); err != nil {
			t.Fatal(err)
		}
		for k, val := range v.Model {
			m[k] = val
		}
		top["model"], _ = json.Marshal(m)
	}
	var added []json.RawMessage
	if err := json.Unmarshal(top["added_tokens"], &added); err != nil {
		t.Fatal(err)
	}
	top["added_tokens"], _ = json.Marshal(append(added, v.AddTokens...))
	patched, _ := json.Marshal(top)
	tk, err := New(patched)
	if err != nil {
		t.Fatalf("%s: %v", v.Name, err)
	}
	return tk
}

func TestGoldenVariants(t *testing.T) {
	path := filepath.Join("testdata", "golden_variants.json.gz")
	if _, err := os.Stat(path); err != nil {
		t.Skip("no golden_variants.json.gz")
	}
	var specs []variantSpec
	data, err := os.ReadFile(filepath.Join(repoRoot(), "tools", "oracle", "variants.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &specs); err != nil {
		t.Fatal(err)
	}
	var corpus []struct {
		Text string `json:"text"`
	}
	readGzJSON(t, filepath.Join("testdata", "corpus.json.gz"), &corpus)
	var g struct {
		Variants []struct {
			Name   string `json:"name"`
			Error  string `json:"error"`
			Encode []struct {
				I          int    `json:"i"`
				IDs        []int  `json:"ids"`
				IDsPlain   []int  `json:"ids_plain"`
				Decode     string `json:"decode"`
				DecodeSkip string `json:"decode_skip"`
				Error      string `json:"error"`
			} `json:"encode"`
		} `json:"variants"`
	}
	readGzJSON(t, path, &g)
	for i, v := range g.Variants {
		spec := specs[i]
		if spec.Name != v.Name {
			t.Fatalf("variant %d is %q in variants.json, %q in the goldens", i, spec.Name, v.Name)
		}
		t.Run(v.Name, func(t *testing.T) {
			if v.Error != "" {
				t.Skipf("HF could not load it: %s", v.Error)
			}
			tk := buildVariant(t, spec)
			bad, n := 0, 0
			for _, e := range v.Encode {
				if e.Error != "" {
					continue
				}
				n++
				text := corpus[e.I].Text
				ok := true
				if got := tk.Encode(text, true); !slices.Equal(got, e.IDs) {
					ok = false
					if bad < 5 {
						t.Errorf("#%d %q:\n got %v\nwant %v", e.I, truncate(text, 80), truncIDs(got), truncIDs(e.IDs))
					}
				} else if got := tk.Encode(text, false); !slices.Equal(got, e.IDsPlain) {
					ok = false
					if bad < 5 {
						t.Errorf("#%d no special %q:\n got %v\nwant %v", e.I, truncate(text, 80), truncIDs(got), truncIDs(e.IDsPlain))
					}
				} else if got := tk.Decode(e.IDs, false); got != e.Decode {
					ok = false
					if bad < 5 {
						t.Errorf("#%d decode %q:\n got %q\nwant %q", e.I, truncate(text, 60), truncate(got, 80), truncate(e.Decode, 80))
					}
				} else if got := tk.Decode(e.IDs, true); got != e.DecodeSkip {
					ok = false
					if bad < 5 {
						t.Errorf("#%d decode skip %q:\n got %q\nwant %q", e.I, truncate(text, 60), truncate(got, 80), truncate(e.DecodeSkip, 80))
					}
				}
				if !ok {
					bad++
				}
			}
			t.Logf("%s: %d/%d strings identical (ids with and without special tokens, decodes)", v.Name, n-bad, n)
		})
	}
}

// TestGoldenTemplates renders the extra templates of tools/oracle/templates
// (with Llama 3's special tokens) and compares with apply_chat_template.
func TestGoldenTemplates(t *testing.T) {
	path := filepath.Join("testdata", "golden_templates.json.gz")
	if _, err := os.Stat(path); err != nil {
		t.Skip("no golden_templates.json.gz")
	}
	var g struct {
		Chat []struct {
			goldenChat
			Template string `json:"template"`
		} `json:"chat"`
	}
	readGzJSON(t, path, &g)
	tk := realTokenizer(t, "llama3")
	compiled := map[string]*ChatTemplate{}
	ok := 0
	for _, c := range g.Chat {
		ct := compiled[c.Template]
		if ct == nil {
			src, err := os.ReadFile(filepath.Join(repoRoot(), "tools", "oracle", "templates", c.Template))
			if err != nil {
				t.Fatal(err)
			}
			if ct, err = CompileChatTemplate(string(src), tk.Config.SpecialTokens, tk.Config.AdditionalSpecialTokens); err != nil {
				t.Fatalf("%s: %v", c.Template, err)
			}
			compiled[c.Template] = ct
		}
		if checkChat(t, ct, c.Template+" "+c.Name, c.goldenChat) {
			ok++
		}
	}
	t.Logf("%d/%d renders identical", ok, len(g.Chat))
}
