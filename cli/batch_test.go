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
	code, out, errs := run(t, "batch", "--input", in, "--max-batch", "3", "--token-budget", "16", "--backend", "cpu")
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
		} `json:"summary"`
	}
	if err := json.Unmarshal([]byte(outLines[len(lines)]), &sum); err != nil {
		t.Fatal(err)
	}
	if s := sum.Summary; s.Rows != 4 || s.MaxBatch < 2 || s.MaxBatch > 3 || s.Wall <= 0 || s.Generated == 0 {
		t.Errorf("summary %+v", s)
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
}
