package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// specResult is the part of generate --json the speculation tests read.
type specResult struct {
	IDs   []int `json:"ids"`
	Stats struct {
		DecodeSteps int `json:"decode_steps"`
		Speculation *struct {
			Drafted       int   `json:"drafted"`
			Accepted      int   `json:"accepted"`
			TargetCalls   int   `json:"targetCalls"`
			AcceptedByPos []int `json:"acceptedByPos"`
		} `json:"speculation"`
	} `json:"stats"`
}

func runSpecJSON(t *testing.T, args ...string) specResult {
	t.Helper()
	code, out, errs := run(t, append([]string{"generate", "--json", "--ignore-eos"}, args...)...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errs)
	}
	var r specResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	return r
}

// TestGenerateSpeculative: generate with a draft model (the fixture in
// bfloat16 drafting for float32) and with prompt lookup gives HF's greedy
// ids, and --json reports the speculation statistics.
func TestGenerateSpeculative(t *testing.T) {
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
	base := []string{"--model", filepath.Join(fx, "f32"), "--prompt-ids", strings.Join(ids, ","), "--max-tokens", "32"}
	for _, extra := range [][]string{
		{"--draft-model", filepath.Join(fx, "bf16"), "--num-draft-tokens", "4"},
		{"--prompt-lookup", "3"},
		{"--draft", "ngram", "--ngram-min", "2", "--ngram-max", "4", "--num-draft-tokens", "6"},
		{"--draft-model", filepath.Join(fx, "bf16"), "--num-draft-tokens", "auto:5"},
	} {
		r := runSpecJSON(t, append(slices.Clone(base), extra...)...)
		if !slices.Equal(r.IDs, g.Greedy) {
			t.Errorf("%v: ids %v, want HF's %v", extra, r.IDs, g.Greedy)
		}
		sp := r.Stats.Speculation
		if sp == nil || sp.TargetCalls != r.Stats.DecodeSteps || len(sp.AcceptedByPos) == 0 {
			t.Fatalf("%v: speculation stats %+v", extra, sp)
		}
		if extra[0] == "--draft-model" && (sp.Drafted == 0 || sp.Accepted*2 < sp.Drafted) {
			t.Errorf("the same model in bfloat16 accepted %d of %d drafts", sp.Accepted, sp.Drafted)
		}
	}
	for _, bad := range [][]string{
		{"--draft", "magic"},
		{"--draft", "model"},
		{"--draft-model", filepath.Join(fx, "bf16"), "--prompt-lookup", "2"},
		{"--prompt-lookup", "2", "--ngram-min", "0"},
		{"--prompt-lookup", "2", "--spec-accept", "maybe"},
		{"--prompt-lookup", "2", "--num-draft-tokens", "-1"},
		{"--prompt-lookup", "2", "--num-draft-tokens", "auto:x"},
	} {
		if code, _, errs := run(t, append(append([]string{"generate"}, base...), bad...)...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2 (usage)", bad, code, errs)
		}
	}
}

// TestSpeculativeDemoPair: the demo model drafted by its 4-bit form
// generates the demo model's own greedy text, and a draft model of
// another vocabulary is refused, naming both sizes.
func TestSpeculativeDemoPair(t *testing.T) {
	prompt := []string{"--model", "demo", "--prompt", "Count: one, two, three, four,", "--max-tokens", "24"}
	want := runSpecJSON(t, prompt...)
	got := runSpecJSON(t, append(slices.Clone(prompt), "--draft-model", "demo-q4", "--num-draft-tokens", "3")...)
	if !slices.Equal(got.IDs, want.IDs) {
		t.Errorf("drafted by demo-q4: %v, want %v", got.IDs, want.IDs)
	}
	if sp := got.Stats.Speculation; sp == nil || sp.Accepted == 0 {
		t.Errorf("demo-q4 drafts: %+v", sp)
	}
	code, _, errs := run(t, append(append([]string{"generate"}, prompt...), "--draft-model", "../model/testdata/llama3/f32")...)
	if code != 2 || !strings.Contains(errs, "256") {
		t.Errorf("mismatched pair: exit %d: %s", code, errs)
	}
}

