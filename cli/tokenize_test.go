package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tinyModel writes a small byte-level BPE tokenizer with a chat template.
func tinyModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"tokenizer.json": `{
  "added_tokens": [{"id": 7, "content": "<s>", "special": true, "normalized": false, "lstrip": false, "rstrip": false, "single_word": false}],
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "Ġ": 2, "hi": 3, "Ġhi": 4, "!": 5, "Ċ": 6}, "merges": [["h", "i"], ["Ġ", "hi"]]}
}`,
		"tokenizer_config.json": `{"bos_token": "<s>", "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}[assistant]{% endif %}{% if enable_thinking is defined and not enable_thinking %}/no_think{% endif %}{% if messages | length > 2 %}{{ raise_exception('too many messages') }}{% endif %}"}`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runStdin(stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := runMain(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestTokenizeVerb(t *testing.T) {
	dir := tinyModel(t)
	for _, c := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"hi hi!", []string{"--model", dir}, "7 3 4 5\n"},
		{"hi hi!", []string{"--model", dir, "--no-special"}, "3 4 5\n"},
		{"hi\n", []string{"--model", dir, "--json"}, "[7,3,6]\n"},
		{"\"hi\"\n\"<s>hi hi\"\n", []string{"--model", dir, "--jsonl", "--no-special"}, "[3]\n[7,3,4]\n"},
	} {
		code, out, errOut := runStdin(c.stdin, append([]string{"tokenize"}, c.args...)...)
		if code != 0 || out != c.want {
			t.Errorf("tokenize %v < %q: code %d, out %q, stderr %q; want %q", c.args, c.stdin, code, out, errOut, c.want)
		}
	}
	if code, _, errOut := runStdin("", "tokenize"); code != 2 || !strings.Contains(errOut, "--model") {
		t.Errorf("missing --model: code %d, %q", code, errOut)
	}
	if code, _, errOut := runStdin("not json\n", "tokenize", "--model", dir, "--jsonl"); code != 1 || !strings.Contains(errOut, "line 1") {
		t.Errorf("bad jsonl: code %d, %q", code, errOut)
	}
	if code, _, errOut := runStdin("", "tokenize", "--model", t.TempDir()); code != 1 || !strings.Contains(errOut, "tokenizer.json") {
		t.Errorf("no tokenizer.json: code %d, %q", code, errOut)
	}
}

func TestTemplateVerb(t *testing.T) {
	dir := tinyModel(t)
	msgs := filepath.Join(t.TempDir(), "m.json")
	os.WriteFile(msgs, []byte(`[{"role": "user", "content": "hi"}]`), 0o644)
	tools := filepath.Join(t.TempDir(), "t.json")
	os.WriteFile(tools, []byte(`[{"type": "function", "function": {"name": "f", "x": 1.0}}]`), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--messages", msgs}, "<s>[user]hi[assistant]"},
		{[]string{"--messages", msgs, "--no-generation-prompt"}, "<s>[user]hi"},
		{[]string{"--messages", msgs, "--kwargs", `{"enable_thinking": false}`}, "<s>[user]hi[assistant]/no_think"},
		{[]string{"--messages", msgs, "--tools", tools, "--no-generation-prompt"}, `<s>[user]hi[{"type": "function", "function": {"name": "f", "x": 1.0}}]`},
	} {
		code, out, errOut := runStdin("", append([]string{"template", "--model", dir}, c.args...)...)
		if code != 0 || out != c.want {
			t.Errorf("template %v: code %d, out %q, stderr %q; want %q", c.args, code, out, errOut, c.want)
		}
	}
	code, out, _ := runStdin(`[{"role": "user", "content": "a"}]`, "template", "--model", dir, "--messages", "-")
	if code != 0 || out != "<s>[user]a[assistant]" {
		t.Errorf("stdin messages: %d %q", code, out)
	}
	code, _, errOut := runStdin(`[{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]`,
		"template", "--model", dir, "--messages", "-")
	if code != 1 || !strings.Contains(errOut, "too many messages") {
		t.Errorf("raise_exception: code %d, %q", code, errOut)
	}
	if code, _, errOut := runStdin(`{"role": "user"}`, "template", "--model", dir, "--messages", "-"); code != 1 || !strings.Contains(errOut, "array") {
		t.Errorf("not an array: code %d, %q", code, errOut)
	}
	if code, _, errOut := runStdin("", "template", "--model", dir, "--messages", msgs, "--kwargs", "[1]"); code != 2 || !strings.Contains(errOut, "--kwargs") {
		t.Errorf("bad kwargs: code %d, %q", code, errOut)
	}
	if code, _, _ := runStdin("", "template", "--model", dir); code != 2 {
		t.Errorf("missing --messages: code %d", code)
	}
}
