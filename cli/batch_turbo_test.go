package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBatchTurboPaged: `mlxgo batch --kv-quant` on paged KV (the default)
// stores TurboQuant blocks: each row's tokens are the same whether it
// shares the batch with the others or runs alone (--max-batch 1), its
// greedy tokens under k8v8 start as plain KV's, and the summary's
// kv_bytes_peak shrinks from plain to k8v8 to k8v3.
func TestBatchTurboPaged(t *testing.T) {
	lines := []string{
		`{"id":1,"prompt":"Call me Ishmael.","max_tokens":12}`,
		`{"id":2,"prompt":"Call me Ishmael. Some years ago","max_tokens":10,"join_at_step":2}`,
		`{"id":3,"prompt_ids":[5,6,7,8,9,10,11,12,13],"max_tokens":8,"join_at_step":1}`,
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := func(extra ...string) (ids [][]int, peak int) {
		t.Helper()
		args := append([]string{"batch", "--input", in, "--max-batch", "3", "--token-budget", "16", "--backend", "cpu", "--block-size", "4"}, extra...)
		code, out, errs := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errs)
		}
		outLines := strings.Split(strings.TrimSpace(out), "\n")
		if len(outLines) != len(lines)+1 {
			t.Fatalf("%v: %d output lines:\n%s", extra, len(outLines), out)
		}
		for _, l := range outLines[:len(lines)] {
			var r struct {
				IDs []int `json:"ids"`
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, r.IDs)
		}
		var sum struct {
			Summary struct {
				Peak int `json:"kv_bytes_peak"`
			} `json:"summary"`
		}
		if err := json.Unmarshal([]byte(outLines[len(lines)]), &sum); err != nil {
			t.Fatal(err)
		}
		return ids, sum.Summary.Peak
	}
	plain, pp := batch()
	k8v8, p8 := batch("--kv-quant", "turbo:k8v8")
	k8v3, p3 := batch("--kv-quant", "turbo")
	alone, _ := batch("--kv-quant", "turbo", "--max-batch", "1", "--token-budget", "16")
	for i := range k8v3 {
		if !slices.Equal(k8v3[i], alone[i]) || len(k8v3[i]) == 0 {
			t.Errorf("row %d: k8v3 batched %v, alone %v", i, k8v3[i], alone[i])
		}
		if len(k8v8[i]) < 4 || len(plain[i]) < 4 || !slices.Equal(k8v8[i][:4], plain[i][:4]) {
			t.Errorf("row %d: k8v8 %v, plain %v", i, k8v8[i], plain[i])
		}
	}
	if !(0 < p3 && p3 < p8 && p8 < pp) {
		t.Errorf("kv_bytes_peak: k8v3 %d, k8v8 %d, plain %d", p3, p8, pp)
	}
}

// TestServeKVQuantFlag: serve refuses a bad --kv-quant scheme with a
// usage error, before loading anything.
func TestServeKVQuantFlag(t *testing.T) {
	for _, bad := range []string{"turbo:k8v9", "turbo:k3v3", "affine"} {
		if code, _, errs := run(t, "serve", "--kv-quant", bad); code != 2 || !strings.Contains(errs, "kv-quant") {
			t.Errorf("serve --kv-quant %s: exit %d: %s", bad, code, errs)
		}
	}
}