// TestChatSpeculative: chat with prompt lookup and with a draft model
// (the same fixture with the same tokenizer) gives, turn after turn
// through the prompt cache, the replies of plain generation from scratch,
// and -v prints the speculation line.
func TestChatSpeculative(t *testing.T) {
	dir := chatFixture(t)
	live := tensor.LiveArrays()
	for _, extra := range [][]string{{"--prompt-lookup", "3", "--num-draft-tokens", "5"}, {"--draft-model", dir, "--num-draft-tokens", "auto"}} {
		args := append([]string{"--model", dir, "--backend", "cpu", "--max-tokens", "16", "-v"}, extra...)
		code, _, stderr, turns := runChatTurns(t, "hello there\nand then?\nagain: hello there\n", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
		if len(turns) != 3 || !strings.Contains(stderr, "Speculation: ") {
			t.Fatalf("%v: %d turns; stderr %q", extra, len(turns), stderr)
		}
		for i, tr := range turns {
			if tr.st.Speculation == nil {
				t.Errorf("%v turn %d: no speculation stats", extra, i+1)
			}
			if i > 0 && tr.st.CachedTokens == 0 {
				t.Errorf("%v turn %d: nothing came from the prompt cache", extra, i+1)
			}
			if want := freshGreedy(t, dir, tr.prompt, 16); !slices.Equal(tr.out, want) {
				t.Errorf("%v turn %d: %v; plain from scratch: %v", extra, i+1, tr.out, want)
			}
		}
	}
	if got := tensor.LiveArrays(); got != live {
		t.Errorf("live arrays %d → %d after the sessions", live, got)
	}
}

// TestServeSpeculative runs `mlxgo serve --draft-model demo-q4` on the
// batched lane: a greedy chat answers what the plain server answers, and
// usage.speculation reports the drafts; bad speculation flags stop serve
// with a usage error before anything loads.
func TestServeSpeculative(t *testing.T) {
	for _, args := range [][]string{{"serve", "--draft", "bogus"}, {"serve", "--spec-accept", "maybe", "--draft", "ngram"},
		{"serve", "--draft", "ngram", "--num-draft-tokens", "x"}, {"serve", "--draft", "model"}} {
		if code, _, _ := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if testing.Short() {
		t.Skip("builds and starts the binary twice")
	}
	bin := buildMlxgo(t)
	chat := func(url string) (string, map[string]any) {
		body := `{"messages":[{"role":"user","content":"Count: one two three four, one two three four, one two three"}],"temperature":0,"max_tokens":24}`
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 {
			t.Fatalf("chat: %d %v", resp.StatusCode, err)
		}
		return out.Choices[0].Message.Content, out.Usage
	}
	_, plainURL, _ := startMlxgo(t, bin, "--port", "0", "--backend", "cpu", "--batch", "1")
	waitHealthy(t, plainURL)
	want, _ := chat(plainURL)
	_, url, _ := startMlxgo(t, bin, "--port", "0", "--backend", "cpu", "--batch", "2", "--draft-model", "demo-q4", "--num-draft-tokens", "3")
	waitHealthy(t, url)
	got, u := chat(url)
	if got != want {
		t.Errorf("drafted by demo-q4: %q, plain %q", got, want)
	}
	sp, ok := u["speculation"].(map[string]any)
	if !ok || sp["drafted"].(float64) == 0 || sp["numDraft"].(float64) != 3 || u["lane"] != "batched" {
		t.Errorf("usage %v", u)
	}
}

// TestGenerateAssistant: generate --draft-model with a Gemma 4 assistant
// fixture (detected from its config, or named by --draft assistant)
// yields the gemma4_dense target's greedy ids with drafts proposed; the
// assistant for another kind of target, or --draft assistant with a
// plain draft model, is a usage error.
func TestGenerateAssistant(t *testing.T) {
	fx := "../model/testdata/gemma4_dense"
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
	asst := "../model/testdata/gemma4_assistant/tied"
	base := []string{"--model", filepath.Join(fx, "f32"), "--prompt-ids", strings.Join(ids, ","), "--max-tokens", "32"}
	for _, extra := range [][]string{{"--draft-model", asst}, {"--draft", "assistant", "--draft-model", asst, "--num-draft-tokens", "2"}} {
		r := runSpecJSON(t, append(slices.Clone(base), extra...)...)
		if !slices.Equal(r.IDs, g.Greedy) {
			t.Errorf("%v: ids %v, want HF's %v", extra, r.IDs, g.Greedy)
		}
		if sp := r.Stats.Speculation; sp == nil || sp.Drafted == 0 {
			t.Errorf("%v: speculation stats %+v", extra, sp)
		}
	}
	for _, bad := range [][]string{
		append([]string{"generate", "--model", "../model/testdata/llama3/f32", "--prompt-ids", "1,2,3"}, "--draft-model", asst),
		append(slices.Clone(append([]string{"generate"}, base...)), "--draft", "assistant", "--draft-model", filepath.Join(fx, "bf16")),
	} {
		if code, _, errs := run(t, bad...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2 (usage)", bad, code, errs)
		}
	}
}

// TestGenerateMTP: generate --draft mtp on the DeepSeek-V3 MTP fixture
// yields its plain greedy ids with drafts proposed; a checkpoint without
// an MTP head is a usage error.
func TestGenerateMTP(t *testing.T) {
	base := []string{"--model", "../model/testdata/deepseek_v3_mtp/f32", "--prompt-ids", "5,9,33,7,10,5,9,33,7,3", "--max-tokens", "16"}
	plain := runSpecJSON(t, base...)
	r := runSpecJSON(t, append(slices.Clone(base), "--draft", "mtp", "--num-draft-tokens", "2")...)
	if !slices.Equal(r.IDs, plain.IDs) || len(r.IDs) != 16 {
		t.Errorf("--draft mtp: ids %v, plain %v", r.IDs, plain.IDs)
	}
	if sp := r.Stats.Speculation; sp == nil || sp.Drafted == 0 {
		t.Errorf("speculation stats %+v", sp)
	}
	for _, bad := range [][]string{
		{"generate", "--model", "../model/testdata/llama3/f32", "--prompt-ids", "1,2,3", "--draft", "mtp"},
		append(append([]string{"generate"}, base...), "--draft", "mtp", "--draft-model", "../model/testdata/llama3/f32"),
	} {
		if code, _, errs := run(t, bad...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2 (usage)", bad, code, errs)
		}
	}
}
