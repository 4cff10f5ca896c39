package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile creates path (and its folders) with data.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeHFRepo lays out a repo as huggingface_hub does: blobs, a snapshot of
// relative symlinks, refs/main.
func fakeHFRepo(t *testing.T, cache, id, commit string, files map[string]string) {
	t.Helper()
	repo := filepath.Join(cache, "models--"+strings.ReplaceAll(id, "/", "--"))
	for name, data := range files {
		blob := filepath.Join(repo, "blobs", "etag-"+name)
		writeFile(t, blob, data)
		link := filepath.Join(repo, "snapshots", commit, name)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", "etag-"+name), link); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(repo, "refs", "main"), commit)
}

func runLsJSON(t *testing.T, args ...string) map[string]listedModel {
	t.Helper()
	var out, errb bytes.Buffer
	if code := runMain(append([]string{"ls", "--json"}, args...), nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	rows := map[string]listedModel{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r listedModel
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		rows[r.Source+":"+r.Name] = r
	}
	return rows
}

// TestLs lists a fake HF cache (found through HF_HOME, then HF_HUB_CACHE)
// and a local models folder next to the embedded demo model.
func TestLs(t *testing.T) {
	home := t.TempDir()
	cache := filepath.Join(home, "hub")
	weights := strings.Repeat("x", 1500)
	fakeHFRepo(t, cache, "org/llama-small", "c0ffee", map[string]string{
		"config.json":       `{"model_type":"llama","torch_dtype":"bfloat16"}`,
		"model.safetensors": weights,
	})
	fakeHFRepo(t, cache, "mlx-community/Qwen3-4bit", "abc123", map[string]string{
		"config.json":       `{"model_type":"qwen3","quantization":{"bits":4,"group_size":64}}`,
		"model.safetensors": weights,
	})
	fakeHFRepo(t, cache, "org/tokenizer-only", "d00d", map[string]string{"tokenizer.json": "{}"})
	local := t.TempDir()
	writeFile(t, filepath.Join(local, "mine", "config.json"),
		`{"architectures":["Gemma4ForConditionalGeneration"],"model_type":"gemma4","text_config":{"model_type":"gemma4_text"},"quantization_config":{"quant_method":"fp8","bits":8}}`)
	writeFile(t, filepath.Join(local, "org", "nested", "config.json"), `{"model_type":"qwen3_moe","dtype":"float16"}`)
	writeFile(t, filepath.Join(local, "org", "nested", "model.safetensors"), weights)
	writeFile(t, filepath.Join(local, "broken", "config.json"), `{not json`)
	writeFile(t, filepath.Join(local, "notes", "README.md"), "no config")

	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("HF_HOME", home)
	rows := runLsJSON(t, "--models-dir", local)

	want := map[string][2]string{ // arch, quant
		"embedded:demo":                     {"gemma4_text", "bf16"},
		"embedded:demo-q4":                  {"gemma4_text", "4-bit g64"},
		"hf-cache:org/llama-small":          {"llama", "bf16"},
		"hf-cache:mlx-community/Qwen3-4bit": {"qwen3", "4-bit g64"},
		"local:mine":                        {"gemma4/gemma4_text", "fp8 8-bit"},
		"local:org/nested":                  {"qwen3_moe", "f16"},
	}
	for k, w := range want {
		r, ok := rows[k]
		if !ok {
			t.Errorf("%s missing from %v", k, rows)
			continue
		}
		if r.Arch != w[0] || r.Quant != w[1] || r.Error != "" {
			t.Errorf("%s: arch %q quant %q err %q, want %q %q", k, r.Arch, r.Quant, r.Error, w[0], w[1])
		}
	}
	if r := rows["hf-cache:org/llama-small"]; r.Size != int64(1500+len(`{"model_type":"llama","torch_dtype":"bfloat16"}`)) ||
		r.Path != filepath.Join(cache, "models--org--llama-small", "snapshots", "c0ffee") {
		t.Errorf("llama-small: size %d path %s", r.Size, r.Path)
	}
	if r := rows["embedded:demo"]; r.Size < 5e6 || r.Size > 15e6 {
		t.Errorf("demo size %d", r.Size)
	}
	if r := rows["local:broken"]; r.Error == "" {
		t.Errorf("broken config listed without an error: %+v", r)
	}
	for _, k := range []string{"hf-cache:org/tokenizer-only", "local:notes"} {
		if _, ok := rows[k]; ok {
			t.Errorf("%s listed but has no config.json", k)
		}
	}
	if len(rows) != len(want)+1 {
		t.Errorf("%d rows: %v", len(rows), rows)
	}

	// HF_HUB_CACHE wins over HF_HOME; MLXGO_MODELS is the default folder.
	other := t.TempDir()
	fakeHFRepo(t, other, "solo/model", "1", map[string]string{"config.json": `{"model_type":"llama"}`})
	t.Setenv("HF_HUB_CACHE", other)
	t.Setenv(modelsDirEnv, filepath.Join(local, "org"))
	rows = runLsJSON(t)
	if _, ok := rows["hf-cache:solo/model"]; !ok || len(rows) != 4 {
		t.Errorf("with HF_HUB_CACHE and %s: %v", modelsDirEnv, rows)
	}
	if _, ok := rows["local:nested"]; !ok {
		t.Errorf("local folder from %s not listed: %v", modelsDirEnv, rows)
	}

	// the table form names every model
	var out, errb bytes.Buffer
	if code := runMain([]string{"ls"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, s := range []string{"NAME", "demo-q4", "solo/model", "nested", "(embedded in mlxgo)", "MB"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
	if code := runMain([]string{"ls", "extra"}, nil, &out, &errb); code != 2 {
		t.Errorf("ls with an argument: exit %d, want 2", code)
	}
}
