package serve

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
)

// TestKVQuantLanes: with Config.KVQuant, both lanes store TurboQuant KV.
// The serial lane's greedy completions are generate's with the same
// KVQuant and QuantizedKVStart; the batched lane's (TurboQuant pool
// blocks from the first token) are generate's over contiguous TurboQuant
// caches from the first token, bit for bit. The batched lane's probe
// measures TurboQuant blocks, so the same KV budget holds more of them
// (k8v3 more than k8v8), and the pool stays within the budget.
func TestKVQuantLanes(t *testing.T) {
	d := loadDemo(t)
	prompt := func(i int) []int32 { return []int32{2, int32(100 + i), 200, int32(300 + i), 400, 500} }
	complete := func(url string, i int) string {
		t.Helper()
		code, out := post(t, url+"/v1/completions", map[string]any{"prompt": prompt(i), "max_tokens": 12, "temperature": 0})
		if code != 200 {
			t.Fatalf("status %d: %v", code, out)
		}
		return fmt.Sprint(out["choices"].([]any)[0].(map[string]any)["text"])
	}
	// direct is generate's greedy text with o (and fresh contiguous
	// TurboQuant caches when fromStart)
	direct := func(i int, o generate.Options, fromStart bool) string {
		t.Helper()
		o.MaxTokens, o.EOS = 12, d.eos
		if fromStart {
			o.Caches = d.gm.MakeCaches()
			for li, c := range o.Caches {
				var tc kv.Cache
				var err error
				switch c := c.(type) {
				case *kv.KVCache:
					tc, err = c.ToTurbo(*o.KVQuant)
				case *kv.RotatingKVCache:
					tc, err = c.ToTurbo(*o.KVQuant)
				default:
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				c.Free()
				o.Caches[li] = tc
			}
			o.KVQuant = nil
			defer func() {
				for _, c := range o.Caches {
					if c != nil {
						c.Free()
					}
				}
			}()
		}
		s, err := generate.Generate(context.Background(), d.gm, prompt(i), &o)
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
		return d.tok.Decode(ids, false)
	}
	const budget = 4 << 20
	lane := func(batch int, spec *kv.TurboSpec, start int) (*Server, string) {
		cfg := d.config()
		cfg.Batch, cfg.KVBudgetBytes, cfg.KVQuant, cfg.QuantizedKVStart = batch, budget, spec, start
		if batch == 1 {
			cfg.PromptCacheBytes = -1
		}
		srv, hs := startServer(t, cfg)
		return srv, hs.URL
	}
	k8v8, k8v3 := &kv.TurboSpec{KeyBits: 8, ValueBits: 8}, &kv.DefaultTurbo
	plainSrv, _ := lane(4, nil, 0)
	_, serial := lane(1, k8v3, 3)
	batchedSrv, batched := lane(4, k8v3, 0)
	bigSrv, _ := lane(4, k8v8, 0)
	for i := range 3 {
		if got, want := complete(serial, i), direct(i, generate.Options{KVQuant: k8v3, QuantizedKVStart: 3}, false); got != want {
			t.Errorf("prompt %d: serial lane %q, generate %q", i, got, want)
		}
		if got, want := complete(batched, i), direct(i, generate.Options{KVQuant: k8v3}, true); got != want {
			t.Errorf("prompt %d: batched lane %q, generate over TurboQuant caches %q", i, got, want)
		}
	}
	capOf := func(s *Server) int { return s.Stats().Batch.Blocks.Capacity }
	if p, t8, t3 := capOf(plainSrv), capOf(bigSrv), capOf(batchedSrv); !(p < t8 && t8 < t3) {
		t.Errorf("blocks in a %d-byte budget: plain %d, k8v8 %d, k8v3 %d", budget, p, t8, t3)
	}
	if b := batchedSrv.Stats().Batch; b.KVBytes == 0 || b.KVBytes > b.KVBudgetBytes {
		t.Errorf("k8v3 pool: %d bytes of a %d budget", b.KVBytes, b.KVBudgetBytes)
	}
}

// TestKVQuantSSD: the SSD tier keeps TurboQuant blocks: a restarted
// server with the same scheme restores a prompt's KV from its file and
// answers as the cold run did, and a server with plain KV over the same
// folder does not take the file (its key names the layout).
func TestKVQuantSSD(t *testing.T) {
	d := loadDemo(t)
	dir := t.TempDir()
	cfg := d.config()
	cfg.SSDCacheDir, cfg.SSDCacheMinTokens, cfg.KVQuant = dir, 64, &kv.DefaultTurbo
	prompt := make([]int, 300)
	for i := range prompt {
		prompt[i] = 10 + (i*37)%(d.tok.VocabSize()-10)
	}
	ask := func(url string) (string, float64) {
		t.Helper()
		code, out := post(t, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0})
		if code != 200 {
			t.Fatalf("completion: %d %v", code, out)
		}
		u := out["usage"].(map[string]any)
		return out["choices"].([]any)[0].(map[string]any)["text"].(string), u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	}
	restart := func(c Config) (*Server, string, func()) {
		srv, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(srv)
		return srv, hs.URL, func() { hs.Close(); srv.Close() }
	}
	srv, url, stop := restart(cfg)
	cold, _ := ask(url)
	post(t, url+"/admin/cache/flush", map[string]any{})
	if st := srv.Stats(); st.SSD == nil || st.SSD.Writes != 1 {
		t.Fatalf("after the flush: %+v", st.SSD)
	}
	stop()
	_, url, stop = restart(cfg)
	warm, cached := ask(url)
	stop()
	if warm != cold || cached < 0.9*float64(len(prompt)) {
		t.Errorf("k8v3 restart: %q with %v cached tokens, cold %q", warm, cached, cold)
	}
	plain := cfg
	plain.KVQuant = nil
	_, url, stop = restart(plain)
	defer stop()
	if _, cached := ask(url); cached != 0 {
		t.Errorf("plain KV took %v tokens from a TurboQuant file", cached)
	}
}
