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

// TestGenerateMatchesHF runs the verb on the Llama 3 fixture and checks
// the ids against HF's greedy continuation, then converts the fixture to 4
// bits and checks the quantized checkpoint generates too.
func TestGenerateMatchesHF(t *testing.T) {
	fx := "../model/testdata/llama3"
	raw, err := os.ReadFile(filepath.Join(fx, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Prompt []int `json:"prompt"`
		Greedy []int `json:"greedy_f32"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(g.Prompt))
	for i, v := range g.Prompt {
		ids[i] = strconv.Itoa(v)
	}
	code, out, errs := run(t, "generate", "--model", filepath.Join(fx, "f32"), "--prompt-ids", strings.Join(ids, ","),
		"--max-tokens", "32", "--temp", "0", "--json", "--ignore-eos", "--prefill-chunk", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		IDs  []int  `json:"ids"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if !slices.Equal(res.IDs, g.Greedy) {
		t.Errorf("ids %v, want HF's %v", res.IDs, g.Greedy)
	}
	dst := t.TempDir()
	if code, _, errs := run(t, "convert", "--hf-path", filepath.Join(fx, "f32"), "--mlx-path", dst, "-q", "--q-group-size", "32", "--q-override", "lm_head=8"); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	if code, out, errs := run(t, "generate", "--model", dst, "--prompt-ids", "5,6,7", "--max-tokens", "4", "--json", "--ignore-eos"); code != 0 || !strings.Contains(out, `"ids":[`) {
		t.Fatalf("generate on converted: exit %d: %s %s", code, out, errs)
	}
	if code, _, _ := run(t, "generate", "--model", filepath.Join(fx, "f32"), "--prompt-ids", "1", "--temp", "-1"); code != 2 {
		t.Errorf("--temp -1: exit %d, want 2 (usage)", code)
	}
}
