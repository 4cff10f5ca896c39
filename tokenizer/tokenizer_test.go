package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyBPE is a small byte-level BPE tokenizer.json for unit tests.
const tinyBPE = `{
  "added_tokens": [{"id": 7, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "post_processor": {"type": "ByteLevel"},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "Ġ": 2, "hi": 3, "Ġhi": 4, "!": 5, "x": 6},
            "merges": [["h", "i"], ["Ġ", "hi"]]}
}`

func TestTinyBPE(t *testing.T) {
	tk, err := New([]byte(tinyBPE))
	if err != nil {
		t.Fatal(err)
	}
	ids := tk.Encode("hi hi!<s>", true)
	if want := []int{3, 4, 5, 7}; !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if got := tk.Decode(ids, false); got != "hi hi!<s>" {
		t.Fatalf("decode %q", got)
	}
	if got := tk.Decode(ids, true); got != "hi hi!" {
		t.Fatalf("decode skipping special %q", got)
	}
	if tk.VocabSize() != 8 || !tk.IsSpecial(7) || tk.IsSpecial(3) {
		t.Fatalf("vocab size %d, special %v", tk.VocabSize(), tk.IsSpecial(7))
	}
	if id, ok := tk.ID("Ġhi"); !ok || id != 4 {
		t.Fatalf("ID(Ġhi) = %d, %v", id, ok)
	}
}

func TestWordPiece(t *testing.T) {
	tk, err := New([]byte(`{
	  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "StripAccents"}, {"type": "Lowercase"}]},
	  "pre_tokenizer": {"type": "BertPreTokenizer"},
	  "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 1], "cls": ["[CLS]", 2]},
	  "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
	  "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
	            "vocab": {"[UNK]": 0, "[SEP]": 1, "[CLS]": 2, "un": 3, "##aff": 4, "##able": 5, "cafe": 6, ".": 7}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	ids := tk.Encode("Unaffable CAFÉ. xyz", true)
	if want := []int{2, 3, 4, 5, 6, 7, 0, 1}; !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if got := tk.Decode(ids[1:len(ids)-1], false); got != "unaffable cafe. [UNK]" {
		t.Fatalf("decode %q", got)
	}
}

func TestMalformedNamesField(t *testing.T) {
	cases := []struct{ json, want string }{
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b c"]}}`, "model.merges[0]"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "z"]]}}`, `model.merges[0]: token "z" is not in the vocab`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}}`, "model.unk_token"},
		{`{"model": {"type": "BPE", "vocab": [1, 2], "merges": []}}`, "model.vocab"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}}}`, "model.merges: missing"},
		{`{}`, "model: missing"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"}]}}`, "pre_tokenizer.pretokenizers[0].pattern"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Split", "pattern": {"String": "a"}, "behavior": "Sideways"}}`, "pre_tokenizer.behavior"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "decoder": {"type": "Sequence", "decoders": [{"type": "Strip", "start": 1}]}}`, "decoder.decoders[0].content"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "added_tokens": [{"id": "x", "content": "a"}]}`, "added_tokens[0]"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}], "special_tokens": {}}}`, "post_processor.single[0]"},
		{`not json`, "tokenizer.json: invalid character"},
	}
	for _, c := range cases {
		_, err := New([]byte(c.json))
		var fe *FieldError
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &fe) {
			t.Errorf("%s:\n err %v\nwant a FieldError containing %q", c.json, err, c.want)
		}
	}
}

