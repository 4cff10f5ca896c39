package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestBatchVerbEqualsGenerate runs `mlxgo batch` on the demo model with
// rows joining at different steps (text and id prompts, sampled and
// greedy, a stop string, logprobs) and checks each output line against
// `mlxgo generate --json` with the same settings, in input order, and the
// summary line.
func TestBatchVerbEqualsGenerate(t *testing.T) {
	lines := []string{
		`{"id":1,"prompt":"Call me Ishmael.","max_tokens":10}`,
		`{"id":"b","prompt_ids":[5,6,7],"max_tokens":6,"temp":0.8,"top_p":0.9,"seed":3,"logprobs":2}`,
		`{"id":3,"prompt":"The whale","max_tokens":12,"join_at_step":3,"stop":["the"],"raw":true}`,
		`{"id":4,"prompt":"It was","system":"Be brief.","max_tokens":5,"temp":1,"top_k":5,"min_p":0.05,"seed":9,"repetition_penalty":1.3,"join_at_step":1}`,
	}
	gen := [][]string{
		{"--prompt", "Call me Ishmael.", "--max-tokens", "10"},
		{"--prompt-ids", "5,6,7", "--max-tokens", "6", "--temp", "0.8", "--top-p", "0.9", "--seed", "3", "--logprobs", "2"},
		{"--prompt", "The whale", "--max-tokens", "12", "--stop", "the", "--raw"},
		{"--prompt", "It was", "--system", "Be brief.", "--max-tokens", "5", "--temp", "1", "--top-k", "5", "--min-p", "0.05", "--seed", "9", "--repetition-penalty", "1.3"},
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"--paged-kv=true", "--paged-kv=false"} {
		t.Run(mode, func(t *testing.T) { batchVerbEqualsGenerate(t, in, lines, gen, mode) })
	}
}

// batchVerbEqualsGenerate runs the batch verb (paged or not) on the input
// lines and compares each output line with generate run on its flags.
func batchVerbEqualsGenerate(t *testing.T, in string, lines []string, gen [][]string, mode string) {
	code, out, errs := run(t, "batch", "--input", in, "--max-batch", "3", "--token-budget", "16", "--backend", "cpu", "--block-size", "4", mode)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	outLines := strings.Split(strings.TrimSpace(out), "\n")
	if len(outLines) != len(lines)+1 {
		t.Fatalf("%d output lines for %d inputs:\n%s", len(outLines), len(lines), out)
	}
	type result struct {
		ID       json.RawMessage   `json:"id"`
		IDs      []int32           `json:"ids"`
		Text     string            `json:"text"`
		Logprobs []json.RawMessage `json:"logprobs"`
		Stats    struct {
			Generated int    `json:"generated_tokens"`
			Backend   string `json:"backend"`
		} `json:"stats"`
	}
	for i, args := range gen {
		var got, want result
		if err := json.Unmarshal([]byte(outLines[i]), &got); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, outLines[i])
		}
		var in struct{ ID json.RawMessage }
		_ = json.Unmarshal([]byte(lines[i]), &in)
		if string(got.ID) != string(in.ID) {
			t.Errorf("line %d has id %s, want %s (input order)", i, got.ID, in.ID)
		}
		code, gout, gerr := run(t, append([]string{"generate", "--json", "--backend", "cpu"}, args...)...)
		if code != 0 {
			t.Fatalf("generate %v: exit %d: %s", args, code, gerr)
		}
		if err := json.Unmarshal([]byte(gout), &want); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.IDs, want.IDs) || got.Text != want.Text {
			t.Errorf("line %d: batch gave %v %q, generate %v %q", i, got.IDs, got.Text, want.IDs, want.Text)
		}
		if len(got.Logprobs) != len(want.Logprobs) {
			t.Errorf("line %d: %d logprobs, generate %d", i, len(got.Logprobs), len(want.Logprobs))
		}
		for k := range got.Logprobs {
			if string(got.Logprobs[k]) != string(want.Logprobs[k]) {
				t.Errorf("line %d token %d: logprobs %s, generate %s", i, k, got.Logprobs[k], want.Logprobs[k])
				break
			}
		}
		if got.Stats.Backend != "cpu" {
			t.Errorf("line %d: backend %q", i, got.Stats.Backend)
		}
	}
	var sum struct {
		Summary struct {
			Rows      int     `json:"rows"`
			Generated int     `json:"generated_tokens"`
			Wall      float64 `json:"wall_s"`
			MaxBatch  int     `json:"max_batch"`
			Peak      int     `json:"peak_blocks"`
			BlockSize int     `json:"block_size"`
			Capacity  int     `json:"kv_blocks"`
			PeakBytes int     `json:"kv_bytes_peak"`
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(outLines[len(lines)]), &sum); err != nil {
		t.Fatal(err)
	}
	if s := sum.Summary; s.Rows != 4 || s.MaxBatch < 2 || s.MaxBatch > 3 || s.Wall <= 0 || s.Generated == 0 {
		t.Errorf("summary %+v", s)
	}
	s := sum.Summary
	if mode == "--paged-kv=false" {
		if s.Peak != 0 || s.Capacity != 0 {
			t.Errorf("contiguous caches, yet a pool in the summary: %+v", s)
		}
		return
	}
	if s.BlockSize != 4 || s.Peak <= 0 || s.Peak > s.Capacity || s.PeakBytes <= 0 {
		t.Errorf("paged summary %+v", s)
	}
}

func TestBatchVerbBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown field": `{"prompt":"x","temperature":1}`,
		"no prompt":     `{"max_tokens":3}`,
		"both prompts":  `{"prompt":"x","prompt_ids":[1]}`,
		"not json":      `{"prompt":`,
		"empty":         "\n\n",
		"bad temp":      `{"prompt":"x","temp":-1}`,
	} {
		in := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".jsonl")
		if err := os.WriteFile(in, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _, errs := run(t, "batch", "--input", in, "--backend", "cpu"); code != 2 {
			t.Errorf("%s: exit %d, want 2 (usage): %s", name, code, errs)
		}
	}
	if code, _, _ := run(t, "batch", "--input", filepath.Join(dir, "missing.jsonl")); code == 0 {
		t.Error("a missing input file succeeded")
	}
	// a request the pool can never hold: refused with the numbers
	in := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(in, []byte(`{"prompt_ids":[1,2,3,4,5,6,7,8,9],"max_tokens":30}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := run(t, "batch", "--input", in, "--backend", "cpu", "--block-size", "8", "--kv-blocks", "4")
	if code == 0 || !strings.Contains(errs, "39 tokens need 5 blocks of 8 slots") || !strings.Contains(errs, "holds 4") {
		t.Errorf("a request beyond the pool: exit %d: %s", code, errs)
	}
}
