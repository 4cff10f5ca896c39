package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPerplexity scores text with the demo model: JSONL and plain text
// give the same numbers, an unquantized --ref run diverges by exactly 0,
// TurboQuant k8v3 by a positive KL with fewer KV bytes per token, and
// bad flag combinations are usage errors.
func TestPerplexity(t *testing.T) {
	dir := t.TempDir()
	text := strings.Repeat("Call me Ishmael. The sea was calm, and the Congress of the United States met in December. ", 12)
	plain := filepath.Join(dir, "t.txt")
	os.WriteFile(plain, []byte(text), 0o644)
	js, _ := json.Marshal(map[string]string{"text": text})
	jsonl := filepath.Join(dir, "t.jsonl")
	os.WriteFile(jsonl, append(js, '\n'), 0o644)
	type result struct {
		Perplexity, MeanKL, BytesPerToken float64
		Tokens                            int
	}
	score := func(data string, extra ...string) result {
		t.Helper()
		args := append([]string{"perplexity", "--model", "demo", "--data", data, "--seq-len", "48", "--num-samples", "2",
			"--prefill-chunk-size", "16", "--json", "--ref", "--backend", "cpu"}, extra...)
		code, out, errs := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errs)
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		return result{r["perplexity"].(float64), r["mean_kl"].(float64), r["kv_bytes_per_token"].(float64), int(r["tokens"].(float64))}
	}
	a, b := score(plain), score(jsonl)
	if a != b || a.Tokens != 2*47 || !(a.Perplexity > 1) || a.MeanKL != 0 {
		t.Fatalf("plain text %+v, JSONL %+v", a, b)
	}
	q := score(plain, "--kv-quant", "turbo")
	if !(q.MeanKL > 0 && q.BytesPerToken < a.BytesPerToken/2) {
		t.Fatalf("k8v3 %+v vs bf16 %+v", q, a)
	}
	for _, bad := range [][]string{{"--kv-quant", "turbo", "--kv-bits", "8"}, {"--kv-quant", "turbo:k3v3"}, {"--seq-len", "1"}} {
		args := append([]string{"perplexity", "--model", "demo", "--data", plain}, bad...)
		if code, _, _ := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)", bad, code)
		}
	}
}

// TestKVQuantRefusesHeadDim: a model whose head dim TurboQuant cannot take
// (the Llama fixture's 16) is refused before generating, with the numbers.
func TestKVQuantRefusesHeadDim(t *testing.T) {
	code, _, errs := run(t, "generate", "--model", "../model/testdata/llama3/f32", "--prompt-ids", "1,2,3", "--max-tokens", "2",
		"--kv-quant", "turbo", "--backend", "cpu")
	if code == 0 || !strings.Contains(errs, "head dim 16") || !strings.Contains(errs, "[64 128 256 512]") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// TestKVQuantFlags: --kv-quant on generate reports fewer kv_bytes than
// bf16 KV with the same tokens at k8v8; bench, chat and batch take the
// flag and refuse bad schemes (and batch a --quantized-kv-start on paged KV).
func TestKVQuantFlags(t *testing.T) {
	gen := func(extra ...string) (ids []int, kvBytes int) {
		t.Helper()
		args := append([]string{"generate", "--model", "demo", "--prompt-ids", "2,100,200,300,400", "--max-tokens", "12",
			"--json", "--ignore-eos", "--backend", "cpu"}, extra...)
		code, out, errs := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errs)
		}
		var r struct {
			IDs   []int `json:"ids"`
			Stats struct {
				KVBytes int `json:"kv_bytes"`
			} `json:"stats"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r.IDs, r.Stats.KVBytes
	}
	pi, pb := gen()
	ti, tb := gen("--kv-quant", "turbo:k8v8", "--quantized-kv-start", "0")
	if !slices.Equal(pi, ti) || !(tb > 0 && tb < pb) {
		t.Fatalf("k8v8: ids %v (plain %v), kv_bytes %d (plain %d)", ti, pi, tb, pb)
	}
	for _, verb := range [][]string{{"bench", "-p", "4", "-g", "2", "-n", "1"}, {"chat"}, {"batch", "--input", "-", "--paged-kv=false"}} {
		if code, _, errs := run(t, append(verb, "--kv-quant", "turbo:k8v9")...); code != 2 {
			t.Errorf("%s --kv-quant turbo:k8v9: exit %d (%s), want 2", verb[0], code, errs)
		}
	}
	if code, _, errs := run(t, "batch", "--input", "-", "--kv-quant", "turbo", "--quantized-kv-start", "10"); code != 2 || !strings.Contains(errs, "paged-kv") {
		t.Errorf("batch --kv-quant --quantized-kv-start on paged KV: exit %d: %s", code, errs)
	}
	if code, out, errs := run(t, "bench", "--model", "demo", "-p", "8", "-g", "4", "-n", "1", "--kv-quant", "turbo", "--quantized-kv-start", "0", "--backend", "cpu"); code != 0 {
		t.Errorf("bench --kv-quant turbo: exit %d: %s %s", code, out, errs)
	}
}