func TestUnsupportedListsSupported(t *testing.T) {
	for _, c := range []struct{ json, kind string }{
		{`{"model": {"type": "Unigram", "vocab": []}}`, "model"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "normalizer": {"type": "BertNormalizer"}}`, "normalizer"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "UnicodeScripts"}}`, "pre_tokenizer"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "decoder": {"type": "CTC"}}`, "decoder"},
		{`{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "post_processor": {"type": "Magic"}}`, "post_processor"},
	} {
		_, err := New([]byte(c.json))
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Kind != c.kind || len(ue.Supported) == 0 || !strings.Contains(err.Error(), "supported: ") {
			t.Errorf("%s: err %v", c.json, err)
		}
	}
}

func TestInvalidUTF8EncodesBytes(t *testing.T) {
	tk, err := New([]byte(tinyBPE))
	if err != nil {
		t.Fatal(err)
	}
	// "\xff" is not in this tiny vocab: no ids, no panic.
	_ = tk.Encode("h\xffi\xe2\x82", true)
	for _, name := range realNames {
		tk := realTokenizer(t, name)
		s := "ok \xff\xfe \xe2\x82 end"
		ids := tk.Encode(s, false)
		if len(ids) == 0 {
			t.Fatalf("%s: no ids", name)
		}
		if name == "llama3" {
			// Byte-level: the raw bytes survive; decode replaces them like Rust's from_utf8_lossy.
			if got := tk.Decode(ids, false); got != "ok \ufffd\ufffd \ufffd end" {
				t.Errorf("%s: decode %q", name, got)
			}
		}
	}
}

func TestLossyUTF8(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"}, {"a\xffb", "a\ufffdb"}, {"\xe2\x82", "\ufffd"}, {"\xe2\x82A", "\ufffdA"},
		{"\xf0\x9f\x98", "\ufffd"}, {"\xed\xa0\x80", "\ufffd\ufffd\ufffd"}, {"\xc0\xaf", "\ufffd\ufffd"}, {"\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
	} {
		if got := lossyUTF8([]byte(c.in)); got != c.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", tinyBPE)
	write("tokenizer_config.json", `{"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "!", "add_bos_token": true,
	  "chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "B"}]}`)
	write("generation_config.json", `{"eos_token_id": [5, 6]}`)
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	// No TemplateProcessing post-processor: add_bos_token adds BOS.
	if ids := tk.Encode("hi", true); !slices.Equal(ids, []int{7, 3}) {
		t.Errorf("with add_bos_token: %v", ids)
	}
	if ids := tk.Encode("hi", false); !slices.Equal(ids, []int{3}) {
		t.Errorf("without special: %v", ids)
	}
	if tk.Config.BOSTokenID != 7 || !slices.Equal(tk.Config.EOSTokenIDs, []int{5, 6}) {
		t.Errorf("bos %d eos %v", tk.Config.BOSTokenID, tk.Config.EOSTokenIDs)
	}
	ct, err := tk.ChatTemplate("tool_use")
	if err != nil || ct.Source() != "B" {
		t.Fatalf("named template: %v", err)
	}
	write("chat_template.jinja", "{{ bos_token }}{{ messages[0].content }}")
	tk, err = Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ct, err = tk.ChatTemplate("")
	if err != nil {
		t.Fatal(err)
	}
	out, err := ct.Render(ChatRequest{Messages: []map[string]any{{"role": "user", "content": "yo"}}})
	if err != nil || out != "<s>yo" {
		t.Fatalf("chat_template.jinja: %q, %v", out, err)
	}
	write("tokenizer_config.json", `{"bos_token": 3}`)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json: bos_token") {
		t.Fatalf("bad bos_token: %v", err)
	}
}

// TestConcurrentEncode shares one tokenizer between goroutines (run with -race).
func TestConcurrentEncode(t *testing.T) {
	tk := realTokenizer(t, "qwen3")
	texts := []string{"Hello world", "日本語のテキスト", "func main() {}", "  spaced  out  ", "I'm here"}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tk.Encode(s, true)
	}
	done := make(chan bool)
	for g := 0; g < 4; g++ {
		go func() {
			for k := 0; k < 200; k++ {
				i := k % len(texts)
				if got := tk.Encode(texts[i], true); !slices.Equal(got, want[i]) {
					t.Errorf("%q: %v != %v", texts[i], got, want[i])
				}
			}
			done <- true
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}
