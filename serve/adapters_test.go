package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// charTokenizer is a tokenizer for the 256-token fixtures: token i is one
// character (itself for newline and printable ASCII, U+0100+i otherwise),
// with no merges, so text and token ids map one to one both ways.
func charTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	for i := range 256 {
		r := rune(0x100 + i)
		if i == '\n' || i >= 32 && i <= 126 {
			r = rune(i)
		}
		vocab[string(r)] = i
	}
	raw, _ := json.Marshal(map[string]any{
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}},
		"decoder": map[string]any{"type": "Fuse"},
	})
	tok, err := tokenizer.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// loraFixture is the llama3 test model with lora's test adapters a_peft
// and b_peft mounted (and a_mlx, the same adapter as a_peft in mlx-lm's
// format, left on disk for POST).
type loraFixture struct {
	m   *lora.Model
	am  *AdapterModel
	tok *tokenizer.Tokenizer
}

// llamaFixture loads the llama3 fixture model (plain, no adapters) for
// the test, closed at its end; the test skips when the fixture is absent.
func llamaFixture(t *testing.T) model.Model {
	t.Helper()
	dir, _ := fixtureDirs()
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Skip("the llama3 fixture model is absent (model/testdata/llama3/f32)")
	}
	lm, err := model.Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lm.Close() })
	return lm
}

func fixtureDirs() (modelDir, adapters string) {
	return filepath.Join("..", "model", "testdata", "llama3", "f32"), filepath.Join("..", "lora", "testdata", "llama3")
}

