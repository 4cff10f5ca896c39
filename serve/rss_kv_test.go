package serve

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
)

// TestKVBytesMatchRSS: what /stats reports of the KV pool is what the
// process really holds. Unique prompts (no prefix shared, one token
// generated) fill the batched lane's pool, prompt cache included, past
// 32 MiB of a 48 MiB budget (its storage doubles up to the budget) — the
// llama3 fixture, whose full-attention layers keep every prompt's blocks
// cached (the demo model's sliding windows keep none of a 384-token
// prompt); the process's resident set grows by at most 1.3× the growth of
// /stats.batch.kv_bytes (the bound; it was 2.2× while the storage
// each doubling left behind stayed in the CPU backend's buffer cache), and
// the pool stays within its budget. Bounded: at most 400 requests of 384
// tokens, 8 at a time, on loopback.
func TestKVBytesMatchRSS(t *testing.T) {
	if memoryStats().RSSBytes == 0 {
		t.Skip("no VmRSS in /proc/self/status: resident memory unknown on this system")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory grows with every allocation")
	}
	lm := llamaFixture(t)
	cfg := Config{Model: generate.Wrap(lm, lm.Info().Vocab), ModelID: "llama3-tiny", Tokenizer: charTokenizer(t), EOS: []int32{2},
		ContextLength: 1024, KVBudgetBytes: 48 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv, hs := startServer(t, cfg)
	const promptLen, maxRequests, target = 384, 400, 32 << 20
	ask := func(i int) {
		r := rand.New(rand.NewPCG(uint64(i), 91))
		ids := make([]int, promptLen)
		for k := range ids {
			ids[k] = 3 + r.IntN(250)
		}
		if code, out := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": ids, "max_tokens": 1}); code != 200 {
			t.Errorf("request %d: %d %v", i, code, out)
		}
	}
	sample := func() (rss int64, kvBytes int) {
		runtime.GC()
		debug.FreeOSMemory()
		return memoryStats().RSSBytes, srv.Stats().Batch.KVBytes
	}
	for i := range 8 { // warm-up: the engine's first passes, the pool's first storage
		ask(-1 - i)
	}
	rss0, kv0 := sample()
	next := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= maxRequests || srv.Stats().Batch.KVBytes >= target {
					return
				}
				ask(i)
			}
		}()
	}
	wg.Wait()
	rss1, kv1 := sample()
	st := srv.Stats()
	t.Logf("%d requests: kv_bytes %.1f → %.1f MiB, RSS %.1f → %.1f MiB: RSS grew %.2f× the reported KV growth (budget %d MiB, %d prefix entries)",
		min(next, maxRequests), float64(kv0)/(1<<20), float64(kv1)/(1<<20), float64(rss0)/(1<<20), float64(rss1)/(1<<20),
		float64(rss1-rss0)/float64(kv1-kv0), st.Batch.KVBudgetBytes>>20, st.CacheEntries)
	if kv1-kv0 < 16<<20 {
		t.Fatalf("the pool grew by only %d bytes: the test needs it filled", kv1-kv0)
	}
	if st.Batch.KVBytes > st.Batch.KVBudgetBytes {
		t.Errorf("the pool holds %d bytes, over its budget of %d", st.Batch.KVBytes, st.Batch.KVBudgetBytes)
	}
	if float64(rss1-rss0) > 1.3*float64(kv1-kv0) {
		t.Errorf("resident memory grew by %.1f MiB for %.1f MiB of reported KV (more than 1.3×)", float64(rss1-rss0)/(1<<20), float64(kv1-kv0)/(1<<20))
	}
}
