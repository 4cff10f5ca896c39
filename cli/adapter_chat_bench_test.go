package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestChatBenchAdapters: chat --adapter-path (repeatable, in order)
// replies with the adapters applied — each turn's reply equals generate
// --adapter-path with the same adapters on that turn's prompt, and the
// first differs from the base model's — and bench --adapter-path runs
// with them, refusing an adapter that does not fit the model.
func TestChatBenchAdapters(t *testing.T) {
	dir := chatFixture(t)
	a, b := "../lora/testdata/llama3/a_peft", "../lora/testdata/llama3/b_peft"
	code, _, stderr, turns := runChatTurns(t, "hello there\nand then?\n", "--model", dir, "--backend", "cpu", "--max-tokens", "8",
		"--adapter-path", a, "--adapter-path", b)
	if code != 0 || len(turns) != 2 {
		t.Fatalf("chat with adapters: exit %d, %d turns: %s", code, len(turns), stderr)
	}
	code, _, stderr, base := runChatTurns(t, "hello there\n", "--model", dir, "--backend", "cpu", "--max-tokens", "8")
	if code != 0 || len(base) != 1 {
		t.Fatalf("chat: exit %d, %d turns: %s", code, len(base), stderr)
	}
	if slices.Equal(base[0].out, turns[0].out) {
		t.Fatalf("the adapters do not change the first reply (%v): the test cannot tell them apart", base[0].out)
	}
	for i, tr := range turns {
		ids := make([]string, len(tr.prompt))
		for k, id := range tr.prompt {
			ids[k] = strconv.Itoa(int(id))
		}
		want := generateIDs(t, "--model", dir, "--prompt-ids", strings.Join(ids, ","), "--max-tokens", strconv.Itoa(len(tr.out)),
			"--adapter-path", a, "--adapter-path", b)
		got := make([]int, len(tr.out))
		for k, id := range tr.out {
			got[k] = int(id)
		}
		if !slices.Equal(got, want) {
			t.Errorf("turn %d: chat replied %v, generate with the same adapters %v", i+1, got, want)
		}
	}

	fx := "../model/testdata/llama3/f32"
	code, out, errs := run(t, "bench", "--model", fx, "-p", "5", "-g", "4", "-n", "1", "--backend", "cpu", "--json", "--adapter-path", a, "--adapter-path", b)
	var res struct {
		Trials []struct {
			Generated int `json:"generation_tokens"`
		} `json:"trials"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Trials) != 1 || res.Trials[0].Generated != 4 {
		t.Fatalf("bench --adapter-path: exit %d, %q, %s", code, out, errs)
	}
	if code, _, errs := run(t, "bench", "--model", fx, "-p", "5", "-g", "4", "-n", "1", "--backend", "cpu", "--adapter-path", "../lora/testdata/gemma4_dense/a_peft"); code == 0 || !strings.Contains(errs, "does not fit") {
		t.Errorf("bench with an adapter that does not fit: exit %d, %q", code, errs)
	}
}
