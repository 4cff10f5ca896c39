package serve

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/sampler"
)

// TestClientLibraries drives the demo and scripted servers with LangChain
// (OpenAI and Anthropic chat models), the Vercel AI SDK over
// @ai-sdk/openai-compatible and the OpenAI SDK's zodResponseFormat:
// chat, streaming, structured output through each library's idiomatic
// helper (withStructuredOutput, generateObject, streamObject,
// chat.completions.parse), and tool_choice required honoured.
func TestClientLibraries(t *testing.T) {
	dir, why := sdkDir(t)
	if dir == "" {
		t.Skip("skipping the client library test: " + why)
	}
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	_, hsScripted := startServer(t, scriptedConfig(t, d))
	want, _ := d.direct(t, d.chatPrompt(t, []map[string]string{{"role": "user", "content": "Call me Ishmael."}}), 16, sampler.Params{})

	script, _ := filepath.Abs("testdata/clients.cjs")
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"), "BASE_URL="+hs.URL, "SCRIPTED_URL="+hsScripted.URL)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil || len(raw) == 0 {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	t.Logf("node output: %s", raw)
	var out map[string]json.RawMessage
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("node output %q: %v", raw, err)
	}
	text := func(k string) string {
		var s string
		if err := json.Unmarshal(out[k], &s); err != nil {
			t.Errorf("%s: %s", k, out[k])
		}
		return s
	}
	for _, k := range []string{"lcChat", "lcStream", "laChat", "laStream", "aiText", "aiStream"} {
		if got := text(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"openaiParse", "lcStructured", "aiObject", "aiStreamObject"} {
		var v struct {
			OK    *bool    `json:"ok"`
			Count *float64 `json:"count"`
			Error string   `json:"error"`
		}
		if err := json.Unmarshal(out[k], &v); err != nil || v.OK == nil || v.Count == nil || v.Error != "" {
			t.Errorf("%s: structured output %s", k, out[k])
		}
	}
	for _, k := range []string{"lcToolRequired", "aiToolRequired"} {
		var calls []struct {
			Name string
			Args map[string]any
		}
		if err := json.Unmarshal(out[k], &calls); err != nil || len(calls) == 0 {
			t.Errorf("%s: %s", k, out[k])
			continue
		}
		for _, c := range calls {
			if c.Name != "get_weather" || !reflect.DeepEqual(len(c.Args), 1) || (c.Args["city"] != "Paris" && c.Args["city"] != "Rome") {
				t.Errorf("%s: call %+v", k, c)
			}
		}
	}
	vecs, _ := embeddings(t, hs.URL, map[string]any{"input": []string{"Call me Ishmael.", "The whale"}})
	var one []float64
	var many [][]float64
	if json.Unmarshal(out["aiEmbed"], &one) != nil || !reflect.DeepEqual(toF32(one), vecs[1]) {
		t.Errorf("aiEmbed: %.80s", out["aiEmbed"])
	}
	if json.Unmarshal(out["aiEmbedMany"], &many) != nil || len(many) != 2 || !reflect.DeepEqual([][]float32{toF32(many[0]), toF32(many[1])}, vecs) {
		t.Errorf("aiEmbedMany: %.80s", out["aiEmbedMany"])
	}
	if strings.Contains(string(raw), `"error"`) {
		t.Errorf("a client step failed: %s", raw)
	}
}
