package serve

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestZodSchemas compiles, through the server's grammar compiler, every
// schema that zod-to-json-schema (draft-07 and OpenAPI 3 targets), zod 4's
// z.toJSONSchema and the OpenAI SDK's zodResponseFormat emit for the
// common zod types (testdata/schemas.cjs), then constrains the demo model
// with a few of them end to end.
func TestZodSchemas(t *testing.T) {
	dir, why := sdkDir(t)
	if dir == "" {
		t.Skip("skipping the zod schema corpus: " + why)
	}
	script, _ := filepath.Abs("testdata/schemas.cjs")
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"))
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var schemas map[string]json.RawMessage
	if err := json.Unmarshal(raw, &schemas); err != nil {
		t.Fatal(err)
	}
	d := loadDemo(t)
	s, hs := startServer(t, d.config())
	c, err := s.compiler()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(schemas))
	for n := range schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	compiled := 0
	for _, n := range names {
		var probe struct {
			Err string `json:"__error"`
		}
		_ = json.Unmarshal(schemas[n], &probe)
		if probe.Err != "" { // the client itself refuses this type (zodResponseFormat's strict mode)
			t.Logf("%s: refused by the client: %.80s", n, probe.Err)
			continue
		}
		if _, err := c.JSONSchema(string(schemas[n]), compactJSON); err != nil {
			t.Errorf("%s: %v\n%s", n, err, schemas[n])
			continue
		}
		compiled++
	}
	if compiled < 40 {
		t.Errorf("only %d schemas compiled", compiled)
	}
	for _, n := range []string{"zod4/bounds", "zodResponseFormat/enums", "zod-to-json-schema/primitives"} {
		sch, ok := schemas[n]
		if !ok {
			t.Errorf("no schema %s", n)
			continue
		}
		code, out := post(t, hs.URL+"/v1/chat/completions", map[string]any{
			"messages": []any{map[string]any{"role": "user", "content": "Answer in JSON."}}, "max_tokens": 200, "temperature": 0,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "r", "schema": sch, "strict": true}}})
		if code != 200 {
			t.Errorf("%s: %d %v", n, code, out)
			continue
		}
		ch := out["choices"].([]any)[0].(map[string]any)
		text := ch["message"].(map[string]any)["content"].(string)
		if ch["finish_reason"] == "stop" && !json.Valid([]byte(text)) {
			t.Errorf("%s: finished output %q is not JSON", n, text)
		}
		if !strings.HasPrefix(text, "{") {
			t.Errorf("%s: output %q does not start an object", n, text)
		}
	}
}
