package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// TestChatImage chats two turns about an image (--image): the first
// turn's prompt is the image's run expanded as the processor does, in the
// first user message; the second turn reuses the first's cached KV; and
// each reply equals `mlxgo generate --prompt-ids` on that turn's prompt
// from scratch (so cached media rows are the image's own).
func TestChatImage(t *testing.T) {
	dir := mmWithTokenizer(t)
	widenWindow(t, dir)
	img := filepath.Join(mmFixture, "media", "d.png")
	code, stdout, stderr, turns := runChatTurns(t, "t118 t47 t22\nt5 t6\n",
		"--model", dir, "--backend", "cpu", "--image", img, "--max-tokens", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if len(turns) != 2 {
		t.Fatalf("%d turns, want 2; stdout %q", len(turns), stdout)
	}
	want := []int32{2, 252}
	for range 64 { // d.png: a 12x48 patch grid, 64 soft tokens
		want = append(want, 250)
	}
	want = append(want, 253, 118, 47, 22)
	if !slices.Equal(turns[0].prompt, want) {
		t.Fatalf("turn 1 prompt %v, want %v", turns[0].prompt, want)
	}
	// The test template joins contents without spaces: turn 1's last word
	// fuses with its reply in turn 2's prompt, which shares all the rest.
	if !slices.Equal(turns[1].prompt[:len(want)-1], want[:len(want)-1]) || slices.Contains(turns[1].prompt[len(want):], 250) {
		t.Fatalf("turn 2 prompt %v does not start with turn 1's, or holds a second image", turns[1].prompt)
	}
	if st := turns[1].st; st.CachedTokens < len(want)-1 {
		t.Errorf("turn 2 had %d cached tokens, turn 1's prompt is %d", st.CachedTokens, len(want))
	}
	for i, tr := range turns {
		ids := make([]int, len(tr.prompt))
		for k, v := range tr.prompt {
			ids[k] = int(v)
		}
		code, out, errs := run(t, "generate", "--model", dir, "--backend", "cpu", "--image", img,
			"--prompt-ids", idList(ids), "--max-tokens", "5", "--json")
		if code != 0 {
			t.Fatalf("generate: code %d: %s", code, errs)
		}
		var res struct {
			IDs []int32 `json:"ids"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if len(tr.out) == 0 || !slices.Equal(tr.out, res.IDs) {
			t.Errorf("turn %d: chat gave %v, generate from scratch %v", i+1, tr.out, res.IDs)
		}
	}
}

// widenWindow sets the copied fixture's sliding window to 512 tokens, so
// that its sliding-window caches never wrap in these short chats and the
// prompt cache can trim them (a wrapped one cannot be).
func widenWindow(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["text_config"].(map[string]any)["sliding_window"] = 512
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestChatMediaErrors: a missing file and a file that is not an image
// are errors before any turn.
func TestChatMediaErrors(t *testing.T) {
	dir := mmWithTokenizer(t)
	for name, args := range map[string][]string{
		"missing file": {"--model", dir, "--image", filepath.Join(dir, "nope.png")},
		"not an image": {"--model", dir, "--image", filepath.Join(dir, "config.json")},
	} {
		code, _, stderr, turns := runChatTurns(t, "t5\n", append(args, "--backend", "cpu", "--max-tokens", "2")...)
		if code == 0 || len(turns) != 0 {
			t.Errorf("%s: exit %d after %d turns: %s", name, code, len(turns), stderr)
		} else {
			t.Logf("%s: exit %d: %s", name, code, stderr)
		}
	}
}

// TestGenerateBidirectionalImages runs `mlxgo generate` with two images on
// the fixture patched to use_bidirectional_attention "vision", prefill
// chunks of 7 asked for (which would cut the images' blocks; the CLI
// widens the chunk): the greedy continuation must be HF's
// (golden_masks.json, made by tools/oracle/models_gemma4_mm_masks.py).
func TestGenerateBidirectionalImages(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(mmFixture, "golden_masks.json"))
	if err != nil {
		t.Skipf("no mask goldens: %v", err)
	}
	var g struct {
		Bidi map[string]struct {
			IDs    []int    `json:"ids"`
			Images []string `json:"images"`
			Greedy []int    `json:"greedy"`
		} `json:"bidi"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	pr := g.Bidi["two"]
	dir := t.TempDir()
	for _, f := range []string{"model.safetensors", "processor_config.json"} {
		b, err := os.ReadFile(filepath.Join(mmFixture, "f32", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(mmFixture, "f32", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["text_config"].(map[string]any)["use_bidirectional_attention"] = "vision"
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"generate", "--model", dir, "--backend", "cpu", "--prompt-ids", idList(pr.IDs),
		"--max-tokens", strconv.Itoa(len(pr.Greedy)), "--json", "--ignore-eos", "--prefill-chunk-size", "7"}
	for _, k := range pr.Images {
		args = append(args, "--image", filepath.Join(mmFixture, "media", k+".png"))
	}
	code, out, errs := run(t, args...)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errs)
	}
	var res struct {
		IDs []int `json:"ids"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !slices.Equal(res.IDs, pr.Greedy) {
		t.Fatalf("greedy %v, HF %v", res.IDs, pr.Greedy)
	}
}
