package serve

import (
	"encoding/json"
	"github.com/mlxgo/mlxgo/kv"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/sampler"
)

// npmPackages are the Node packages the client tests use: the official
// OpenAI and Anthropic SDKs, LangChain's two chat models, the Vercel AI
// SDK with its OpenAI-compatible provider, and zod with
// zod-to-json-schema for the schema corpus.
var npmPackages = []string{"openai", "@anthropic-ai/sdk", "zod", "zod-to-json-schema", "@langchain/core",
	"@langchain/openai", "@langchain/anthropic", "ai", "@ai-sdk/openai-compatible"}

// sdkDir installs npmPackages once into <repo>/.cache/npm-sdk; "" (with a
// reason) when node or npm is missing or the install fails.
func sdkDir(t *testing.T) (string, string) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", "node not found"
	}
	root, _ := filepath.Abs("..")
	dir := filepath.Join(root, ".cache", "npm-sdk")
	ready := func() bool {
		for _, p := range npmPackages {
			if _, err := os.Stat(filepath.Join(dir, "node_modules", p, "package.json")); err != nil {
				return false
			}
		}
		return true
	}
	if ready() {
		return dir, ""
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", "npm not found"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err.Error()
	}
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		_ = os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"mlxgo-sdk-test","private":true}`), 0o644)
	}
	cmd := exec.Command(npm, append([]string{"install", "--no-audit", "--no-fund"}, npmPackages...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || !ready() {
		return "", "npm install failed: " + lastLine(string(out))
	}
	return dir, ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestOfficialSDKs drives both servers (demo model, scripted tool model)
// with the official OpenAI and Anthropic Node SDKs.
func TestOfficialSDKs(t *testing.T) {
	dir, why := sdkDir(t)
	if dir == "" {
		t.Skip("skipping the Node SDK test: " + why)
	}
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	_, hsScripted := startServer(t, scriptedConfig(t, d))
	const prompt = "Call me Ishmael."
	msgs := []map[string]string{{"role": "user", "content": prompt}}
	want, st := d.direct(t, d.chatPrompt(t, msgs), 24, sampler.Params{})
	wantC, _ := d.direct(t, toI32(d.tok.Encode("The whale", true)), 16, sampler.Params{})
	if len(want) < 12 {
		t.Fatalf("greedy text too short for the stop test: %q", want)
	}
	stop := want[8:11]
	wantStop := want[:strings.Index(want, stop)]

	script, _ := filepath.Abs("testdata/sdk.cjs")
	cmd := exec.Command("node", script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "node_modules"), "BASE_URL="+hs.URL,
		"SCRIPTED_URL="+hsScripted.URL, "PROMPT="+prompt, "STOP="+stop)
	raw, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("node: %v\n%s", err, stderr)
	}
	var out struct {
		Chat struct {
			Text, Finish string
			Usage        map[string]any
		}
		Stream struct {
			Text, Finish string
			Roles        []string
			Usage        map[string]any
			Chunks       int
		}
		Turn2      map[string]any
		Completion struct {
			Text   string
			Tokens []string
			Top    []int
		}
		Stop       struct{ Text, Finish string }
		StopStream string
		Logprobs   []struct {
			Token             string
			Logprob, TopFirst float64
			Top               int
		}
		Models []string
		Tool1  struct {
			Finish, Name string
			Args         map[string]any
		}
		Tool2 struct {
			Text   string
			Cached int
		}
		ToolStream struct {
			Names  []string
			Finish string
		}
		Reasoning struct{ Content, Reasoning string }
		Anthropic struct {
			Text, Stop string
			Usage      map[string]any
		}
		AnthropicStream struct{ Text, Deltas, Stop string }
		Anth1           struct {
			Stop, Name string
			Input      map[string]any
		}
		Anth2          struct{ Text, Stop string }
		AnthStreamTool struct {
			Stop, Name string
			Input      map[string]any
		}
		BadRequest map[string]any
		N2         []int
		Turn2Text  string
		Responses  struct {
			Text, Status string
			Usage        map[string]any
		}
		ResponsesStream struct {
			Text, Deltas, First, Last string
			Events                    int
		}
		ResponsesChain struct {
			Text   string
			Prev   bool
			Cached float64
		}
		ResponsesGet     string
		ResponsesMissing map[string]any
		ResponsesTool    struct {
			Name, Text string
			Args       map[string]any
		}
		Embeddings struct {
			Base64 [][]float64
			Float  []float64
			Tokens int
		}
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("node output %q: %v", raw, err)
	}
	t.Logf("node output: %s", raw)
	check := func(what string, got, want any) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %#v, want %#v", what, got, want)
		}
	}
	check("chat text", out.Chat.Text, want)
	check("chat completion tokens", out.Chat.Usage["completion_tokens"], float64(st.GeneratedTokens))
	check("stream text", out.Stream.Text, want)
	check("stream roles", out.Stream.Roles, []string{"assistant"})
	check("stream finish", out.Stream.Finish, out.Chat.Finish)
	check("stream usage prompt", out.Stream.Usage["prompt_tokens"], float64(st.PromptTokens))
	// the batched lane's prefix cache reuses whole KV blocks
	if c, bs := out.Stream.Usage["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64), kv.DefaultBlockSize; c < float64((st.PromptTokens-1)/bs*bs) {
		t.Errorf("the repeated prompt reused %v cached tokens of %d", c, st.PromptTokens)
	}
	if c := out.Turn2["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64); c < float64(st.PromptTokens) {
		t.Errorf("turn 2 reused %v cached tokens; the first turn's prompt has %d", c, st.PromptTokens)
	}
	check("completion", out.Completion.Text, wantC)
	check("completion logprob tokens", strings.Join(out.Completion.Tokens, ""), wantC)
	for _, n := range out.Completion.Top {
		check("completion top count", n >= 1 && n <= 2, true)
	}
	check("stop", out.Stop, struct{ Text, Finish string }{wantStop, "stop"})
	check("stop streamed", out.StopStream, wantStop)
	check("logprobs count", len(out.Logprobs), 5)
	for _, l := range out.Logprobs {
		if l.Top != 3 || l.Logprob > 0 || l.TopFirst < l.Logprob-1e-4 {
			t.Errorf("logprob entry %+v", l)
		}
	}
	check("models", out.Models, []string{"mlxgo-demo"})
	check("tool call", out.Tool1.Name+"/"+out.Tool1.Finish, "get_weather/tool_calls")
	check("tool args", out.Tool1.Args, map[string]any{"city": "Paris"})
	check("tool answer", out.Tool2.Text, "It is sunny in Paris.")
	if out.Tool2.Cached == 0 {
		t.Error("the tool-result turn reused no cached tokens")
	}
	check("streamed tool call", out.ToolStream, struct {
		Names  []string
		Finish string
	}{[]string{"get_weather"}, "tool_calls"})
	check("reasoning", out.Reasoning, struct{ Content, Reasoning string }{"Forty-two.", "Let me ponder."})
	check("anthropic text", out.Anthropic.Text, want)
	check("anthropic stream", out.AnthropicStream.Text+"|"+out.AnthropicStream.Deltas, want+"|"+want)
	check("anthropic tool_use", out.Anth1.Stop+"/"+out.Anth1.Name, "tool_use/get_weather")
	check("anthropic tool input", out.Anth1.Input, map[string]any{"city": "Paris"})
	check("anthropic tool answer", out.Anth2, struct{ Text, Stop string }{"It is sunny in Paris.", "end_turn"})
	check("anthropic streamed tool_use", out.AnthStreamTool.Name+"/"+out.AnthStreamTool.Stop, "get_weather/tool_use")
	check("anthropic streamed tool input", out.AnthStreamTool.Input, map[string]any{"city": "Paris"})
	check("n=2 choices", out.N2, []int{0, 1})
	check("temperature 3 rejected", out.BadRequest, map[string]any{"status": float64(400), "param": "temperature"})

	status := "completed"
	if st.StopReason == generate.StopLength {
		status = "incomplete"
	}
	check("responses text", out.Responses.Text, want)
	check("responses status", out.Responses.Status, status)
	check("responses usage", []any{out.Responses.Usage["input_tokens"], out.Responses.Usage["output_tokens"]}, []any{float64(st.PromptTokens), float64(st.GeneratedTokens)})
	check("responses stream", []string{out.ResponsesStream.Text, out.ResponsesStream.Deltas, out.ResponsesStream.First, out.ResponsesStream.Last},
		[]string{want, want, "response.created", "response." + status})
	check("responses chained text", out.ResponsesChain.Text, out.Turn2Text)
	if !out.ResponsesChain.Prev || out.ResponsesChain.Cached == 0 {
		t.Errorf("chained response %+v", out.ResponsesChain)
	}
	check("responses retrieved", out.ResponsesGet, want)
	check("responses unknown previous", out.ResponsesMissing, map[string]any{"status": float64(404), "param": "previous_response_id"})
	check("responses tool call", out.ResponsesTool, struct {
		Name, Text string
		Args       map[string]any
	}{"get_weather", "It is sunny in Paris.", map[string]any{"city": "Paris"}})
	vecs, tokens := embeddings(t, hs.URL, map[string]any{"input": []string{prompt, "The whale"}})
	check("embeddings tokens", out.Embeddings.Tokens, tokens)
	if len(out.Embeddings.Base64) != 2 {
		t.Fatalf("embeddings.create returned %d vectors for 2 inputs", len(out.Embeddings.Base64))
	}
	check("embeddings float", toF32(out.Embeddings.Float), vecs[0])
	check("embeddings base64", [][]float32{toF32(out.Embeddings.Base64[0]), toF32(out.Embeddings.Base64[1])}, vecs)
}

// toF32 rounds a client's numbers to float32: the wire's float32 values,
// printed shortest (JSON) or decoded exactly (base64), round back exactly.
func toF32(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
