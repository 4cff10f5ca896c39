package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCachedRepo makes models--org--name with a snapshot and refs/main.
func fakeCachedRepo(t *testing.T, cache, id, commit string) string {
	t.Helper()
	dir := filepath.Join(cache, "models--"+strings.ReplaceAll(id, "/", "--"))
	snap := filepath.Join(dir, "snapshots", commit)
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestResolveModel(t *testing.T) {
	cache := t.TempDir()
	qwen := fakeCachedRepo(t, cache, "mlx-community/Qwen3-0.6B-4bit", "aaaa")
	qwen8 := fakeCachedRepo(t, cache, "mlx-community/Qwen3-0.6B-8bit", "bbbb")
	gemma := fakeCachedRepo(t, cache, "google/gemma-4-e2b", "cccc")
	// A second, older snapshot of gemma that refs/main does not name.
	os.MkdirAll(filepath.Join(cache, "models--google--gemma-4-e2b", "snapshots", "old"), 0o755)
	local := t.TempDir()
	models := t.TempDir()
	phi := filepath.Join(models, "my-org", "phi-local")
	os.MkdirAll(phi, 0o755)
	os.WriteFile(filepath.Join(phi, "config.json"), []byte(`{"model_type": "phi3"}`), 0o644)
	os.MkdirAll(filepath.Join(models, "qwen-finetune"), 0o755)
	os.WriteFile(filepath.Join(models, "qwen-finetune", "config.json"), []byte(`{}`), 0o644)

	for _, tc := range []struct{ arg, want string }{
		{local, local},
		{"gemma", gemma},
		{"GEMMA-4", gemma},
		{"qwen3-0.6b-4BIT", qwen},
		{"mlx-community/Qwen3-0.6B-8bit", qwen8},
		{"phi", phi},
		{"my-org/PHI-local", phi},
	} {
		got, err := resolveModelIn(tc.arg, cache, models)
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.arg, got, err, tc.want)
		}
	}
	_, err := resolveModelIn("qwen", cache, models)
	if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "Qwen3-0.6B-4bit") || !strings.Contains(err.Error(), "Qwen3-0.6B-8bit") ||
		!strings.Contains(err.Error(), "qwen-finetune (local") {
		t.Errorf("ambiguous: %v", err)
	}
	_, err = resolveModelIn("llama", cache, models)
	if err == nil || !strings.Contains(err.Error(), cache) || !strings.Contains(err.Error(), models) {
		t.Errorf("no match: %v (want the cache folder named)", err)
	}
	if _, err = resolveModelIn("./gemma", cache, models); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing path: %v", err)
	}
	if _, err = resolveModelIn("x", filepath.Join(cache, "nope"), ""); err == nil {
		t.Error("a missing cache matched something")
	}
	f := filepath.Join(local, "config.json")
	os.WriteFile(f, []byte("{}"), 0o644)
	if _, err = resolveModelIn(f, cache, models); err == nil || !strings.Contains(err.Error(), "is a file") {
		t.Errorf("file: %v", err)
	}
	// The environment decides the default folders.
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("MLXGO_MODELS", models)
	if got, err := resolveModel("phi-local"); err != nil || got != phi {
		t.Errorf("resolveModel via MLXGO_MODELS: %q %v", got, err)
	}
	// The demo model is materialised into MLXGO_CACHE_DIR.
	t.Setenv("MLXGO_CACHE_DIR", t.TempDir())
	for _, name := range []string{"demo", "mlxgo-demo", "demo-q4"} {
		got, err := resolveModel(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(got, "config.json")); err != nil || strings.Contains(got, "q4") != strings.HasSuffix(name, "q4") {
			t.Errorf("%s → %s (%v)", name, got, err)
		}
	}
	if got, err := resolveModel("gemma"); err != nil || got != gemma {
		t.Errorf("resolveModel via HF_HUB_CACHE: %q %v", got, err)
	}
	// No model given is the embedded demo model, even where the working
	// directory holds a folder named demo.
	want, err := resolveModel("demo")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	os.Mkdir("demo", 0o755)
	if got, err := resolveModel(""); err != nil || got != want {
		t.Errorf("no model, ./demo present: %q %v; want %q", got, err, want)
	}
}