func openLoraFixture(t *testing.T) *loraFixture {
	t.Helper()
	dir, ad := fixtureDirs()
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Skip("the llama3 fixture model is absent (model/testdata/llama3/f32)")
	}
	m, err := lora.Open(dir, &model.LoadOptions{}, filepath.Join(ad, "a_peft"), filepath.Join(ad, "b_peft"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &loraFixture{m: m, am: NewAdapterModel(m), tok: charTokenizer(t)}
}

// config serves the fixture (no chat template: the plain layout).
func (f *loraFixture) config(batch int) Config {
	return Config{Adapters: f.m, ModelID: "llama3-tiny", Tokenizer: f.tok, EOS: []int32{2}, ContextLength: 128,
		Batch: batch, KVBudgetBytes: 4 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// solo generates prompt alone on the variant model of set (Generate,
// greedy) and returns the tokens' text.
func (f *loraFixture) solo(t *testing.T, prompt string, set []string, maxTokens int) string {
	t.Helper()
	ids := toI32(f.tok.Encode(prompt, false))
	var m generate.Model = f.am
	if len(set) > 0 {
		m = f.am.Variant(set)
	}
	s, err := generate.Generate(context.Background(), m, ids, &generate.Options{MaxTokens: maxTokens, EOS: []int32{2}, Sampler: sampler.Params{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []int
	for tk, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, int(tk.ID))
	}
	return f.tok.Decode(out, false)
}

// adPost sends a JSON body and returns the status and decoded body.
func adPost(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 && raw[0] == '[' {
		var list []any
		_ = json.Unmarshal(raw, &list)
		return resp.StatusCode, map[string]any{"list": list}
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// completion asks /v1/completions for prompt greedily with adapter
// (nil: the member left out) and returns the text.
func completion(t *testing.T, base, prompt string, adapter *string, maxTokens int) (int, string, map[string]any) {
	t.Helper()
	body := map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0}
	if adapter != nil {
		body["adapter"] = *adapter
	}
	code, out := adPost(t, "POST", base+"/v1/completions", body)
	if code != http.StatusOK {
		return code, "", out
	}
	ch := out["choices"].([]any)[0].(map[string]any)
	return code, ch["text"].(string), out
}

func str(s string) *string { return &s }

// sets are the adapter choices the tests mix.
var testSets = []struct {
	spec string
	set  []string
}{{"none", nil}, {"a_peft", []string{"a_peft"}}, {"b_peft", []string{"b_peft"}}, {"a_peft+b_peft", []string{"a_peft", "b_peft"}}}

// TestCharTokenizer: the test tokenizer maps text and ids one to one.
func TestCharTokenizer(t *testing.T) {
	tok := charTokenizer(t)
	ids := make([]int, 256)
	for i := range ids {
		ids[i] = i
	}
	text := tok.Decode(ids, false)
	if got := tok.Encode(text, false); !slices.Equal(got, ids) {
		t.Fatalf("round trip of the 256 ids: %v", got)
	}
}

// gatedModel holds the model's passes while held (so requests sent
// meanwhile are all queued when the engine next takes jobs), and counts
// the passes whose rows run more than one adapter set.
type gatedModel struct {
	*AdapterModel
	mu    sync.Mutex
	gate  chan struct{} // nil: open
	mixed atomic.Int64
	sets  atomic.Int64 // the most distinct sets one pass ran
}

func (g *gatedModel) hold() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedModel) release() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gatedModel) wait() {
	g.mu.Lock()
	c := g.gate
	g.mu.Unlock()
	if c != nil {
		<-c
	}
}

func (g *gatedModel) Forward(ids *tensor.Array, caches []kv.Cache) (*tensor.Array, error) {
	g.wait()
	return g.AdapterModel.Forward(ids, caches)
}

func (g *gatedModel) ForwardRows(ids *tensor.Array, caches []kv.Cache, rows []generate.RowSpan) (*tensor.Array, error) {
	g.wait()
	var distinct []string
	for _, r := range rows {
		k := strings.Join(r.Adapters, "+")
		if !slices.Contains(distinct, k) {
			distinct = append(distinct, k)
		}
	}
	if len(distinct) > 1 {
		g.mixed.Add(1)
	}
	for n := int64(len(distinct)); ; {
		cur := g.sets.Load()
		if n <= cur || g.sets.CompareAndSwap(cur, n) {
			break
		}
	}
	return g.AdapterModel.ForwardRows(ids, caches, rows)
}

// waitRequests waits until the server has taken n requests.
func waitRequests(t *testing.T, srv *Server, n int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for srv.Stats().Requests < n {
		if time.Now().After(deadline) {
			t.Fatalf("the server took %d requests, want %d", srv.Stats().Requests, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestAdapterRowsMixed: with two adapters mounted, concurrent requests
// choosing none, a, b and a+b decode as rows of one batch (passes mixing
// sets) and each equals its solo run on the variant model, token for
// token; the same requests on the serial lane agree.
func TestAdapterRowsMixed(t *testing.T) {
	f := openLoraFixture(t)
	prompts := []string{"The quick brown fox", "jumps over", "the lazy dog, twice", "Hello"}
	const maxTok = 10
	want := map[string]string{}
	for _, ts := range testSets {
		for _, p := range prompts {
			want[ts.spec+"|"+p] = f.solo(t, p, ts.set, maxTok)
		}
	}
	// the adapters change the output (else this test could not fail)
	for _, p := range prompts {
		if want["none|"+p] == want["a_peft|"+p] && want["none|"+p] == want["b_peft|"+p] {
			t.Fatalf("the adapters do not change %q's greedy output", p)
		}
	}
	gm := &gatedModel{AdapterModel: f.am}
	cfg := f.config(8)
	cfg.Model = gm
	srv, hs := startServer(t, cfg)
	t.Cleanup(gm.release) // before the server closes, should the test stop early
	gm.hold()
	type got struct {
		key, text string
		code      int
	}
	res := make(chan got, 16)
	var wg sync.WaitGroup
	n := 0
	for _, ts := range testSets {
		for i, p := range prompts[:2] {
			n++
			wg.Add(1)
			go func() {
				defer wg.Done()
				spec := str(ts.spec)
				if ts.spec == "none" && i == 1 {
					spec = nil // left out: the default set
				}
				code, text, _ := completion(t, hs.URL, p, spec, maxTok)
				res <- got{ts.spec + "|" + p, text, code}
			}()
		}
	}
	waitRequests(t, srv, int64(n))
	gm.release()
	wg.Wait()
	close(res)
	_ = srv
	for g := range res {
		if g.code != http.StatusOK {
			t.Errorf("%s: status %d", g.key, g.code)
			continue
		}
		w := want[g.key]
		if strings.HasPrefix(g.key, "none|") && g.key == "none|"+prompts[1] {
			w = want["a_peft+b_peft|"+prompts[1]] // no adapter member: the default set (both, in order)
		}
		if g.text != w {
			t.Errorf("%s: batched %q, solo %q", g.key, g.text, w)
		}
	}
	if gm.mixed.Load() == 0 || gm.sets.Load() < 4 {
		t.Errorf("no pass mixed the four adapter sets (mixed passes %d, most sets in one pass %d)", gm.mixed.Load(), gm.sets.Load())
	}
	// the serial lane: the same requests one at a time
	_, hs1 := startServer(t, f.config(1))
	for _, ts := range testSets {
		for _, p := range prompts[2:] {
			code, text, out := completion(t, hs1.URL, p, str(ts.spec), maxTok)
			if code != http.StatusOK {
				t.Fatalf("serial %s: %d %v", ts.spec, code, out)
			}
			if w := want[ts.spec+"|"+p]; text != w {
				t.Errorf("serial %s|%s: %q, solo %q", ts.spec, p, text, w)
			}
		}
	}
}

// endpointText sends prompt as one user message to an endpoint and
// returns the status and the reply's text.
func endpointText(t *testing.T, base, endpoint, content string, adapter *string, maxTokens int) (int, string, map[string]any) {
	t.Helper()
	var body map[string]any
	switch endpoint {
	case "/v1/chat/completions":
		body = map[string]any{"messages": []map[string]string{{"role": "user", "content": content}}, "max_tokens": maxTokens, "temperature": 0}
	case "/v1/messages":
		body = map[string]any{"messages": []map[string]string{{"role": "user", "content": content}}, "max_tokens": maxTokens, "temperature": 0}
	case "/v1/responses":
		body = map[string]any{"input": content, "max_output_tokens": maxTokens, "temperature": 0}
	case "/v1/completions":
		body = map[string]any{"prompt": content, "max_tokens": maxTokens, "temperature": 0}
	}
	if adapter != nil {
		body["adapter"] = *adapter
	}
	code, out := adPost(t, "POST", base+endpoint, body)
	if code != http.StatusOK {
		return code, "", out
	}
	get := func(v any, path ...any) any {
		for _, k := range path {
			switch k := k.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[k]
			case int:
				l, _ := v.([]any)
				if k >= len(l) {
					return nil
				}
				v = l[k]
			}
		}
		return v
	}
	var text any
	switch endpoint {
	case "/v1/chat/completions":
		text = get(out, "choices", 0, "message", "content")
	case "/v1/completions":
		text = get(out, "choices", 0, "text")
	case "/v1/messages":
		text = get(out, "content", 0, "text")
	case "/v1/responses":
		items, _ := out["output"].([]any)
		for _, it := range items {
			if get(it, "type") == "message" {
				text = get(it, "content", 0, "text")
			}
		}
	}
	s, ok := text.(string)
	if !ok {
		t.Fatalf("%s: no text in %v", endpoint, out)
	}
	return code, s, out
}

// TestAdapterEndpoints: the adapter member chooses the set on chat,
// completions, messages and responses (each reply equals the variant
// model's solo run of the prompt the server renders), and an unknown id
// is a 400 on each, never the base model.
func TestAdapterEndpoints(t *testing.T) {
	f := openLoraFixture(t)
	_, hs := startServer(t, f.config(4))
	const maxTok = 8
	content := "Hi there"
	chatPrompt := "user: " + content + "\nassistant:" // the plain layout (no chat template)
	for _, ep := range []string{"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/responses"} {
		prompt := chatPrompt
		if ep == "/v1/completions" {
			prompt = content
		}
		for _, ts := range testSets[1:] {
			code, text, out := endpointText(t, hs.URL, ep, content, str(ts.spec), maxTok)
			if code != http.StatusOK {
				t.Fatalf("%s adapter %s: %d %v", ep, ts.spec, code, out)
			}
			if w := f.solo(t, prompt, ts.set, maxTok); text != w {
				t.Errorf("%s adapter %s: %q, solo %q", ep, ts.spec, text, w)
			}
		}
		for _, bad := range []string{"zzz", "a_peft+zzz", "a_peft+", "none+a_peft"} {
			code, _, out := endpointText(t, hs.URL, ep, content, str(bad), maxTok)
			if code != http.StatusBadRequest {
				t.Errorf("%s adapter %q: status %d (%v), want 400", ep, bad, code, out)
			}
		}
	}
	// the listing, and /v1/models' metadata
	code, out := adPost(t, "GET", hs.URL+"/v1/adapters", nil)
	list, _ := out["list"].([]any)
	if code != http.StatusOK || len(list) != 2 {
		t.Fatalf("GET /v1/adapters: %d %v", code, out)
	}
	for i, id := range []string{"a_peft", "b_peft"} {
		a := list[i].(map[string]any)
		mt, _ := f.m.Host().Mounted(id)
		if a["id"] != id || a["path"] != id || a["rank"] != float64(mt.Adapter.Rank) || a["scale"] != mt.Adapter.Scale ||
			a["size_bytes"] != float64(mt.Adapter.SizeBytes) || a["mounted_layers"] != float64(mt.Layers()) || mt.Layers() == 0 {
			t.Errorf("adapter %d: %v (mounted: rank %d, scale %g, %d bytes, %d layers)", i, a, mt.Adapter.Rank, mt.Adapter.Scale, mt.Adapter.SizeBytes, mt.Layers())
		}
	}
	code, out = adPost(t, "GET", hs.URL+"/v1/models", nil)
	data, _ := out["data"].([]any)
	if code != http.StatusOK || len(data) == 0 {
		t.Fatalf("GET /v1/models: %d %v", code, out)
	}
	if ads, _ := data[0].(map[string]any)["adapters"].([]any); len(ads) != 2 {
		t.Errorf("/v1/models lists adapters %v", data[0])
	}
}

// writeBadAdapter copies the a_peft fixture into a folder of its own with
// its config changed by edit (nil: unchanged) and, when shapes is set,
// its tensors replaced by zero tensors of those shapes.
func writeBadAdapter(t *testing.T, edit func(map[string]any), shapes map[string][]int) string {
	t.Helper()
	_, ad := fixtureDirs()
	src := filepath.Join(ad, "a_peft")
	dir := filepath.Join(t.TempDir(), "bad_adapter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(src, "adapter_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if shapes == nil {
		w, err := os.ReadFile(filepath.Join(src, "adapter_model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), w, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	arrs := map[string]*tensor.Array{}
	for n, sh := range shapes {
		k := 1
		for _, d := range sh {
			k *= d
		}
		arrs[n] = tensor.FromFloat32(make([]float32, k), sh, tensor.Float32)
	}
	defer func() {
		for _, a := range arrs {
			a.Free()
		}
	}()
	if err := safetensors.WriteArrays(filepath.Join(dir, "adapter_model.safetensors"), arrs, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestAdapterMountRefusals: POST /v1/adapters refuses what cannot be
// mounted with a 400 in OpenAI's error shape (a taken id 409), naming no
// server path, and mounts nothing; DELETE of an id not mounted is a 404.
func TestAdapterMountRefusals(t *testing.T) {
	f := openLoraFixture(t)
	_, hs := startServer(t, f.config(2))
	q0 := "base_model.model.model.layers.0.self_attn.q_proj"
	missing := filepath.Join(t.TempDir(), "no_such_adapter")
	dora := writeBadAdapter(t, func(c map[string]any) { c["use_dora"] = true }, nil)
	shape := writeBadAdapter(t, func(c map[string]any) { c["target_modules"] = []string{"q_proj"} },
		map[string][]int{q0 + ".lora_A.weight": {8, 32}, q0 + ".lora_B.weight": {64, 8}})
	rank := writeBadAdapter(t, func(c map[string]any) { c["r"] = 4 }, nil)
	empty := t.TempDir()
	abs, _ := filepath.Abs(dora)
	_, ad := fixtureDirs()
	cases := []struct {
		name string
		body map[string]any
		code int
		want string // in the message
	}{
		{"no path", map[string]any{"id": "x"}, 400, "path"},
		{"missing folder", map[string]any{"id": "x", "path": missing}, 400, "no_such_adapter"},
		{"empty folder", map[string]any{"id": "x", "path": empty}, 400, ""},
		{"dora", map[string]any{"id": "x", "path": dora}, 400, "DoRA"},
		{"shape", map[string]any{"id": "x", "path": shape}, 400, "q_proj"},
		{"rank vs config", map[string]any{"id": "x", "path": rank}, 400, ""},
		{"id none", map[string]any{"id": "none", "path": filepath.Join(ad, "a_mlx")}, 400, "none"},
		{"id with +", map[string]any{"id": "a+b", "path": filepath.Join(ad, "a_mlx")}, 400, "+"},
		{"taken id", map[string]any{"id": "a_peft", "path": filepath.Join(ad, "a_mlx")}, 409, "a_peft"},
	}
	for _, c := range cases {
		code, out := adPost(t, "POST", hs.URL+"/v1/adapters", c.body)
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if code != c.code || e == nil || e["type"] != "invalid_request_error" || msg == "" {
			t.Errorf("%s: %d %v, want %d with an OpenAI error", c.name, code, out, c.code)
			continue
		}
		t.Logf("%s: %d %s", c.name, code, msg)
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: message %q does not mention %q", c.name, msg, c.want)
		}
		if strings.Contains(msg, abs) || strings.Contains(msg, os.TempDir()+"/") || strings.Contains(msg, "testdata/") {
			t.Errorf("%s: message %q names a server path", c.name, msg)
		}
	}
	if ids := f.m.Host().IDs(); !slices.Equal(ids, []string{"a_peft", "b_peft"}) {
		t.Errorf("after the refusals the host has %v mounted", ids)
	}
	for _, id := range []string{"zzz", "x"} {
		if code, out := adPost(t, "DELETE", hs.URL+"/v1/adapters/"+id, nil); code != http.StatusNotFound {
			t.Errorf("DELETE %s: %d %v, want 404", id, code, out)
		}
	}
}

// TestAdapterMountWhileRunning: an adapter mounted while requests run
// serves the next requests (the running ones unaffected); one deleted
// while a request holds it (queued behind a request whose passes are
// held) is no longer chosen (400) but stays mounted until that request
// ends, which finishes equal to its solo run. Both lanes.
func TestAdapterMountWhileRunning(t *testing.T) {
	f := openLoraFixture(t)
	_, ad := fixtureDirs()
	for _, batch := range []int{1, 4} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			if _, ok := f.m.Host().Mounted("b_peft"); !ok { // the last run's server unmounted its own
				a, err := lora.Load(filepath.Join(ad, "b_peft"), nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.m.Host().Mount("b_peft", a); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.m.Host().Unmount("b_peft"); a.Free() })
			}
			gm := &gatedModel{AdapterModel: f.am}
			cfg := f.config(batch)
			cfg.Model = gm
			srv, hs := startServer(t, cfg)
			t.Cleanup(gm.release) // before the server closes, should the test stop early
			const maxTok = 40
			prompt := "Mount me"
			want := f.solo(t, prompt, []string{"b_peft"}, maxTok)
			gm.hold()
			type reply struct{ text, err string }
			blocker, done := make(chan reply, 1), make(chan reply, 1)
			ask := func(adapter string, n int, out chan reply) {
				code, text, body := completion(t, hs.URL, prompt, str(adapter), n)
				r := reply{text: text}
				if code != http.StatusOK {
					r.err = fmt.Sprintf("status %d %v", code, body)
				}
				out <- r
			}
			go ask("none", 4, blocker) // its passes wait for the gate
			waitRequests(t, srv, 1)
			go ask("b_peft", maxTok, done)
			waitRequests(t, srv, 2)
			// mount c (a_mlx: a_peft in mlx-lm's format) while they run
			code, out := adPost(t, "POST", hs.URL+"/v1/adapters", map[string]any{"id": "c", "path": filepath.Join(ad, "a_mlx")})
			if code != http.StatusOK || out["id"] != "c" || out["path"] != "a_mlx" || out["format"] != lora.FormatMLX {
				t.Fatalf("POST c: %d %v", code, out)
			}
			// delete b_peft while its request holds it
			code, out = adPost(t, "DELETE", hs.URL+"/v1/adapters/b_peft", nil)
			if code != http.StatusOK || out["deleted"] != true || out["in_use"] != float64(1) {
				t.Fatalf("DELETE b_peft while its request is queued: %d %v (want in_use 1)", code, out)
			}
			if _, ok := f.m.Host().Mounted("b_peft"); !ok {
				t.Error("b_peft was unmounted while a request held it")
			}
			code, out = adPost(t, "GET", hs.URL+"/v1/adapters", nil)
			found := false
			for _, a := range out["list"].([]any) {
				if a := a.(map[string]any); a["id"] == "b_peft" {
					found = a["unmounting"] == true && a["in_use"] == float64(1)
				}
			}
			if !found {
				t.Errorf("GET /v1/adapters during the deferred unmount: %v", out)
			}
			if code, _, out := completion(t, hs.URL, prompt, str("b_peft"), 4); code != http.StatusBadRequest {
				t.Errorf("a request for the deleted b_peft: %d %v, want 400", code, out)
			}
			if code, out := adPost(t, "DELETE", hs.URL+"/v1/adapters/b_peft", nil); code != http.StatusNotFound {
				t.Errorf("DELETE b_peft again: %d %v, want 404", code, out)
			}
			gm.release()
			if r := <-blocker; r.err != "" {
				t.Fatal(r.err)
			}
			if r := <-done; r.err != "" || r.text != want {
				t.Errorf("the request queued through the mount and delete: %q %s, solo %q", r.text, r.err, want)
			}
			// its end unmounted b_peft
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, ok := f.m.Host().Mounted("b_peft"); !ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("b_peft is still mounted after the request holding it ended")
				}
				time.Sleep(5 * time.Millisecond)
			}
			// c serves requests, as a_peft (the same adapter)
			code, text, out := completion(t, hs.URL, prompt, str("c"), 12)
			if code != http.StatusOK {
				t.Fatalf("request for c: %d %v", code, out)
			}
			if w := f.solo(t, prompt, []string{"c"}, 12); text != w {
				t.Errorf("c: %q, solo %q", text, w)
			}
			if w := f.solo(t, prompt, []string{"a_peft"}, 12); text != w {
				t.Errorf("c (a_peft in mlx-lm format): %q, a_peft %q", text, w)
			}
			// an idle adapter unmounts at once
			if code, out := adPost(t, "DELETE", hs.URL+"/v1/adapters/c", nil); code != http.StatusOK || out["in_use"] != float64(0) {
				t.Errorf("DELETE c: %d %v", code, out)
			}
			if _, ok := f.m.Host().Mounted("c"); ok {
				t.Error("c is still mounted after DELETE")
			}
			// b_peft back, by its folder's name (the server unmounts what it
			// mounted when it closes)
			code, out = adPost(t, "POST", hs.URL+"/v1/adapters", map[string]any{"path": filepath.Join(ad, "b_peft")})
			if code != http.StatusOK || out["id"] != "b_peft" {
				t.Fatalf("POST b_peft back: %d %v", code, out)
			}
			if code, text, out := completion(t, hs.URL, prompt, str("b_peft"), maxTok); code != http.StatusOK || text != want {
				t.Errorf("b_peft remounted: %d %q %v, solo %q", code, text, out, want)
			}
		})
	}
}

// TestAdapterCacheNamespaces: a prompt's KV computed under one adapter
// set (or none) is only ever reused by rows of that set, from the pool's
// prefix cache (rows register their blocks under their set's namespace)
// and from the SSD tier (each set's files under its own key): rows of one
// set share their prefix, in the pool and after a restart; a set with no
// file of its own restores nothing, though the base model's file of the
// same prompt is there.
func TestAdapterCacheNamespaces(t *testing.T) {
	f := openLoraFixture(t)
	cfg := f.config(4)
	cfg.SSDCacheDir, cfg.SSDCacheMinTokens = t.TempDir(), 16
	prompt := "A prompt long enough for a few blocks of KV: forty-eight tokens, or about."
	const maxTok = 8
	ask := func(url, adapter string) (string, float64) {
		t.Helper()
		code, text, out := completion(t, url, prompt, str(adapter), maxTok)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %v", adapter, code, out)
		}
		return text, out["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	}
	flush := func(url string) {
		t.Helper()
		if code, out := adPost(t, "POST", url+"/admin/cache/flush", map[string]any{}); code != http.StatusOK {
			t.Fatalf("flush: %d %v", code, out)
		}
	}
	want := map[string]string{}
	for _, ts := range testSets {
		want[ts.spec] = f.solo(t, prompt, ts.set, maxTok)
	}
	srv, hs := startServer(t, cfg)
	if text, _ := ask(hs.URL, "none"); text != want["none"] {
		t.Fatalf("base: %q, solo %q", text, want["none"])
	}
	flush(hs.URL)
	if st := srv.Stats().SSD; st == nil || st.Entries != 1 {
		t.Fatalf("the base request wrote no SSD file: %+v", st)
	}
	for _, spec := range []string{"a_peft", "a_peft+b_peft"} {
		if text, cached := ask(hs.URL, spec); text != want[spec] || cached != 0 {
			t.Errorf("%s after the base run: %q (cached %v tokens), solo %q (want nothing cached)", spec, text, cached, want[spec])
		}
	}
	// a repeated a_peft request reuses its own prefix, not the base's
	if text, cached := ask(hs.URL, "a_peft"); cached == 0 || text != want["a_peft"] {
		t.Errorf("a repeated a_peft request: %q (cached %v), solo %q (want its own prefix reused)", text, cached, want["a_peft"])
	}
	flush(hs.URL)
	st := srv.Stats().SSD
	if st.Entries != 3 {
		t.Errorf("SSD tier: %+v (want 3 files: base, a_peft, a_peft+b_peft)", st)
	}
	hs.Close()
	srv.Close()
	// after a restart the pool is empty: only the SSD tier holds KV of the
	// prompt, each set's under its own key
	srv2, hs2 := startServer(t, cfg)
	if text, cached := ask(hs2.URL, "b_peft"); text != want["b_peft"] || cached != 0 {
		t.Errorf("b_peft (no file of its own) after a restart: %q (cached %v), solo %q", text, cached, want["b_peft"])
	}
	flush(hs2.URL)
	if st := srv2.Stats().SSD; st.Entries != 4 || st.Hits != 0 {
		t.Errorf("SSD tier after the restart and a b_peft request: %+v (want 4 files, b_peft's new, no hit)", st)
	}
	for i, spec := range []string{"a_peft+b_peft", "none", "a_peft"} {
		if text, cached := ask(hs2.URL, spec); text != want[spec] || cached == 0 {
			t.Errorf("%s after a restart: %q (cached %v), solo %q (want its own file restored)", spec, text, cached, want[spec])
		}
		if st := srv2.Stats().SSD; st.Hits != int64(i+1) {
			t.Errorf("after %s: %d SSD hits, want %d", spec, st.Hits, i+1)
		}
	}
}

// TestAdapterSpans: a pass's rows become lora spans, consecutive rows of
// one set merged, one set for all rows selected as such.
func TestAdapterSpans(t *testing.T) {
	a, b := []string{"a"}, []string{"a", "b"}
	got := spans([]generate.RowSpan{{Tokens: 1, Adapters: a}, {Tokens: 3, Adapters: a}, {Tokens: 1}, {Tokens: 2, Adapters: b}, {Tokens: 1, Adapters: b}, {Tokens: 2, Adapters: a}})
	want := []lora.Span{{Rows: 4, Set: a}, {Rows: 1}, {Rows: 3, Set: b}, {Rows: 2, Set: a}}
	if got.Set != nil || len(got.Spans) != len(want) {
		t.Fatalf("spans: %+v, want %+v", got, want)
	}
	for i := range want {
		if got.Spans[i].Rows != want[i].Rows || !slices.Equal(got.Spans[i].Set, want[i].Set) {
			t.Errorf("span %d: %+v, want %+v", i, got.Spans[i], want[i])
		}
	}
	one := spans([]generate.RowSpan{{Tokens: 2, Adapters: b}, {Tokens: 5, Adapters: b}})
	if one.Spans != nil || !slices.Equal(one.Set, b) {
		t.Errorf("one set for every row: %+v", one)
	}
}
