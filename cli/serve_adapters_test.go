package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// charTokenizerJSON is a tokenizer.json for the 256-token fixtures: token
// i is one character, so any text of those characters encodes.
func charTokenizerJSON() []byte {
	vocab := map[string]int{}
	for i := range 256 {
		r := rune(0x100 + i)
		if i == '\n' || i >= 32 && i <= 126 {
			r = rune(i)
		}
		vocab[string(r)] = i
	}
	raw, _ := json.Marshal(map[string]any{
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"decoder": map[string]any{"type": "Fuse"},
	})
	return raw
}

// TestServeAdapters runs `mlxgo serve --adapter A --adapter B` on the
// llama3 fixture (with a character tokenizer): both are mounted as their
// folders' names and listed, a request naming none gets both stacked,
// "none" the base model, an unknown id 400; requests sent at once with
// different adapter values (one batch) each get the ids of `mlxgo generate
// --adapter-path` run alone with the same adapters. An adapter that does
// not fit the model stops the server from starting, naming the module.
func TestServeAdapters(t *testing.T) {
	fixture := filepath.Join("..", "model", "testdata", "llama3", "f32")
	ads := filepath.Join("..", "lora", "testdata", "llama3")
	if _, err := os.Stat(filepath.Join(fixture, "model.safetensors")); err != nil {
		t.Skip("the llama3 fixture model is absent (model/testdata/llama3/f32)")
	}
	dir := t.TempDir()
	for _, f := range []string{"config.json", "model.safetensors"} {
		raw, err := os.ReadFile(filepath.Join(fixture, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), charTokenizerJSON(), 0o644); err != nil {
		t.Fatal(err)
	}
	// the demo model's layers are not the llama3 adapter's
	if code, _, errOut := run(t, "serve", "--backend", "cpu", "--host", "256.256.256.256", "--adapter", filepath.Join(ads, "a_peft")); code == 0 || !strings.Contains(errOut, "does not fit") {
		t.Errorf("a misfit adapter: exit %d, %q", code, errOut)
	}
	bin := buildMlxgo(t)
	cmd, url, _ := startMlxgo(t, bin, "serve", "--model", dir, "--port", "0", "--backend", "cpu", "--max-tokens", "8",
		"--adapter", filepath.Join(ads, "a_peft"), "--adapter", filepath.Join(ads, "b_peft"))
	waitHealthy(t, url)
	get := func(path string) (int, []byte) {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, raw
	}
	code, raw := get("/v1/adapters")
	var list []struct {
		ID, Path string
		Default  bool
	}
	if code != 200 || json.Unmarshal(raw, &list) != nil || len(list) != 2 || list[0].ID != "a_peft" || list[1].ID != "b_peft" || list[0].Path != "a_peft" || !list[0].Default || !list[1].Default {
		t.Fatalf("GET /v1/adapters: %d %s", code, raw)
	}
	complete := func(adapter string) (int, string) {
		body := `{"prompt":"Hello there","temperature":0,"max_tokens":8`
		if adapter != "" {
			body += `,"adapter":"` + adapter + `"`
		}
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body+"}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Choices []struct{ Text string } `json:"choices"`
		}
		if json.Unmarshal(raw, &out) != nil || len(out.Choices) == 0 {
			return resp.StatusCode, string(raw)
		}
		return resp.StatusCode, out.Choices[0].Text
	}
	c1, dflt := complete("")
	c2, both := complete("a_peft+b_peft")
	c3, base := complete("none")
	if c1 != 200 || c2 != 200 || c3 != 200 || dflt != both || dflt == base {
		t.Errorf("default %d %q, a_peft+b_peft %d %q, none %d %q: want the default to be both adapters, unlike the base", c1, dflt, c2, both, c3, base)
	}
	if c, out := complete("zzz"); c != 400 {
		t.Errorf("unknown adapter: %d %s, want 400", c, out)
	}
	// at once, one batch of rows with different sets, each against the
	// CLI's solo run: the prompt as token ids, the reply's characters
	// read back as ids (token i is the character i, or U+0100+i)
	prompt := []int{72, 101, 108, 108, 111, 32, 116, 104, 101, 114, 101}
	ps := make([]string, len(prompt))
	for i, id := range prompt {
		ps[i] = strconv.Itoa(id)
	}
	sets := map[string][]string{"a_peft": {"a"}, "b_peft": {"b"}, "b_peft+a_peft": {"b", "a"}, "none": nil}
	solo := map[string][]int{}
	for spec, set := range sets {
		args := []string{"generate", "--json", "--temp", "0", "--backend", "cpu", "--model", dir, "--prompt-ids", strings.Join(ps, ","), "--max-tokens", "8"}
		for _, w := range set {
			args = append(args, "--adapter-path", filepath.Join(ads, w+"_peft"))
		}
		code, out, errs := run(t, args...)
		var res struct {
			IDs []int `json:"ids"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("generate %v: exit %d: %s %s", args, code, out, errs)
		}
		solo[spec] = res.IDs
	}
	if slices.Equal(solo["a_peft"], solo["b_peft"]) || slices.Equal(solo["a_peft"], solo["none"]) {
		t.Fatalf("the adapters do not change the CLI's greedy ids (%v): the test cannot tell them apart", solo)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for spec := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"prompt":[%s],"temperature":0,"max_tokens":8,"adapter":%q}`, strings.Join(ps, ","), spec)
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var out struct {
				Choices []struct{ Text string } `json:"choices"`
			}
			if resp.StatusCode != 200 || json.Unmarshal(raw, &out) != nil || len(out.Choices) == 0 {
				t.Errorf("%s: %d %s", spec, resp.StatusCode, raw)
				return
			}
			var ids []int
			for _, r := range out.Choices[0].Text {
				if r >= 0x100 {
					r -= 0x100
				}
				ids = append(ids, int(r))
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(ids, solo[spec]) {
				t.Errorf("adapter %q beside the others: ids %v, the CLI alone %v", spec, ids, solo[spec])
			}
		}()
	}
	wg.Wait()
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
}
