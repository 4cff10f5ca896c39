package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// byteLevelTokenizer is a tokenizer.json whose 256 ids are the 256 bytes
// (GPT-2's byte-to-character map, no merges), with id 1 and 2 as the
// special tokens <s> and </s>: it fits the fixtures' vocabulary of 256.
func byteLevelTokenizer(t *testing.T) []byte {
	t.Helper()
	// GPT-2's bytes_to_unicode: printable bytes map to themselves, the
	// others to 256+n in order.
	vocab := map[string]int{}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = b
	}
	added := []map[string]any{}
	for id, s := range map[int]string{1: "<s>", 2: "</s>"} {
		added = append(added, map[string]any{"id": id, "content": s, "special": true,
			"normalized": false, "lstrip": false, "rstrip": false, "single_word": false})
	}
	out, err := json.Marshal(map[string]any{
		"added_tokens":   added,
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
		"post_processor": nil,
		"decoder":        map[string]any{"type": "ByteLevel"},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

const testChatTemplate = `{% for m in messages %}<|{{ m.role }}|>
{{ m.content }}
{% endfor %}{% if add_generation_prompt %}<|assistant|>
{% endif %}`

// chatFixture copies the Llama 3 fixture into a temporary folder and adds
// the byte-level tokenizer and a chat template.
func chatFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := "../model/testdata/llama3/f32"
	for _, name := range []string{"config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := json.Marshal(map[string]any{"bos_token": "<s>", "eos_token": "</s>", "chat_template": testChatTemplate})
	os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644)
	os.WriteFile(filepath.Join(dir, "tokenizer.json"), byteLevelTokenizer(t), 0o644)
	return dir
}

type chatTurn struct {
	prompt, out []int32
	st          generate.Stats
}

func runChatTurns(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string, turns []chatTurn) {
	t.Helper()
	chatTurnHook = func(p, o []int32, st generate.Stats) { turns = append(turns, chatTurn{p, o, st}) }
	defer func() { chatTurnHook = nil }()
	var out, errb bytes.Buffer
	code = runMain(append([]string{"chat"}, args...), strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String(), turns
}

// freshGreedy generates from scratch (no prompt cache) for comparison.
func freshGreedy(t *testing.T, dir string, prompt []int32, n int) []int32 {
	t.Helper()
	be, err := tensor.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, &model.LoadOptions{Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, err := generate.Generate(context.Background(), generate.Wrap(m, m.Info().Vocab), prompt,
		&generate.Options{MaxTokens: n, EOS: []int32{2}, Backend: be})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []int32
	for tk, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tk.ID)
	}
	return out
}

// TestChatKeepsHistoryAndCache runs three turns, a /reset and a fourth
// turn: each turn's prompt is the rendered history, turns 2 and 3 prefill
// only what the previous turn's cache lacks (at least the whole previous
// prompt is cached), the cached replies equal uncached generation, and
// /reset starts over with nothing cached.
func TestChatKeepsHistoryAndCache(t *testing.T) {
	dir := chatFixture(t)
	live := tensor.LiveArrays()
	code, stdout, stderr, turns := runChatTurns(t, "hello there\nand then?\n\n/help\none more\n/reset\nhello there\n",
		"--model", dir, "--backend", "cpu", "--max-tokens", "12", "--system", "be brief", "-v")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(turns) != 4 {
		t.Fatalf("%d turns, want 4; stdout %q", len(turns), stdout)
	}
	if got := tensor.LiveArrays(); got != live {
		t.Errorf("live arrays %d → %d after the session", live, got)
	}
	first := "<|system|>\nbe brief\n<|user|>\nhello there\n<|assistant|>\n"
	if p := toBytes(turns[0].prompt); p != first {
		t.Fatalf("turn 1 prompt %q, want %q", p, first)
	}
	for i := 1; i < 3; i++ {
		prev, cur := turns[i-1], turns[i]
		if !strings.HasPrefix(toBytes(cur.prompt), toBytes(prev.prompt)) {
			t.Fatalf("turn %d prompt %q does not extend turn %d's", i+1, toBytes(cur.prompt), i)
		}
		st := cur.st
		if st.CachedTokens < len(prev.prompt) || st.PrefillTokens != st.PromptTokens-st.CachedTokens || st.PrefillTokens >= st.PromptTokens {
			t.Errorf("turn %d: %d prompt tokens, %d cached, %d prefilled (previous prompt %d tokens)",
				i+1, st.PromptTokens, st.CachedTokens, st.PrefillTokens, len(prev.prompt))
		}
	}
	if !strings.Contains(toBytes(turns[2].prompt), "<|user|>\nand then?\n<|assistant|>\n") {
		t.Errorf("turn 3 prompt lacks turn 2: %q", toBytes(turns[2].prompt))
	}
	if turns[0].st.CachedTokens != 0 || turns[3].st.CachedTokens != 0 {
		t.Errorf("first turn / turn after /reset had cached tokens: %d, %d", turns[0].st.CachedTokens, turns[3].st.CachedTokens)
	}
	if !slices.Equal(turns[3].prompt, turns[0].prompt) || !slices.Equal(turns[3].out, turns[0].out) {
		t.Errorf("after /reset the same message gave %v, first time %v", turns[3].out, turns[0].out)
	}
	for i, tr := range turns[:3] {
		if want := freshGreedy(t, dir, tr.prompt, 12); !slices.Equal(tr.out, want) {
			t.Errorf("turn %d with the prompt cache: %v; from scratch: %v", i+1, tr.out, want)
		}
	}
	if !strings.Contains(stdout, "(conversation reset)") || !strings.Contains(stdout, "/reset forgets") {
		t.Errorf("stdout %q", stdout)
	}
	if strings.Count(stderr, "Prompt: ") != 4 {
		t.Errorf("--verbose stats: %q", stderr)
	}
}

func toBytes(ids []int32) string {
	b := make([]byte, len(ids))
	for i, v := range ids {
		b[i] = byte(v)
	}
	return string(b)
}

// TestChatExitAndErrors: /exit ends the loop before later lines; EOF
// without a newline still answers the last line; bad flags are usage
// errors.
func TestChatExitAndErrors(t *testing.T) {
	dir := chatFixture(t)
	code, _, stderr, turns := runChatTurns(t, "hi\n/exit\nnever\n", dir, "--backend", "cpu", "--max-tokens", "3")
	if code != 0 || len(turns) != 1 {
		t.Fatalf("/exit: code %d, %d turns, %s", code, len(turns), stderr)
	}
	code, _, _, turns = runChatTurns(t, "no newline", dir, "--backend", "cpu", "--max-tokens", "3")
	if code != 0 || len(turns) != 1 || toBytes(turns[0].prompt) != "<|user|>\nno newline\n<|assistant|>\n" {
		t.Fatalf("EOF: code %d, turns %d", code, len(turns))
	}
	for _, args := range [][]string{
		{dir, "--temp", "-1", "--backend", "cpu"},
		{dir, "--max-tokens", "0"},
		{dir, "extra"},
	} {
		if code, _, _, _ := runChatTurns(t, "hi\n", args...); code != 2 {
			t.Errorf("args %q: exit %d, want 2", args, code)
		}
	}
	// No model: the demo model, with its own tokenizer and template.
	t.Setenv("MLXGO_CACHE_DIR", t.TempDir())
	code, stdout, stderr, turns := runChatTurns(t, "Call me\n", "--backend", "cpu", "--max-tokens", "6")
	if code != 0 || len(turns) != 1 || turns[0].st.GeneratedTokens == 0 || !strings.Contains(stderr, "demo model") {
		t.Fatalf("demo chat: exit %d, %d turns, %q", code, len(turns), stderr)
	}
	t.Logf("demo reply: %q", stdout)
	// No tokenizer: a plain error naming it.
	if code, _, stderr, _ := runChatTurns(t, "hi\n", "../model/testdata/llama3/f32"); code != 1 || !strings.Contains(stderr, "tokenizer") {
		t.Errorf("no tokenizer: exit %d, %q", code, stderr)
	}
}
