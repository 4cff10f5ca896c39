package serve

import (
	"net/http"
	"testing"
)

// TestAdapterSerialPromptCache: on the serial lane, the prompt cache keeps
// each adapter set's KV under its own namespace: a request reuses the
// prefix of earlier requests of its own set (and equals its solo run),
// never the base model's or another set's KV of the same prompt.
func TestAdapterSerialPromptCache(t *testing.T) {
	f := openLoraFixture(t)
	prompt := "The quick brown fox jumps over the lazy dog"
	longer := prompt + ", and again"
	const maxTok = 6
	_, hs := startServer(t, f.config(1))
	ask := func(p, adapter string, wantCached bool) {
		t.Helper()
		code, text, out := completion(t, hs.URL, p, str(adapter), maxTok)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %v", adapter, code, out)
		}
		var set []string
		for _, ts := range testSets {
			if ts.spec == adapter {
				set = ts.set
			}
		}
		if w := f.solo(t, p, set, maxTok); text != w {
			t.Errorf("%s %q: %q, solo %q", adapter, p, text, w)
		}
		cached := out["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
		if (cached > 0) != wantCached {
			t.Errorf("%s %q: %v tokens cached, want cached %v", adapter, p, cached, wantCached)
		}
	}
	ask(prompt, "none", false)
	ask(prompt, "a_peft", false) // the base model's entry is not a_peft's
	ask(prompt, "a_peft", true)
	ask(prompt, "b_peft", false)
	ask(prompt, "a_peft+b_peft", false)
	ask(longer, "a_peft", true) // the next turn: a_peft's own prefix
	ask(longer, "a_peft+b_peft", true)
	ask(prompt, "none", true)
}
