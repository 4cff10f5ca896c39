package serve

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
)

// TestSSDSpillAtEviction: a prefix the paged pool evicts is written to
// the SSD tier by its writer goroutine, never by the token loop. The
// llama3 fixture (no sliding window) under a KV budget of about two
// requests, with a minimum of 48 tokens so that the 33-token prompts
// themselves are never snapshotted and only the pool's chains — prompt
// plus generated tokens, 64 of them in whole blocks — can reach the
// disk. With the tier's writes held on a gate, later requests evict A's
// chain and run to completion while its write waits (the loop did not
// block on it), and a second eviction finds the queue over its byte bound
// and is dropped. Released and flushed, the file is there; a prompt
// sharing only A's first 48 tokens takes those from it (trimmed), and a
// follow-up request continuing A's conversation (A's prompt, its answer,
// new tokens), of which the pool holds only those 48, takes all 64 from
// the file; each answers what a server without the tier answers.
func TestSSDSpillAtEviction(t *testing.T) {
	lm := llamaFixture(t)
	tok := charTokenizer(t)
	const n, gen, minTokens = 33, 40, 48
	config := func() Config {
		return Config{Model: generate.Wrap(lm, lm.Info().Vocab), ModelID: "llama3-tiny", Tokenizer: tok, EOS: []int32{2},
			ContextLength: 256, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	probe := config()
	probe.KVBudgetBytes = 4 << 20
	psrv, phs := startServer(t, probe)
	pst := psrv.Stats().Batch
	phs.Close()
	psrv.Close()
	per := pst.KVBudgetBytes / (pst.Blocks.Capacity / lm.Info().Layers)
	bs := pst.Blocks.Size
	rowBlocks := (n + gen + bs - 1) / bs

	cfg := config()
	cfg.SSDCacheDir = t.TempDir()
	cfg.SSDCacheMinTokens = minTokens
	cfg.KVBudgetBytes = per * (2*rowBlocks + 2)
	srv, hs := startServer(t, cfg)
	tier := srv.eng.lane.ssd
	gate, started := make(chan struct{}), make(chan []int32, 2*ssdQueueJobs)
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // (before the server's cleanup, which waits for the writer)
	tier.setSave(func(path string, j *ssdJob) error {
		if j.spill {
			started <- j.tokens
			<-gate
		}
		return saveJob(path, j)
	})

	r := rand.New(rand.NewPCG(7, 8))
	prompt := func() []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 3 + r.IntN(250)
		}
		return p
	}
	ask := func(url string, p []int) (string, float64) {
		t.Helper()
		code, out := post(t, url+"/v1/completions", map[string]any{"prompt": p, "max_tokens": gen, "temperature": 0, "logit_bias": map[string]float64{"2": -100}})
		if code != 200 {
			t.Fatalf("completion: %d %v", code, out)
		}
		u := out["usage"].(map[string]any)
		return out["choices"].([]any)[0].(map[string]any)["text"].(string), u["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	}
	a := prompt()
	answer, _ := ask(hs.URL, a)
	genIDs := tok.Encode(answer, false)
	if len(genIDs) != gen {
		t.Fatalf("A's answer re-encodes to %d tokens, want %d", len(genIDs), gen)
	}
	chain := append(slices.Clone(a), genIDs[:gen-1]...) // what A's caches were fed
	chain = chain[:len(chain)/bs*bs]
	if len(chain) < minTokens {
		t.Fatalf("the test needs a chain of at least %d tokens, has %d", minTokens, len(chain))
	}
	others := make(chan struct{})
	go func() { // each completes while the writes wait at the gate
		defer close(others)
		for _, p := range [][]int{prompt(), prompt(), prompt(), prompt()} {
			if code, out := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": p, "max_tokens": gen, "temperature": 0, "logit_bias": map[string]float64{"2": -100}}); code != 200 {
				t.Errorf("completion: %d %v", code, out)
			}
		}
	}()
	waitFor(t, "the other requests to complete while a write is held (the token loop stalled behind it)", func() bool {
		select {
		case <-others:
			return true
		default:
			return false
		}
	})
	var first []int32
	select {
	case first = <-started:
	default:
		t.Fatal("no evicted prefix reached the writer")
	}
	if !slices.Equal(first, toI32(chain)) {
		t.Fatalf("the first spill wrote %d tokens, not A's chain of %d", len(first), len(chain))
	}
	st := srv.Stats().SSD
	if st.QueuedBytes <= 0 || st.Dropped < 1 || st.Writes != 0 || srv.Stats().Completed != 5 {
		t.Fatalf("with the writer held: %+v, %d completed", st, srv.Stats().Completed)
	}
	release()
	resp, err := hs.Client().Post(hs.URL+"/admin/cache/flush", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("flush: %v %v", resp, err)
	}
	resp.Body.Close()
	st = srv.Stats().SSD
	if st.Spilled < 1 || st.Spilled != st.Writes || st.QueuedBytes != 0 {
		t.Fatalf("after the flush: %+v", st)
	}

	_, plain := startServer(t, config())
	// a prompt sharing only A's first 48 tokens takes those from the
	// 64-token file (its caches trimmed)
	branch := append(slices.Clone(chain[:minTokens]), prompt()[:10]...)
	warm, cached := ask(hs.URL, branch)
	if cold, _ := ask(plain.URL, branch); warm != cold || cached != minTokens {
		t.Errorf("a branch of A's chain: %q with %v cached tokens, computed %q (want %d cached)", warm, cached, cold, minTokens)
	}
	next := append(append(slices.Clone(a), genIDs...), 3+r.IntN(250), 3+r.IntN(250), 3+r.IntN(250))
	if held := srv.eng.lane.pool.CachedPrefix(toI32(next)); !raceEnabled && held != minTokens { // (the engine goroutine is idle)
		t.Fatalf("the pool holds %d tokens of A's conversation, want the branch's %d", held, minTokens)
	}
	hits := srv.Stats().SSD.Hits
	warm, cached = ask(hs.URL, next)
	if cached != float64(len(chain)) || srv.Stats().SSD.Hits != hits+1 {
		t.Errorf("the follow-up took %v cached tokens (want %d from the spilled file); SSD %+v", cached, len(chain), srv.Stats().SSD)
	}
	if cold, _ := ask(plain.URL, next); warm != cold {
		t.Errorf("restored from the spilled file: %q, computed: %q", warm, cold)
	}
	t.Logf("pool of %d blocks per layer; A's chain of %d tokens spilled at eviction; SSD %+v", cfg.KVBudgetBytes/per, len(chain), srv.Stats().SSD)
}

// TestSSDFlushedAtClose: Close (what SIGTERM calls) waits for the SSD
// tier's queued writes: with a prompt's write held at the writer, Close
// does not return until it is released, and once it returns the file is
// in place and a restarted server restores the prompt from it.
func TestSSDFlushedAtClose(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.SSDCacheDir = t.TempDir()
	cfg.SSDCacheMinTokens = 16
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	gate, started := make(chan struct{}), make(chan struct{}, ssdQueueJobs)
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	defer release()
	srv.eng.lane.ssd.setSave(func(path string, j *ssdJob) error {
		started <- struct{}{}
		<-gate
		return saveJob(path, j)
	})
	r := rand.New(rand.NewPCG(9, 9))
	prompt := make([]int, 40)
	for i := range prompt {
		prompt[i] = 10 + r.IntN(d.tok.VocabSize()-10)
	}
	body := map[string]any{"prompt": prompt, "max_tokens": 4, "temperature": 0}
	code, out := post(t, hs.URL+"/v1/completions", body)
	if code != 200 {
		t.Fatalf("completion: %d %v", code, out)
	}
	<-started
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a write was still queued")
	case <-time.After(time.Second): // (a Close that waits can never get here first)
	}
	release()
	<-closed
	if files, _ := filepath.Glob(filepath.Join(cfg.SSDCacheDir, "*"+ssdExt)); len(files) != 1 {
		t.Fatalf("after Close the SSD cache holds %v", files)
	}
	hs.Close()
	_, hs2 := startServer(t, cfg)
	code, again := post(t, hs2.URL+"/v1/completions", body)
	if code != 200 {
		t.Fatalf("after the restart: %d %v", code, again)
	}
	u := again["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)
	if u["cached_tokens"].(float64) != float64(len(prompt)-1) || fmt.Sprint(again["choices"]) != fmt.Sprint(out["choices"]) {
		t.Errorf("after the restart: %v cached tokens, choices %v; before %v", u["cached_tokens"], again["choices"], out["choices"])
	}
}

// TestSSDCacheCapAndVerify: the tier keeps under --ssd-cache-max by
// removing its least recently used files (five 48-token prompts under a
// cap of about two and a half files: the last two stay, on disk and in
// the index), and --ssd-cache-verify checks every file at start: one with
// a flipped byte is quarantined before any request, the other served.
func TestSSDCacheCapAndVerify(t *testing.T) {
	config, _ := tinyLlamaConfig(t)
	cfg := config()
	cfg.SSDCacheDir = t.TempDir()
	cfg.SSDCacheMinTokens = 32
	r := rand.New(rand.NewPCG(11, 12))
	var prompts [][]int
	for range 5 {
		p := make([]int, 49)
		for i := range p {
			p[i] = 3 + r.IntN(250)
		}
		prompts = append(prompts, p)
	}
	ask := func(url string, p []int) float64 {
		t.Helper()
		code, out := post(t, url+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 2, "temperature": 0})
		if code != 200 {
			t.Fatalf("completion: %d %v", code, out)
		}
		return out["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	}
	flush := func(url string) {
		t.Helper()
		resp, err := http.Post(url+"/admin/cache/flush", "application/json", strings.NewReader("{}"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("flush: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	// one file's size, from a first server
	srv0, hs0 := startServer(t, cfg)
	ask(hs0.URL, prompts[0])
	flush(hs0.URL)
	size := srv0.Stats().SSD.Bytes
	hs0.Close()
	srv0.Close()
	if size <= 0 {
		t.Fatal("no file written")
	}
	cfg.SSDCacheMaxBytes = size * 5 / 2
	srv, hs := startServer(t, cfg)
	for _, p := range prompts[1:] {
		ask(hs.URL, p)
		flush(hs.URL)
	}
	st := srv.Stats().SSD
	files, _ := filepath.Glob(filepath.Join(cfg.SSDCacheDir, "*"+ssdExt))
	if st.Entries != 2 || len(files) != 2 || st.Evicted != 3 || st.Bytes > cfg.SSDCacheMaxBytes {
		t.Fatalf("under a cap of %d bytes: %+v, files %v", cfg.SSDCacheMaxBytes, st, files)
	}
	hs.Close()
	srv.Close()
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x01
	if err := os.WriteFile(files[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.SSDCacheVerify = true
	srv2, hs2 := startServer(t, cfg)
	if st := srv2.Stats().SSD; st.Quarantined != 1 || st.Entries != 1 {
		t.Fatalf("verified at start: %+v", st)
	}
	hits := 0
	for _, p := range prompts[3:] { // the two kept: one quarantined, one served
		if ask(hs2.URL, p) == 48 {
			hits++
		}
	}
	if hits != 1 || srv2.Stats().SSD.Hits != 1 {
		t.Errorf("%d of the two kept prompts restored; SSD %+v", hits, srv2.Stats().SSD)
	}
}

// TestSSDSpillOncePerChain: on a model with sliding-window layers (the
// demo model; files restore only whole there) a chain the pool evicts
// block by block is written once, at its first eviction: what is left of
// it each later eviction starts that file and is not written again. A's
// 40-token prompt is snapshotted (39 tokens) and its 96-token chain
// (prompt and answer, whole blocks) spilled; later prompts evict all of
// A's blocks; of the files starting A's tokens there are exactly those
// two.
func TestSSDSpillOncePerChain(t *testing.T) {
	d := loadDemo(t)
	probe := d.config()
	probe.KVBudgetBytes = 4 << 20
	psrv, phs := startServer(t, probe)
	pst := psrv.Stats().Batch
	phs.Close()
	psrv.Close()
	layers := len(psrv.eng.lane.pool.Stats().Layers)
	per := pst.KVBudgetBytes / (pst.Blocks.Capacity / layers)
	cfg := d.config()
	cfg.SSDCacheDir = t.TempDir()
	cfg.SSDCacheMinTokens = 32
	cfg.KVBudgetBytes = per * 16
	srv, hs := startServer(t, cfg)
	r := rand.New(rand.NewPCG(13, 14))
	bias := map[string]float64{}
	for _, id := range d.eos {
		bias[fmt.Sprint(id)] = -100
	}
	ask := func(n, gen int) []int32 {
		t.Helper()
		p := make([]int, n)
		for i := range p {
			p[i] = 10 + r.IntN(d.tok.VocabSize()-10)
		}
		code, out := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": p, "max_tokens": gen, "temperature": 0, "logit_bias": bias})
		if code != 200 {
			t.Fatalf("completion: %d %v", code, out)
		}
		return toI32(p)
	}
	a := ask(40, 61)
	for range 6 {
		ask(40, 61)
	}
	resp, err := hs.Client().Post(hs.URL+"/admin/cache/flush", "application/json", strings.NewReader("{}"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("flush: %v %v", resp, err)
	}
	resp.Body.Close()
	if held := srv.eng.lane.pool.CachedPrefix(a); !raceEnabled && held != 0 { // (the engine goroutine is idle)
		t.Fatalf("the pool still holds %d tokens of A: the test needs them evicted", held)
	}
	tier := srv.eng.lane.ssd
	tier.mu.Lock()
	var lens []int
	for _, e := range tier.entries {
		if len(e.tokens) >= 32 && slices.Equal(e.tokens[:32], a[:32]) {
			lens = append(lens, len(e.tokens))
		}
	}
	st := tier.stats
	tier.mu.Unlock()
	slices.Sort(lens)
	if !slices.Equal(lens, []int{39, 96}) {
		t.Errorf("files starting with A's tokens: lengths %v, want the snapshot's 39 and the chain's 96 (SSD %+v)", lens, st)
	}
	t.Logf("pool of 16 blocks per layer; SSD %+v", st)
}
