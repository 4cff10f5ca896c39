package serve

import (
	"context"
	"fmt"
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
