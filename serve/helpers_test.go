package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// demoModel is the embedded demo model (a small Gemma 4 with its own
// tokenizer and chat template), loaded once for all tests.
type demoModel struct {
	dir  string
	m    model.Model
	gm   generate.Model
	tok  *tokenizer.Tokenizer
	tmpl *tokenizer.ChatTemplate
	eos  []int32
}

var (
	demoOnce sync.Once
	demoVal  *demoModel
	demoErr  error
)

func loadDemo(t testing.TB) *demoModel {
	t.Helper()
	demoOnce.Do(func() {
		d := &demoModel{}
		if d.dir, demoErr = demo.Path(); demoErr != nil {
			return
		}
		if d.m, demoErr = model.Load(d.dir, nil); demoErr != nil {
			return
		}
		d.gm = generate.Wrap(d.m, d.m.Info().Vocab)
		if d.tok, demoErr = tokenizer.Load(d.dir); demoErr != nil {
			return
		}
		if d.tmpl, demoErr = d.tok.ChatTemplate(""); demoErr != nil {
			return
		}
		for _, id := range append(slices.Clone(d.m.Info().EOS), d.tok.Config.EOSTokenIDs...) {
			if !slices.Contains(d.eos, int32(id)) {
				d.eos = append(d.eos, int32(id))
			}
		}
		demoVal = d
	})
	if demoErr != nil {
		t.Fatal(demoErr)
	}
	return demoVal
}

// demoConfig is the server configuration `mlxgo serve` builds for the
// demo model.
func (d *demoModel) config() Config {
	return Config{Model: d.gm, ModelID: demo.Name, Tokenizer: d.tok, Template: d.tmpl, EOS: d.eos,
		ContextLength: 4096, SnapshotPrompt: d.m.Info().SlidingWindow > 0, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// startServer serves cfg on a loopback port for the test's duration.
func startServer(t testing.TB, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		srv.Close()
	})
	return srv, hs
}

// chatPrompt renders one user message with the demo template and encodes
// it as the server does (BOS only when the template did not write it).
func (d *demoModel) chatPrompt(t testing.TB, msgs []map[string]string) []int32 {
	t.Helper()
	text, err := d.tmpl.Render(tokenizer.ChatRequest{Messages: msgs, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	bos := d.tok.Config.SpecialTokens["bos_token"]
	return toI32(d.tok.Encode(text, bos == "" || !strings.HasPrefix(text, bos)))
}

func toI32(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

// direct runs the library's Generate greedily and returns the decoded
// text (special tokens kept, as the server decodes them) and the stats.
func (d *demoModel) direct(t testing.TB, prompt []int32, maxTokens int, params sampler.Params) (string, generate.Stats) {
	t.Helper()
	s, err := generate.Generate(context.Background(), d.gm, prompt, &generate.Options{MaxTokens: maxTokens, EOS: d.eos, Sampler: params})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ids []int
	for tok, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, int(tok.ID))
	}
	return d.tok.Decode(ids, false), s.Stats()
}

// post sends a JSON body and returns the status and decoded body.
func post(t testing.TB, url string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	resp, err := http.Post(url, "application/json", rd)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("POST %s: status %d, body not JSON: %q", url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// sseEvents reads an event stream to its end: each data payload, in order.
func sseEvents(t testing.TB, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, data)
		}
	}
	return out
}

// streamChat posts a streaming chat request and concatenates its content
// deltas; it also returns the raw events.
func streamChat(t testing.TB, url string, body map[string]any) (string, []string) {
	t.Helper()
	body["stream"] = true
	raw, _ := json.Marshal(body)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Error(err)
		return "", nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Errorf("stream status %d: %s", resp.StatusCode, b)
		return "", nil
	}
	evs := sseEvents(t, resp.Body)
	var text strings.Builder
	for _, e := range evs {
		if e == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Errorf("bad chunk %q: %v", e, err)
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	return text.String(), evs
}

// scriptedModel is a deterministic stand-in for a model that uses tools:
// it reads the whole conversation (kept in its KV cache as token ids) and
// replies with a fixed script chosen by the last turn, then EOS. It lets
// the tests drive tool-call and reasoning round trips through real
// clients, which a small random or demo model would never produce.
type scriptedModel struct {
	tok    *tokenizer.Tokenizer
	vocab  int
	eos    int32
	marker []int32 // the generation prompt's tokens
}

