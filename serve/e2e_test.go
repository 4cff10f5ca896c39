package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/sampler"
)

// TestGreedyMatchesGenerate: the served greedy text (chat non-stream and
// stream, completions non-stream and stream) equals the library's Generate output for the same prompt.
func TestGreedyMatchesGenerate(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	msgs := []map[string]string{{"role": "user", "content": "Call me Ishmael."}}
	want, st := d.direct(t, d.chatPrompt(t, msgs), 40, sampler.Params{})
	if want == "" {
		t.Fatal("direct generation produced nothing")
	}
	req := map[string]any{"model": "mlxgo-demo", "messages": msgs, "max_tokens": 40, "temperature": 0}
	code, out := post(t, hs.URL+"/v1/chat/completions", req)
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	if got := ch["message"].(map[string]any)["content"]; got != want {
		t.Errorf("chat content %q, want %q", got, want)
	}
	u := out["usage"].(map[string]any)
	if int(u["completion_tokens"].(float64)) != st.GeneratedTokens || int(u["prompt_tokens"].(float64)) != st.PromptTokens {
		t.Errorf("usage %v, want %d prompt / %d completion", u, st.PromptTokens, st.GeneratedTokens)
	}
	got, evs := streamChat(t, hs.URL, req)
	if got != want {
		t.Errorf("streamed %q, want %q", got, want)
	}
	if len(evs) < 3 || evs[len(evs)-1] != "[DONE]" || !strings.Contains(evs[0], `"role":"assistant"`) {
		t.Errorf("stream framing: first %q last %q", evs[0], evs[len(evs)-1])
	}

	// A server without a prompt cache: a cache hit computes the prompt in
	// other chunks, which changes bf16 rounding (Generate itself differs
	// with the chunk size).
	cfg := d.config()
	cfg.PromptCacheBytes = -1
	_, hs2 := startServer(t, cfg)
	prompt := "The whale"
	wantC, stC := d.direct(t, toI32(d.tok.Encode(prompt, true)), 20, sampler.Params{})
	creq := map[string]any{"prompt": prompt, "max_tokens": 20, "temperature": 0}
	code, out = post(t, hs2.URL+"/v1/completions", creq)
	if code != 200 {
		t.Fatalf("completions status %d: %v", code, out)
	}
	if got := out["choices"].([]any)[0].(map[string]any)["text"]; got != wantC {
		t.Errorf("completion %q, want %q", got, wantC)
	}
	// Streamed, with the usage chunk: the same text, then usage, then [DONE].
	creq["stream"], creq["stream_options"] = true, map[string]any{"include_usage": true}
	raw, _ := json.Marshal(creq)
	resp, err := http.Post(hs2.URL+"/v1/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	cevs := sseEvents(t, resp.Body)
	resp.Body.Close()
	var text strings.Builder
	var usage map[string]any
	for _, e := range cevs {
		if e == "[DONE]" {
			continue
		}
		var c struct {
			Object  string `json:"object"`
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage map[string]any `json:"usage"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil || c.Object != "text_completion" {
			t.Fatalf("bad completion chunk %q: %v", e, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if text.String() != wantC {
		t.Errorf("streamed completion %q, want %q", text.String(), wantC)
	}
	if len(cevs) < 3 || cevs[len(cevs)-1] != "[DONE]" || usage == nil || int(usage["completion_tokens"].(float64)) != stC.GeneratedTokens {
		t.Errorf("completion stream framing: usage %v, last %q", usage, cevs[len(cevs)-1])
	}
}

// TestToolRoundTripScripted drives a tool call, its result and the final
// answer, and a reasoning reply, through the chat endpoint.
func TestToolRoundTripScripted(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, scriptedConfig(t, d))
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}}
	msgs := []any{map[string]any{"role": "user", "content": "What is the weather in Paris?"}}
	code, out := post(t, hs.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "tools": tools})
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	msg := ch["message"].(map[string]any)
	if ch["finish_reason"] != "tool_calls" || msg["content"] != nil {
		t.Fatalf("want a tool call, got %v", ch)
	}
	call := msg["tool_calls"].([]any)[0].(map[string]any)
	fn := call["function"].(map[string]any)
	if fn["name"] != "get_weather" || fn["arguments"] != `{"city":"Paris"}` {
		t.Errorf("call %v", call)
	}
	msgs = append(msgs, msg, map[string]any{"role": "tool", "tool_call_id": call["id"], "content": "sunny"})
	code, out = post(t, hs.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "tools": tools})
	if code != 200 {
		t.Fatalf("status %d: %v", code, out)
	}
	ch = out["choices"].([]any)[0].(map[string]any)
	if got := ch["message"].(map[string]any)["content"]; got != "It is sunny in Paris." || ch["finish_reason"] != "stop" {
		t.Errorf("after the tool result: %v", ch)
	}
	if c := out["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); c == 0 {
		t.Errorf("the second turn reused no cached tokens")
	}

	// Streamed: the call arrives as one tool_calls delta.
	_, evs := streamChat(t, hs.URL, map[string]any{"messages": msgs[:1], "tools": tools})
	var calls, finish string
	for _, e := range evs {
		if e == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta        json.RawMessage `json:"delta"`
				FinishReason *string         `json:"finish_reason"`
			} `json:"choices"`
		}
		_ = json.Unmarshal([]byte(e), &c)
		if len(c.Choices) == 0 {
			continue
		}
		if strings.Contains(string(c.Choices[0].Delta), "tool_calls") {
			calls += string(c.Choices[0].Delta)
		}
		if c.Choices[0].FinishReason != nil {
			finish = *c.Choices[0].FinishReason
		}
	}
	if !strings.Contains(calls, `"name":"get_weather"`) || finish != "tool_calls" {
		t.Errorf("streamed tool call %q, finish %q", calls, finish)
	}

	code, out = post(t, hs.URL+"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Please think."}}})
	msg = out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if code != 200 || msg["content"] != "Forty-two." || msg["reasoning_content"] != "Let me ponder." {
		t.Errorf("reasoning reply: %d %v", code, msg)
	}
}
