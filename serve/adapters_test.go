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

// gatedModel holds the model's passes until the gate opens (so requests
// sent meanwhile are all queued when the engine next takes jobs), and
// counts the passes whose rows run more than one adapter set.
type gatedModel struct {
	*AdapterModel
	gate  chan struct{}
	mixed atomic.Int64
	sets  atomic.Int64 // the most distinct sets one pass ran
}

func (g *gatedModel) wait() { <-g.gate }

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
	for srv.Stats().Requests < n {
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
	gm := &gatedModel{AdapterModel: f.am, gate: make(chan struct{})}
	cfg := f.config(8)
	cfg.Model = gm
	close(gm.gate) // the lane's probe pass runs at New
	srv, hs := startServer(t, cfg)
	gm.gate = make(chan struct{})
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
	close(gm.gate)
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

var _ = fmt.Sprint
