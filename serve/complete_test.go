package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/sampler"
)

// TestCompleteness: n > 1, prompt lists, echo, suffix without FIM
// tokens, refused members, the models list in both APIs' shapes and with
// aliases, /v1/models/{id}, count_tokens, system_fingerprint and
// x-request-id.
func TestCompleteness(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.Aliases = []string{"gpt-4o-mini"}
	cfg.PromptCacheBytes = -1 // every choice prefills alike
	_, hs := startServer(t, cfg)
	msgs := []map[string]string{{"role": "user", "content": "Call me Ishmael."}}
	want, st := d.direct(t, d.chatPrompt(t, msgs), 6, sampler.Params{})

	code, out := post(t, hs.URL+"/v1/chat/completions", map[string]any{"model": "gpt-4o-mini", "messages": msgs, "max_tokens": 6, "temperature": 0, "n": 3})
	if code != 200 {
		t.Fatalf("n=3: %d %v", code, out)
	}
	chs := out["choices"].([]any)
	if len(chs) != 3 {
		t.Fatalf("n=3 gave %d choices", len(chs))
	}
	for i, c := range chs {
		ch := c.(map[string]any)
		if int(ch["index"].(float64)) != i || ch["message"].(map[string]any)["content"] != want {
			t.Errorf("choice %d: %v, want %q", i, ch, want)
		}
	}
	u := out["usage"].(map[string]any)
	if u["completion_tokens"].(float64) != float64(3*st.GeneratedTokens) || u["prompt_tokens"].(float64) != float64(st.PromptTokens) {
		t.Errorf("usage %v", u)
	}
	if fp, _ := out["system_fingerprint"].(string); !strings.HasPrefix(fp, "fp_") {
		t.Errorf("system_fingerprint %v", out["system_fingerprint"])
	}

	// Two prompts, n=2, echo: four choices indexed prompt-major, each
	// repeating its prompt.
	code, out = post(t, hs.URL+"/v1/completions", map[string]any{"prompt": []string{"The whale", "Call me"}, "max_tokens": 4, "temperature": 0, "n": 2, "echo": true})
	if code != 200 {
		t.Fatalf("prompt list: %d %v", code, out)
	}
	chs = out["choices"].([]any)
	if len(chs) != 4 {
		t.Fatalf("2 prompts × n=2 gave %d choices", len(chs))
	}
	for i, c := range chs {
		ch := c.(map[string]any)
		p := []string{"The whale", "Call me"}[i/2]
		if int(ch["index"].(float64)) != i || !strings.HasPrefix(ch["text"].(string), p) || len(ch["text"].(string)) <= len(p) {
			t.Errorf("choice %d: %v", i, ch)
		}
	}

	for _, c := range []struct {
		path, body, param string
	}{
		{"/v1/completions", `{"prompt":"a","suffix":"b"}`, "suffix"},
		{"/v1/completions", `{"prompt":"a","best_of":3}`, "best_of"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"functions":[{"name":"f"}]}`, "functions"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"modalities":["text","audio"]}`, "modalities"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"n":2,"stream":true}`, "n"},
	} {
		code, out := post(t, hs.URL+c.path, c.body)
		e, _ := out["error"].(map[string]any)
		if code != 400 || e["param"] != c.param {
			t.Errorf("%s: %d %v, want 400 naming %s", c.body, code, out, c.param)
		}
	}

	// Models: OpenAI's list, Anthropic's when its client asks.
	code, _, body := do(t, "GET", hs.URL+"/v1/models", "", nil)
	var ol struct {
		Data []struct{ ID, Object string }
	}
	if json.Unmarshal([]byte(body), &ol) != nil || code != 200 || len(ol.Data) != 2 || ol.Data[0].ID != "mlxgo-demo" || ol.Data[1].ID != "gpt-4o-mini" {
		t.Errorf("OpenAI models list: %d %s", code, body)
	}
	code, _, body = do(t, "GET", hs.URL+"/v1/models", "", map[string]string{"anthropic-version": "2023-06-01"})
	var al struct {
		Data []struct {
			Type, ID    string
			DisplayName string `json:"display_name"`
			CreatedAt   string `json:"created_at"`
		}
		HasMore *bool  `json:"has_more"`
		FirstID string `json:"first_id"`
	}
	if json.Unmarshal([]byte(body), &al) != nil || code != 200 || len(al.Data) != 2 || al.Data[0].Type != "model" || al.Data[0].CreatedAt == "" || al.HasMore == nil || al.FirstID != "mlxgo-demo" {
		t.Errorf("Anthropic models list: %d %s", code, body)
	}
	if code, _, body = do(t, "GET", hs.URL+"/v1/models/gpt-4o-mini", "", nil); code != 200 || !strings.Contains(body, `"id":"gpt-4o-mini"`) {
		t.Errorf("models/{alias}: %d %s", code, body)
	}
	if code, _, body = do(t, "GET", hs.URL+"/v1/models/nope", "", map[string]string{"anthropic-version": "2023-06-01"}); code != 404 || errorShape(body) != "anthropic" {
		t.Errorf("Anthropic models/{unknown}: %d %s", code, body)
	}

	// count_tokens agrees with what a message request prefills, and a
	// stream's message_start and message_delta agree on input tokens.
	mb := `{"model":"mlxgo-demo","max_tokens":4,"messages":[{"role":"user","content":"Call me Ishmael."}]}`
	code, out = post(t, hs.URL+"/v1/messages/count_tokens", mb)
	n, _ := out["input_tokens"].(float64)
	if code != 200 || n != float64(len(d.chatPrompt(t, msgs))) {
		t.Errorf("count_tokens: %d %v, want %d", code, out, len(d.chatPrompt(t, msgs)))
	}
	code, out = post(t, hs.URL+"/v1/messages", mb)
	// Anthropic's input_tokens leave out what the prompt cache supplied
	if u, _ := out["usage"].(map[string]any); code != 200 || u["input_tokens"].(float64)+u["cache_read_input_tokens"].(float64) != n {
		t.Errorf("messages usage %v, count_tokens %v", out["usage"], n)
	}
	req, _ := http.NewRequest("POST", hs.URL+"/v1/messages", strings.NewReader(strings.Replace(mb, `"max_tokens":4`, `"max_tokens":4,"stream":true`, 1)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "my-trace-42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("X-Request-Id") != "my-trace-42" {
		t.Errorf("x-request-id echoed as %q", resp.Header.Get("X-Request-Id"))
	}
	var startIn, deltaIn float64 = -1, -2
	for _, e := range sseEvents(t, resp.Body) {
		var ev struct {
			Type    string
			Message struct{ Usage map[string]float64 }
			Usage   map[string]float64
		}
		_ = json.Unmarshal([]byte(e), &ev)
		switch ev.Type {
		case "message_start":
			startIn = ev.Message.Usage["input_tokens"]
		case "message_delta":
			deltaIn = ev.Usage["input_tokens"]
		}
	}
	resp.Body.Close()
	if startIn != deltaIn {
		t.Errorf("message_start input_tokens %v, message_delta %v", startIn, deltaIn)
	}
	if _, h, _ := do(t, "GET", hs.URL+"/health", "", nil); !strings.HasPrefix(h.Get("X-Request-Id"), "req_") {
		t.Errorf("generated x-request-id %q", h.Get("X-Request-Id"))
	}
}
