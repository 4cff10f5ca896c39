package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// chatModelDir makes a model folder from the Llama 3 fixture plus a tiny
// word-level tokenizer (ids < 256) with a chat template.
func chatModelDir(t *testing.T) string {
	t.Helper()
	fx, _ := filepath.Abs("../model/testdata/llama3/f32")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		if err := os.Symlink(filepath.Join(fx, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	words := []string{"<unk>", "<|user|>", "<|assistant|>", "hello", "world", "the", "a", "cat", "sat"}
	vocab := map[string]int{}
	for i, w := range words {
		vocab[w] = i
	}
	for i := len(words); i < 256; i++ {
		vocab[fmt.Sprintf("w%d", i)] = i
	}
	tk := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": 1, "content": "<|user|>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
			{"id": 2, "content": "<|assistant|>", "special": true, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false},
		},
		"pre_tokenizer": map[string]any{"type": "WhitespaceSplit"},
		"model":         map[string]any{"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
	}
	raw, _ := json.Marshal(tk)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"chat_template": "{% for m in messages %}<|{{ m.role }}|> {{ m.content }} {% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type genJSON struct {
	IDs   []int  `json:"ids"`
	Text  string `json:"text"`
	Stats struct {
		PromptTokens    int    `json:"prompt_tokens"`
		GeneratedTokens int    `json:"generated_tokens"`
		StopReason      string `json:"stop_reason"`
	} `json:"stats"`
	Logprobs []struct {
		ID  int              `json:"id"`
		Top []map[string]any `json:"top"`
	} `json:"logprobs"`
}

// TestGenerateChatTemplate checks --prompt with and without the chat
// template, the JSON result (ids, text, stats, logprobs), streaming with
// stats on stderr, and the sampler, KV and backend flags.
func TestGenerateChatTemplate(t *testing.T) {
	dir := chatModelDir(t)
	gen := func(args ...string) genJSON {
		t.Helper()
		code, out, errs := run(t, append([]string{"generate", "--model", dir, "--backend", "cpu", "--ignore-eos", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		var r genJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		return r
	}
	chat := gen("--prompt", "hello world", "--max-tokens", "5", "--logprobs", "2")
	raw := gen("--prompt", "hello world", "--max-tokens", "5", "--raw")
	// <|user|> hello world <|assistant|>  versus  hello world
	if chat.Stats.PromptTokens != 4 || raw.Stats.PromptTokens != 2 {
		t.Errorf("prompt tokens: chat %d, raw %d; want 4 and 2", chat.Stats.PromptTokens, raw.Stats.PromptTokens)
	}
	if len(chat.IDs) != 5 || chat.Stats.GeneratedTokens != 5 || chat.Stats.StopReason != "length" {
		t.Errorf("chat result %+v", chat)
	}
	if len(strings.Fields(chat.Text)) != 5 {
		t.Errorf("text %q for ids %v", chat.Text, chat.IDs)
	}
	if len(chat.Logprobs) != 5 || len(chat.Logprobs[0].Top) != 2 || chat.Logprobs[0].ID != chat.IDs[0] {
		t.Errorf("logprobs %+v", chat.Logprobs)
	}
	// Same result from the ids, any chunk size, KV flags (fixture head dim
	// 16: group 16 is not supported, so bits stay off), seeded sampling.
	ids := gen("--prompt-ids", "1,3,4,2", "--max-tokens", "5", "--prefill-chunk-size", "1")
	if fmt.Sprint(ids.IDs) != fmt.Sprint(chat.IDs) {
		t.Errorf("--prompt-ids %v vs --prompt %v", ids.IDs, chat.IDs)
	}
	s1 := gen("--prompt-ids", "1,3,4,2", "--max-tokens", "8", "--temp", "1", "--top-k", "20", "--top-p", "0.9", "--min-p", "0.01", "--seed", "5", "--repetition-penalty", "1.2")
	s2 := gen("--prompt-ids", "1,3,4,2", "--max-tokens", "8", "--temp", "1", "--top-k", "20", "--top-p", "0.9", "--min-p", "0.01", "--seed", "5", "--repetition-penalty", "1.2")
	if fmt.Sprint(s1.IDs) != fmt.Sprint(s2.IDs) || len(s1.IDs) != 8 {
		t.Errorf("seeded runs differ: %v vs %v", s1.IDs, s2.IDs)
	}
	// Streaming: text on stdout, stats on stderr.
	code, out, errs := run(t, "generate", "--model", dir, "--backend", "cpu", "--ignore-eos", "--prompt", "hello world", "--max-tokens", "5")
	if code != 0 || strings.TrimSpace(out) != chat.Text || !strings.Contains(errs, "Generation: 5 tokens") {
		t.Errorf("streaming: exit %d, stdout %q (want %q), stderr %q", code, out, chat.Text, errs)
	}
	// --stop cuts the text before the stop string.
	if words := strings.Fields(chat.Text); len(words) >= 3 {
		stop := words[2]
		r := gen("--prompt", "hello world", "--max-tokens", "5", "--stop", stop)
		if strings.Contains(r.Text, stop) || !strings.HasPrefix(chat.Text, r.Text) {
			t.Errorf("--stop %q: text %q (full %q)", stop, r.Text, chat.Text)
		}
	}
	for _, bad := range [][]string{{"--backend", "tpu"}, {"--kv-bits", "7"}, {"--top-p", "1.5"}} {
		if code, _, _ := run(t, append([]string{"generate", "--model", dir, "--prompt-ids", "1,2"}, bad...)...); code == 0 {
			t.Errorf("%v accepted", bad)
		}
	}
	// --kv-config: below --quantized-kv-start it changes nothing; from
	// token 0 on, a group size the head dim (16) cannot hold is a named
	// error (exit 1), and a malformed file a usage error (exit 2).
	kvdir := t.TempDir()
	kvcfg, kvbad := filepath.Join(kvdir, "kv_config.json"), filepath.Join(kvdir, "bad.json")
	os.WriteFile(kvcfg, []byte(`[{"layer_idx": 0, "bits": 8, "group_size": 32}]`), 0o644)
	os.WriteFile(kvbad, []byte(`nonsense`), 0o644)
	kvRun := func(extra ...string) (int, string, string) {
		return run(t, append([]string{"generate", "--model", dir, "--backend", "cpu", "--prompt-ids", "1,2", "--max-tokens", "2", "--json"}, extra...)...)
	}
	if code, out, errs := kvRun("--kv-config", kvcfg); code != 0 || !strings.Contains(out, `"ids":[`) {
		t.Errorf("--kv-config before the quantized start: exit %d: %s %s", code, out, errs)
	}
	if code, _, errs := kvRun("--kv-config", kvcfg, "--quantized-kv-start", "0"); code != 1 || !strings.Contains(errs, "not multiples of group size 32") {
		t.Errorf("--kv-config group 32 on head dim 16: exit %d (want 1): %s", code, errs)
	}
	if code, _, errs := kvRun("--kv-config", kvbad); code != 2 || !strings.Contains(errs, "--kv-config") {
		t.Errorf("malformed --kv-config: exit %d (want 2): %s", code, errs)
	}
}

// With no --model, generate runs the embedded demo model on a positional
// prompt and prints English-looking text: the README's main command.
func TestGenerateDefaultsToDemoModel(t *testing.T) {
	code, out, errOut := run(t, "generate", "Call me Ishmael. Some years ago", "--raw", "--max-tokens", "24", "--backend", "cpu")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(errOut, "built-in demo model") {
		t.Errorf("stderr does not say the demo model is used: %q", errOut)
	}
	words := strings.Fields(out)
	letters := 0
	for _, r := range out {
		if unicode.IsLetter(r) {
			letters++
		}
	}
	if len(words) < 5 || letters < len(out)/2 {
		t.Fatalf("demo output does not look like text: %q", out)
	}
}
