package serve

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
)

// TestSSDCacheRestart: a 2,000-token prompt's KV (300 under the race
// detector) is written to the SSD cache; after a restart the same request
// takes all but its last token from the file and answers exactly what the cold run answered; a flipped byte
// in the file is caught, the file quarantined and not served (the answer
// is still the same, computed).
func TestSSDCacheRestart(t *testing.T) {
	d := loadDemo(t)
	dir := t.TempDir()
	cfg := d.config()
	cfg.SSDCacheDir = dir
	r := rand.New(rand.NewPCG(1, 2))
	n := 2000
	if raceEnabled {
		n = 300 // the race detector makes the cold prefill ~10× slower
	}
	prompt := make([]int, n)
	for i := range prompt {
		prompt[i] = 10 + r.IntN(d.tok.VocabSize()-10)
	}
	body := map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0}
	ask := func(url string) (string, float64, time.Duration) {
		t.Helper()
		start := time.Now()
		code, out := post(t, url+"/v1/completions", body)
		if code != 200 {
			t.Fatalf("completion: %d %v", code, out)
		}
		u := out["usage"].(map[string]any)
		return out["choices"].([]any)[0].(map[string]any)["text"].(string), u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64), time.Since(start)
	}
	srv, hs := startServer(t, cfg)
	cold, cached, coldT := ask(hs.URL)
	if cached != 0 {
		t.Fatalf("cold run: %v cached tokens", cached)
	}
	resp, err := hs.Client().Post(hs.URL+"/admin/cache/flush", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("flush: %v %v", resp, err)
	}
	resp.Body.Close()
	if st := srv.Stats(); st.SSD == nil || st.SSD.Entries != 1 || st.SSD.Writes != 1 {
		t.Fatalf("after the flush: %+v", st.SSD)
	}
	hs.Close()
	srv.Close()

	srv2, hs2 := startServer(t, cfg) // a restart over the same folder
	warm, cached, warmT := ask(hs2.URL)
	if warm != cold || cached < 0.9*float64(len(prompt)) {
		t.Errorf("after the restart: %q with %v cached tokens, cold %q", warm, cached, cold)
	}
	t.Logf("%d-token prompt: cold %v, restored from the SSD cache %v (%v cached)", n, coldT, warmT, cached)
	if st := srv2.Stats(); st.SSD.Hits != 1 {
		t.Errorf("stats %+v", st.SSD)
	}
	hs2.Close()
	srv2.Close()

	files, _ := filepath.Glob(filepath.Join(dir, "*"+ssdExt))
	if len(files) != 1 {
		t.Fatalf("cache files %v", files)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	raw[4096+777] ^= 0x10 // inside the first array
	if err := os.WriteFile(files[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	srv3, hs3 := startServer(t, cfg)
	again, cached, _ := ask(hs3.URL)
	if again != cold || cached != 0 {
		t.Errorf("with a corrupt file: %q with %v cached tokens, cold %q", again, cached, cold)
	}
	if st := srv3.Stats(); st.SSD.Quarantined != 1 || st.SSD.Hits != 0 {
		t.Errorf("the corrupt file was not quarantined: %+v", st.SSD)
	}
	if _, err := os.Stat(files[0] + ssdQuarantine); err != nil {
		t.Errorf("no quarantined file: %v", err)
	}
}

// TestSSDCacheAfterEviction: under a KV budget of about two requests, a
// prompt's blocks are evicted from the paged pool by later requests (the
// pool holds none of it any more); asked again, the prompt comes back from
// the SSD cache (all but its last token, an SSD hit) and the answer is
// the cold one, token for token. The llama3 fixture (no sliding window,
// so that the pool itself would have kept the prefix).
func TestSSDCacheAfterEviction(t *testing.T) {
	lm := llamaFixture(t)
	const n, gen = 16*5 + 1, 6 // n−1 whole blocks: a pool that kept them needs no restore
	config := func() Config {
		return Config{Model: generate.Wrap(lm, lm.Info().Vocab), ModelID: "llama3-tiny", Tokenizer: charTokenizer(t), EOS: []int32{2},
			ContextLength: 128, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	// the bytes of one block of every layer, from a probe server's pool
	probe := config()
	probe.KVBudgetBytes = 4 << 20
	psrv, phs := startServer(t, probe)
	pst := psrv.Stats().Batch
	phs.Close()
	psrv.Close()
	per := pst.KVBudgetBytes / (pst.Blocks.Capacity / lm.Info().Layers)
	bs := pst.Blocks.Size
	cfg := config()
	cfg.SSDCacheDir = t.TempDir()
	cfg.SSDCacheMinTokens = 32
	cfg.KVBudgetBytes = per * (2*(n+gen+bs-1)/bs + 2)
	srv, hs := startServer(t, cfg)
	r := rand.New(rand.NewPCG(3, 4))
	prompt := func() []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 3 + r.IntN(250)
		}
		return p
	}
	ask := func(p []int) (string, float64) {
		t.Helper()
		code, out := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": p, "max_tokens": gen, "temperature": 0, "logit_bias": map[string]float64{"2": -100}})
		if code != 200 {
			t.Fatalf("completion: %d %v", code, out)
		}
		u := out["usage"].(map[string]any)
		return out["choices"].([]any)[0].(map[string]any)["text"].(string), u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	}
	a := prompt()
	ids := make([]int32, n)
	for i, id := range a {
		ids[i] = int32(id)
	}
	cold, _ := ask(a)
	held := func() int { return srv.eng.lane.pool.CachedPrefix(ids) } // (between requests: the engine goroutine is idle)
	if raceEnabled {
		held = func() int { return -1 }
	}
	before := held()
	for range 3 { // other prompts push a's blocks out of the pool
		ask(prompt())
	}
	resp, err := hs.Client().Post(hs.URL+"/admin/cache/flush", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("flush: %v %v", resp, err)
	}
	resp.Body.Close()
	after := held()
	if before >= 0 && (before < n-1 || after >= bs) {
		t.Fatalf("the pool held %d tokens of the prompt after it, %d after the others: the test needs them evicted", before, after)
	}
	hits := srv.Stats().SSD.Hits
	warm, cached := ask(a)
	st := srv.Stats()
	if warm != cold || cached < n-1 {
		t.Errorf("after eviction: %q with %v cached tokens, cold %q", warm, cached, cold)
	}
	if st.SSD.Hits != hits+1 {
		t.Errorf("the prompt did not come from the SSD cache: %+v", st.SSD)
	}
	t.Logf("pool of %d blocks of %d tokens per layer; the prompt's cached tokens: %d in the pool after it, %d after 3 others; %v from the SSD cache; SSD %+v", st.Batch.Blocks.Capacity/lm.Info().Layers, bs, before, after, cached, st.SSD)
}
