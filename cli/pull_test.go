package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/cli/internal/hub/hubtest"
)

// TestPullThenChatByName pulls a model (the chat fixture) from a fake hub
// through the verb, as a user would, then chats with it by a substring of
// its repo id; it also checks the verb's errors.
func TestPullThenChatByName(t *testing.T) {
	src := chatFixture(t)
	files := map[string]*hubtest.File{}
	for _, name := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = &hubtest.File{Data: b, LFS: strings.HasSuffix(name, ".safetensors")}
	}
	h := hubtest.New(map[string]*hubtest.Repo{"test-org/Tiny-Llama-Chat": {Files: files, Private: true}})
	defer h.Close()
	h.Token = "hf_test"
	home := t.TempDir()
	t.Setenv("HF_HOME", home)
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_ENDPOINT", h.URL)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", "")
	t.Setenv("MLXGO_MODELS", t.TempDir())

	code, _, errs := run(t, "pull", "test-org/Tiny-Llama-Chat")
	if code != 1 || !strings.Contains(errs, "HF_TOKEN") {
		t.Fatalf("private repo without a token: exit %d, %q", code, errs)
	}
	t.Setenv("HF_TOKEN", "hf_test")
	code, out, errs := run(t, "pull", "test-org/Tiny-Llama-Chat", "--exclude", "*.md")
	if code != 0 {
		t.Fatalf("pull: exit %d: %s", code, errs)
	}
	snap := strings.TrimSpace(out)
	if !strings.HasPrefix(snap, filepath.Join(home, "hub", "models--test-org--Tiny-Llama-Chat", "snapshots")+"/") {
		t.Fatalf("snapshot %q not in $HF_HOME/hub", snap)
	}
	if !strings.Contains(errs, "[4/4]") {
		t.Errorf("progress on stderr: %q", errs)
	}
	if got, err := resolveModel("tiny-llama"); err != nil || got != snap {
		t.Fatalf("resolve: %q %v", got, err)
	}
	code, _, errs, turns := runChatTurns(t, "hello\n", "tiny-llama", "--backend", "cpu", "--max-tokens", "4")
	if code != 0 || len(turns) != 1 || turns[0].st.GeneratedTokens == 0 {
		t.Fatalf("chat on the pulled model: exit %d, %d turns, %s", code, len(turns), errs)
	}

	if code, _, errs := run(t, "pull", "test-org/nope"); code != 1 || !strings.Contains(errs, "not found") {
		t.Errorf("missing repo: exit %d, %q", code, errs)
	}
	for _, args := range [][]string{{}, {"a/b", "c/d"}, {"../etc"}} {
		if code, _, _ := run(t, append([]string{"pull"}, args...)...); code != 2 {
			t.Errorf("pull %q: exit %d, want 2", args, code)
		}
	}
}
