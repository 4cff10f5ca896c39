package serve

import (
	"encoding/json"
	"net/http"
	"regexp"
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

// TestStructuredOutputs: the vLLM-style constraints bind the demo model's
// output (regex, choice, grammar, json), and the compile cache serves a
// repeated constraint.
func TestStructuredOutputs(t *testing.T) {
	d := loadDemo(t)
	s, hs := startServer(t, d.config())
	cases := []struct {
		so    map[string]any
		check func(string) bool
	}{
		{map[string]any{"regex": "(yes|no), because [a-z]+"}, func(x string) bool {
			return regexp.MustCompile(`^(yes|no), because [a-z]+$`).MatchString(x)
		}},
		{map[string]any{"choice": []string{"red whale", "white whale", "grey whale"}}, func(x string) bool {
			return x == "red whale" || x == "white whale" || x == "grey whale"
		}},
		{map[string]any{"grammar": `root ::= "Call me " name "."` + "\n" + `name ::= [A-Z] [a-z]+`}, func(x string) bool {
			return regexp.MustCompile(`^Call me [A-Z][a-z]+\.$`).MatchString(x)
		}},
		{map[string]any{"json": map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer", "minimum": 0, "maximum": 999}}, "required": []string{"n"}, "additionalProperties": false}}, func(x string) bool {
			var v struct{ N *int }
			return json.Unmarshal([]byte(x), &v) == nil && v.N != nil
		}},
	}
	for i, c := range cases {
		for rep := 0; rep < 2; rep++ {
			code, out := post(t, hs.URL+"/v1/chat/completions", map[string]any{
				"messages": []any{map[string]any{"role": "user", "content": "Tell me about the whale."}}, "max_tokens": 48, "temperature": 0,
				"structured_outputs": c.so})
			if code != 200 {
				t.Fatalf("case %d: %d %v", i, code, out)
			}
			text := out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
			if !c.check(text) {
				t.Errorf("case %d: output %q violates %v", i, text, c.so)
			}
		}
	}
	if n := s.gram.compiler.Len(); n != len(cases) {
		t.Errorf("compile cache holds %d grammars after %d distinct constraints sent twice each", n, len(cases))
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
