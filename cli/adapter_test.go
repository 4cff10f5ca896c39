package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// loraGolden is what tools/oracle/lora.py wrote for the Llama 3 fixture.
type loraGolden struct {
	Prompt   []int `json:"prompt"`
	GreedyA  []int `json:"greedy_a"`
	GreedyAB []int `json:"greedy_ab"`
}

func readLoraGolden(t *testing.T) (loraGolden, string) {
	t.Helper()
	raw, err := os.ReadFile("../lora/testdata/llama3/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g loraGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(g.Prompt))
	for i, v := range g.Prompt {
		ids[i] = strconv.Itoa(v)
	}
	return g, strings.Join(ids, ",")
}

// generateIDs runs generate --json and returns its ids.
func generateIDs(t *testing.T, args ...string) []int {
	t.Helper()
	code, out, errs := run(t, append([]string{"generate", "--json", "--ignore-eos", "--temp", "0", "--backend", "cpu"}, args...)...)
	if code != 0 {
		t.Fatalf("generate %v: exit %d: %s", args, code, errs)
	}
	var res struct {
		IDs []int `json:"ids"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	return res.IDs
}

// TestGenerateAdapters: --adapter-path (repeatable, in order) gives PEFT's
// greedy tokens with one adapter and with two; fuse writes a checkpoint
// that generates the same tokens as the unmerged pair; a bad adapter is
// refused.
func TestGenerateAdapters(t *testing.T) {
	g, prompt := readLoraGolden(t)
	fx := "../model/testdata/llama3/f32"
	a, b := "../lora/testdata/llama3/a_peft", "../lora/testdata/llama3/b_peft"
	n := strconv.Itoa(len(g.GreedyA))
	if got := generateIDs(t, "--model", fx, "--prompt-ids", prompt, "--max-tokens", n, "--adapter-path", a); !slices.Equal(got, g.GreedyA) {
		t.Errorf("one adapter: ids %v, want PEFT's %v", got, g.GreedyA)
	}
	if got := generateIDs(t, "--model", fx, "--prompt-ids", prompt, "--max-tokens", n, "--adapter-path", "../lora/testdata/llama3/a_mlx", "--adapter-path", b); !slices.Equal(got, g.GreedyAB) {
		t.Errorf("two adapters: ids %v, want PEFT's %v", got, g.GreedyAB)
	}
	out := filepath.Join(t.TempDir(), "fused")
	if code, _, errs := run(t, "fuse", "--model", fx, "--adapter-path", a, "--adapter-path", b, "--save-path", out); code != 0 {
		t.Fatalf("fuse: exit %d: %s", code, errs)
	}
	if got := generateIDs(t, "--model", out, "--prompt-ids", prompt, "--max-tokens", n); !slices.Equal(got, g.GreedyAB) {
		t.Errorf("fused: ids %v, want the unmerged run's %v", got, g.GreedyAB)
	}
	q := filepath.Join(t.TempDir(), "fused-q")
	if code, _, errs := run(t, "fuse", "--model", fx, "--adapter-path", a, "--save-path", q, "-q", "--q-group-size", "32"); code != 0 {
		t.Fatalf("fuse -q: exit %d: %s", code, errs)
	}
	raw, err := os.ReadFile(filepath.Join(q, "config.json"))
	if err != nil || !strings.Contains(string(raw), `"quantization"`) {
		t.Errorf("fuse -q wrote no quantization section (%v)", err)
	}
	if got := generateIDs(t, "--model", q, "--prompt-ids", prompt, "--max-tokens", "4"); len(got) != 4 {
		t.Errorf("fused -q: %d ids, want 4", len(got))
	}
	code, _, errs := run(t, "generate", "--model", fx, "--prompt-ids", prompt, "--max-tokens", "2", "--adapter-path", "../lora/testdata/gemma4_dense/a_peft")
	if code == 0 || !strings.Contains(errs, "does not fit") {
		t.Errorf("an adapter for another model: exit %d, stderr %q", code, errs)
	}
	if code, _, _ := run(t, "fuse", "--model", fx); code != 2 {
		t.Errorf("fuse without --adapter-path: exit %d, want 2", code)
	}
}