func newScripted(d *demoModel) *scriptedModel {
	return &scriptedModel{tok: d.tok, vocab: d.tok.VocabSize(), eos: d.eos[0], marker: toI32(d.tok.Encode("<start_of_turn>model\n", false))}
}

// scriptedTemplate renders tools, tool calls (Hermes syntax) and tool
// results, so that the server detects <tool_call> and <think> markers.
const scriptedTemplate = `{{ bos_token }}{% if tools %}<start_of_turn>system
Tools: {{ tools | tojson }}. Call them as <tool_call>{"name": ..., "arguments": ...}</tool_call>; think in <think></think>.<end_of_turn>
{% endif %}{% for m in messages %}<start_of_turn>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif %}{% if m.tool_calls %}{% for tc in m.tool_calls %}<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}</tool_call>{% endfor %}{% endif %}<end_of_turn>
{% endfor %}{% if add_generation_prompt %}<start_of_turn>model
{% endif %}`

func (s *scriptedModel) script(history []int32) []int32 {
	at := -1
	for i := len(history) - len(s.marker); i >= 0; i-- {
		if slices.Equal(history[i:i+len(s.marker)], s.marker) {
			at = i
			break
		}
	}
	if at < 0 {
		return toI32(s.tok.Encode("No turn.", false))
	}
	ids := make([]int, at)
	for i := range at {
		ids[i] = int(history[i])
	}
	before := s.tok.Decode(ids, false)
	last := before[strings.LastIndex(before, "<start_of_turn>")+1:]
	var reply string
	switch {
	case strings.HasPrefix(last, "start_of_turn>tool"):
		reply = "It is sunny in Paris."
	case strings.Contains(last, "weather"):
		reply = `<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>`
	case strings.Contains(last, "think"):
		reply = "<think>Let me ponder.</think>Forty-two."
	default:
		reply = "Hello there."
	}
	return toI32(s.tok.Encode(reply, false))
}

// Forward records ids in the cache and returns, per position, the id of
// the token the script wants next (as a float "hidden state").
func (s *scriptedModel) Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error) {
	in := ids.Int32s()
	keys := make([]float32, len(in))
	for i, v := range in {
		keys[i] = float32(v)
	}
	k := tensor.FromFloat32(keys, []int{1, 1, len(in), 1}, tensor.Float32)
	got := caches[0].UpdateAndFetch(k, k)
	k.Free()
	keysHeld := got.Keys
	if got.Paged != nil { // the batched lane's pool
		parts := got.Paged.Gather()
		defer tensor.Free(parts...)
		keysHeld = parts[0]
	}
	hist := keysHeld.Float32s()
	history := make([]int32, len(hist))
	for i, v := range hist {
		history[i] = int32(v)
	}
	want := s.script(history)
	// How many script tokens are already in the history after the marker.
	n := 0
	for i := len(history) - len(s.marker); i >= 0; i-- {
		if slices.Equal(history[i:i+len(s.marker)], s.marker) {
			n = len(history) - (i + len(s.marker))
			break
		}
	}
	next := s.eos
	if n < len(want) {
		next = want[n]
	}
	h := make([]float32, len(in))
	for i := range h {
		h[i] = float32(next)
	}
	return tensor.FromFloat32(h, []int{1, len(in), 1}, tensor.Float32), nil
}

// Logits turns each "hidden state" id into a one-hot row.
func (s *scriptedModel) Logits(h *tensor.Array) (*tensor.Array, error) {
	v := h.Float32s()
	out := make([]float32, len(v)*s.vocab)
	for i, id := range v {
		out[i*s.vocab+int(id)] = 30
	}
	return tensor.FromFloat32(out, []int{1, len(v), s.vocab}, tensor.Float32), nil
}

// MakeCaches returns the one cache that holds the token history.
func (s *scriptedModel) MakeCaches() []kv.Cache { return []kv.Cache{kv.NewKVCache()} }

// VocabSize is the tokenizer's.
func (s *scriptedModel) VocabSize() int { return s.vocab }

// scriptedConfig serves the scripted model with the tool-aware template.
func scriptedConfig(t testing.TB, d *demoModel) Config {
	t.Helper()
	tmpl, err := tokenizer.CompileChatTemplate(scriptedTemplate, d.tok.Config.SpecialTokens, d.tok.Config.AdditionalSpecialTokens)
	if err != nil {
		t.Fatal(err)
	}
	cfg := d.config()
	cfg.Model, cfg.ModelID, cfg.Template, cfg.SnapshotPrompt = newScripted(d), "scripted", tmpl, false
	return cfg
}
