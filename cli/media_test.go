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

// mmFixture is the tiny Gemma 4 model with vision and audio towers made by
// tools/oracle/models_gemma4_mm.py.
var mmFixture = filepath.Join("..", "model", "testdata", "gemma4_mm")

type mmPrompt struct {
	IDs    []int  `json:"ids"`
	Image  string `json:"image"`
	Audio  string `json:"audio"`
	Greedy []int  `json:"greedy"`
}

func mmPrompts(t *testing.T) map[string]mmPrompt {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(mmFixture, "golden.json"))
	if err != nil {
		t.Skipf("no gemma4_mm fixture: %v", err)
	}
	var g struct {
		Prompts map[string]mmPrompt `json:"prompts"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g.Prompts
}

func idList(ids []int) string {
	s := make([]string, len(ids))
	for i, v := range ids {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// TestGenerateImageMatchesHF runs `mlxgo generate --image` with the
// fixture's image prompt given as ids (holding the image's run): the
// greedy continuation must be HF's. The audio prompts' goldens come from
// transformers' eager attention, whose audio mask differs from the one
// the tower implements (see model/gemma4_audio_test.go), so through the
// CLI they are only checked to run and to refuse a wrong run length.
func TestGenerateImageMatchesHF(t *testing.T) {
	pr := mmPrompts(t)["image"]
	code, out, errs := run(t, "generate", "--model", filepath.Join(mmFixture, "f32"), "--backend", "cpu",
		"--prompt-ids", idList(pr.IDs), "--image", filepath.Join(mmFixture, "media", pr.Image+".png"),
		"--max-tokens", strconv.Itoa(len(pr.Greedy)), "--json", "--ignore-eos")
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

func TestGenerateMediaErrors(t *testing.T) {
	prs := mmPrompts(t)
	img := prs["image"]
	fx := filepath.Join(mmFixture, "f32")
	media := filepath.Join(mmFixture, "media")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"run too short", []string{"--prompt-ids", idList(img.IDs[:len(img.IDs)-5]), "--image", filepath.Join(media, "d.png")}, "placeholders"},
		{"no run", []string{"--prompt-ids", "2,5,6", "--image", filepath.Join(media, "a.png")}, "runs"},
		{"missing file", []string{"--prompt-ids", idList(img.IDs), "--image", filepath.Join(media, "nope.png")}, "nope.png"},
		{"wav as image", []string{"--prompt-ids", idList(img.IDs), "--image", filepath.Join(media, "w1.wav")}, "unsupported"},
		{"text-only model", []string{"--prompt-ids", "2,5", "--model", filepath.Join("..", "model", "testdata", "gemma4_dense", "f32"), "--image", filepath.Join(media, "a.png")}, "takes no such media"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"generate", "--model", fx, "--backend", "cpu", "--max-tokens", "2", "--json"}, c.args...)
			code, _, errs := run(t, args...)
			if code == 0 || !strings.Contains(errs, c.want) {
				t.Fatalf("code %d, stderr %q (want it to mention %q)", code, errs, c.want)
			}
		})
	}
	// audio and both prompts run through the CLI, in the given file order
	for _, name := range []string{"audio", "both"} {
		pr := prs[name]
		args := []string{"generate", "--model", fx, "--backend", "cpu", "--prompt-ids", idList(pr.IDs), "--max-tokens", "3", "--json", "--ignore-eos"}
		if pr.Image != "" {
			args = append(args, "--image", filepath.Join(media, pr.Image+".png"))
		}
		args = append(args, "--audio", filepath.Join(media, pr.Audio+".wav"))
		if code, out, errs := run(t, args...); code != 0 || !strings.Contains(out, `"ids":[`) {
			t.Fatalf("%s: code %d: %s %s", name, code, out, errs)
		}
	}
}

// mmWithTokenizer copies the fixture's checkpoint into a folder with a
// word-level tokenizer over its 256 ids ("t3" … "t249"; the special
// tokens at 250–255 as its config numbers them) and a chat template that
// writes BOS and the messages' content.
func mmWithTokenizer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors", "processor_config.json"} {
		b, err := os.ReadFile(filepath.Join(mmFixture, "f32", f))
		if err != nil {
			t.Skipf("no gemma4_mm fixture: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	vocab := map[string]int{}
	var added []map[string]any
	for i, name := range []string{"<pad>", "<eos>", "<bos>", "<|image|>", "<|audio|>", "<boi>", "<eoi>", "<boa>", "<eoa>"} {
		id := i
		if i >= 3 {
			id = 247 + i
		}
		vocab[name] = id
		added = append(added, map[string]any{"id": id, "content": name, "special": true, "normalized": false})
	}
	for i := 3; i < 250; i++ {
		vocab["t"+strconv.Itoa(i)] = i
	}
	write := func(name string, v any) {
		b, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", map[string]any{"version": "1.0", "added_tokens": added, "pre_tokenizer": map[string]any{"type": "WhitespaceSplit"},
		"model": map[string]any{"type": "WordLevel", "vocab": vocab, "unk_token": "<pad>"}})
	write("tokenizer_config.json", map[string]any{"bos_token": "<bos>", "eos_token": "<eos>",
		"chat_template": "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"})
	return dir
}

// TestGenerateImagePromptText: with --prompt, the image's placeholder goes
// in front of the text through the chat template and is expanded as the
// processor does, giving what the expanded ids give with --prompt-ids.
func TestGenerateImagePromptText(t *testing.T) {
	dir := mmWithTokenizer(t)
	img := filepath.Join(mmFixture, "media", "d.png")
	gen := func(args ...string) []int {
		t.Helper()
		args = append([]string{"generate", "--model", dir, "--backend", "cpu", "--image", img, "--max-tokens", "5", "--json", "--ignore-eos"}, args...)
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
		return res.IDs
	}
	fromText := gen("--prompt", " t118 t47 t22")
	ids := []int{2, 252}
	for range 64 { // d.png: a 12x48 patch grid, 64 soft tokens
		ids = append(ids, 250)
	}
	ids = append(ids, 253, 118, 47, 22)
	fromIDs := gen("--prompt-ids", idList(ids))
	if len(fromText) != 5 || !slices.Equal(fromText, fromIDs) {
		t.Fatalf("--prompt gave %v, the expanded ids %v", fromText, fromIDs)
	}
}
