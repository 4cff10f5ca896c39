package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
)

// TestSpeculationBothLanes: a server decoding speculatively by prompt
// lookup, on the serial lane and on the batched one (rows drafting and
// verifying in the shared passes), answers a greedy chat request with
// exactly the plain server's text, and reports the statistics in
// usage.speculation: OpenAI's response and streaming usage chunk,
// Anthropic's message and its streaming message_delta, the Responses
// API's response.
func TestSpeculationBothLanes(t *testing.T) {
	d := loadDemo(t)
	plain := d.config()
	plain.Batch = 1
	_, hsPlain := startServer(t, plain)
	body := func() map[string]any {
		return map[string]any{"messages": []any{map[string]any{"role": "user",
			"content": "Repeat after me, three times: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog."}},
			"max_tokens": 40, "temperature": 0}
	}
	status, want := post(t, hsPlain.URL+"/v1/chat/completions", body())
	if status != 200 {
		t.Fatalf("plain: %d %v", status, want)
	}
	wantText := want["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	for _, batch := range []int{1, 4} {
		cfg := d.config()
		cfg.Batch = batch
		cfg.Speculation = &generate.Speculation{Lookup: true, NumDraft: 4}
		_, hs := startServer(t, cfg)
		status, got := post(t, hs.URL+"/v1/chat/completions", body())
		if status != 200 {
			t.Fatalf("batch %d: %d %v", batch, status, got)
		}
		text := got["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
		if text != wantText {
			t.Errorf("batch %d: speculative %q, plain %q", batch, text, wantText)
		}
		u := got["usage"].(map[string]any)
		checkSpecUsage(t, "openai", batch, u)
		// streaming, with the usage chunk
		b := body()
		b["stream_options"] = map[string]any{"include_usage": true}
		stext, evs := streamChat(t, hs.URL, b)
		if stext != wantText {
			t.Errorf("batch %d stream: %q, plain %q", batch, stext, wantText)
		}
		var last map[string]any
		for _, e := range evs {
			if e != "[DONE]" && strings.Contains(e, `"usage"`) {
				if err := json.Unmarshal([]byte(e), &last); err != nil {
					t.Fatal(err)
				}
			}
		}
		if last == nil {
			t.Fatalf("batch %d: no usage chunk in %d events", batch, len(evs))
		}
		checkSpecUsage(t, "openai stream", batch, last["usage"].(map[string]any))
		// Anthropic
		ab := map[string]any{"model": cfg.ModelID, "max_tokens": 40, "temperature": 0, "messages": body()["messages"]}
		status, am := post(t, hs.URL+"/v1/messages", ab)
		if status != 200 {
			t.Fatalf("batch %d messages: %d %v", batch, status, am)
		}
		checkSpecUsage(t, "anthropic", batch, am["usage"].(map[string]any))
		ab["stream"] = true
		raw, _ := json.Marshal(ab)
		resp, err := http.Post(hs.URL+"/v1/messages", "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		var delta map[string]any
		for _, e := range sseEvents(t, resp.Body) {
			var ev map[string]any
			if json.Unmarshal([]byte(e), &ev) == nil && ev["type"] == "message_delta" {
				delta = ev
			}
		}
		resp.Body.Close()
		if delta == nil {
			t.Fatalf("batch %d: no message_delta", batch)
		}
		checkSpecUsage(t, "anthropic stream", batch, delta["usage"].(map[string]any))
		// OpenAI Responses
		status, rr := post(t, hs.URL+"/v1/responses", map[string]any{"input": body()["messages"], "max_output_tokens": 40, "temperature": 0})
		if status != 200 {
			t.Fatalf("batch %d responses: %d %v", batch, status, rr)
		}
		checkSpecUsage(t, "responses", batch, rr["usage"].(map[string]any))
	}
}

// checkSpecUsage checks usage.speculation of a response: drafts proposed
// and accepted, counts that add up.
func checkSpecUsage(t *testing.T, api string, batch int, u map[string]any) {
	t.Helper()
	sp, ok := u["speculation"].(map[string]any)
	if !ok {
		t.Errorf("%s batch %d: no usage.speculation in %v", api, batch, u)
		return
	}
	num := func(k string) float64 { v, _ := sp[k].(float64); return v }
	if num("drafted") == 0 || num("accepted") == 0 || num("targetCalls") == 0 || num("drafted") != num("accepted")+num("rejected") {
		t.Errorf("%s batch %d: speculation %v", api, batch, sp)
	}
	for _, k := range []string{"acceptanceLengths", "draftedByPos", "acceptedByPos", "tokensPerForward", "forwardsSaved", "rounds"} {
		if _, ok := sp[k]; !ok {
			t.Errorf("%s batch %d: speculation lacks %s", api, batch, k)
		}
	}
}
