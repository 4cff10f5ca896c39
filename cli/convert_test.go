package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertGPTQ runs `convert --q-method gptq` both ways: calibrated on
// text the model samples itself (the Llama 3 fixture has no tokenizer: it
// starts from config.json's BOS id) and on a text file (the demo model,
// through its tokenizer); both checkpoints carry mlx-lm's quantization
// section and generate.
func TestConvertGPTQ(t *testing.T) {
	demoDir := filepath.Join(t.TempDir(), "demo")
	if code, _, errs := run(t, "convert", "--hf-path", "../model/demo/bf16", "--mlx-path", demoDir); code != 0 {
		t.Fatalf("copy demo: exit %d: %s", code, errs)
	}
	text := filepath.Join(t.TempDir(), "calib.txt")
	prose := strings.Repeat("It was the best of times, it was the worst of times; the whale swam on. ", 40)
	if err := os.WriteFile(text, []byte(prose), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		src  string
		args []string
		want string // on stderr
	}{
		{"self-sampled", "../model/testdata/llama3/f32", nil, "sampling 3 calibration sequences"},
		{"text file", demoDir, []string{"--calib-file", text}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := t.TempDir()
			args := append([]string{"convert", "--hf-path", c.src, "--mlx-path", dst, "-q", "--q-method", "gptq",
				"--calib-samples", "3", "--calib-seq-len", "24"}, c.args...)
			code, _, errs := run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if !strings.Contains(errs, c.want) {
				t.Errorf("stderr %q lacks %q", errs, c.want)
			}
			raw, err := os.ReadFile(filepath.Join(dst, "config.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				Q struct {
					Bits  int `json:"bits"`
					Group int `json:"group_size"`
				} `json:"quantization"`
			}
			if err := json.Unmarshal(raw, &cfg); err != nil || cfg.Q.Bits != 4 || cfg.Q.Group != 64 {
				t.Fatalf("quantization %+v (%v)", cfg.Q, err)
			}
			if code, out, errs := run(t, "generate", "--model", dst, "--prompt-ids", "2,5,6,7", "--max-tokens", "4", "--json", "--ignore-eos"); code != 0 || !strings.Contains(out, `"ids":[`) {
				t.Fatalf("generate on converted: exit %d: %s %s", code, out, errs)
			}
		})
	}
}

// TestConvertGPTQBadInput: bad flags are usage errors (exit 2), bad
// calibration input is a named error (exit 1), nothing is written.
func TestConvertGPTQBadInput(t *testing.T) {
	src := "../model/testdata/llama3/f32"
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"text\": \"fine\"}\n{\"txt\": 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--q-method", "gptq"}, 2, "needs -q"},
		{[]string{"-q", "--q-method", "awq"}, 2, "rtn or gptq"},
		{[]string{"-q", "--q-method", "gptq", "--calib-samples", "0"}, 2, "--calib-samples"},
		{[]string{"-q", "--q-method", "gptq", "--calib-file", filepath.Join(dir, "missing.txt")}, 1, "tokenizer"},
		{[]string{"-q", "--q-method", "gptq", "--calib-file", bad}, 1, "tokenizer"},
	} {
		dst := filepath.Join(dir, "out")
		code, _, errs := run(t, append([]string{"convert", "--hf-path", src, "--mlx-path", dst}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q (want %d, %q)", c.args, code, errs, c.code, c.want)
		}
		if _, err := os.Stat(dst); err == nil {
			t.Errorf("%v: wrote %s", c.args, dst)
		}
	}
	// with a tokenizer, file problems are named
	demoDir := filepath.Join(dir, "demo")
	if code, _, errs := run(t, "convert", "--hf-path", "../model/demo/bf16", "--mlx-path", demoDir); code != 0 {
		t.Fatalf("copy demo: exit %d: %s", code, errs)
	}
	short := filepath.Join(dir, "short.txt")
	if err := os.WriteFile(short, []byte("Too short."), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, want string }{
		{filepath.Join(dir, "missing.txt"), "no such file"},
		{bad, "bad.jsonl:2"},
		{short, "fewer than one"},
	} {
		dst := filepath.Join(dir, "out2")
		code, _, errs := run(t, "convert", "--hf-path", demoDir, "--mlx-path", dst, "-q", "--q-method", "gptq", "--calib-file", c.file, "--calib-seq-len", "64")
		if code != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("--calib-file %s: exit %d, stderr %q (want 1, %q)", c.file, code, errs, c.want)
		}
		if _, err := os.Stat(dst); err == nil {
			t.Errorf("--calib-file %s: wrote %s", c.file, dst)
		}
	}
}

// TestConvertDequantize round-trips the demo model: -q, then -d back to
// float32; the result loads as a float model and generates, and -d on a
// float checkpoint or together with -q is refused.
func TestConvertDequantize(t *testing.T) {
	dir := t.TempDir()
	q, d := filepath.Join(dir, "q"), filepath.Join(dir, "d")
	if code, _, errs := run(t, "convert", "--hf-path", "../model/demo/bf16", "--mlx-path", q, "-q"); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, errs)
	}
	if code, _, errs := run(t, "convert", "--hf-path", q, "--mlx-path", d, "-d", "--dtype", "float32"); code != 0 {
		t.Fatalf("dequantize: exit %d: %s", code, errs)
	}
	raw, err := os.ReadFile(filepath.Join(d, "config.json"))
	if err != nil || strings.Contains(string(raw), "quantization") {
		t.Fatalf("config.json still quantized (%v)", err)
	}
	if code, out, errs := run(t, "generate", "--model", d, "--prompt-ids", "2,5,6,7", "--max-tokens", "4", "--json", "--ignore-eos"); code != 0 || !strings.Contains(out, `"ids":[`) {
		t.Fatalf("generate on dequantized: exit %d: %s %s", code, out, errs)
	}
	if code, _, _ := run(t, "convert", "--hf-path", "../model/demo/bf16", "--mlx-path", filepath.Join(dir, "x"), "-d"); code != 1 {
		t.Errorf("-d on a float checkpoint: exit %d, want 1", code)
	}
	if code, _, _ := run(t, "convert", "--hf-path", q, "--mlx-path", filepath.Join(dir, "y"), "-d", "-q"); code != 2 {
		t.Errorf("-d with -q: exit %d, want 2", code)
	}
}
