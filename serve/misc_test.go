package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestResponseFormatJSON: json_schema constrains the demo model's output
// to the schema (checked by parsing it).
func TestResponseFormatJSON(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	schema := map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}, "additionalProperties": false}
	code, out := post(t, hs.URL+"/v1/chat/completions", map[string]any{
		"messages": []any{map[string]any{"role": "user", "content": "Answer in JSON."}}, "max_tokens": 40, "temperature": 0,
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "r", "schema": schema, "strict": true}}})
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	text := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
	var v struct {
		OK *bool `json:"ok"`
	}
	if err := json.Unmarshal([]byte(text), &v); err != nil || v.OK == nil {
		t.Errorf("constrained output %q is not the schema's JSON: %v", text, err)
	}
}

// panicky panics inside Forward when the prompt holds a marker token.
type panicky struct{ *scriptedModel }

func (p panicky) Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error) {
	if ids.Dim(1) > 1 {
		panic("boom")
	}
	return p.scriptedModel.Forward(ids, caches)
}

// TestPanicRecovered: a panic in a generation fails that request with a
// 500 and leaves the server serving.
func TestPanicRecovered(t *testing.T) {
	d := loadDemo(t)
	cfg := scriptedConfig(t, d)
	cfg.Model = panicky{newScripted(d)}
	_, hs := startServer(t, cfg)
	code, out := post(t, hs.URL+"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hello"}}})
	if code != 500 || !strings.Contains(out["error"].(map[string]any)["message"].(string), "boom") {
		t.Errorf("panicking generation: %d %v", code, out)
	}
	code, out = post(t, hs.URL+"/v1/completions", map[string]any{"prompt": []int{2}, "max_tokens": 3})
	if code != 200 || out["choices"].([]any)[0].(map[string]any)["text"] == "" {
		t.Errorf("after the panic: %d %v", code, out)
	}
	resp, err := http.Get(hs.URL + "/stats")
	if err != nil || resp.StatusCode != 200 {
		t.Fatal(err)
	}
	var st Stats
	_ = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if st.Errors != 1 || st.Completed != 1 {
		t.Errorf("stats %+v", st)
	}
}
