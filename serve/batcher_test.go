package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBatchedLaneEqualsSerial: 32 concurrent streaming requests (8 under
// the race detector) on the batched lane (greedy and seeded at temperature 0.8, sharing a system
// prompt so later rows start from earlier rows' blocks; one more request
// after them must) each stream
// exactly the text the same request gets alone on the serial lane (one
// request at a time through generate.Generate, no prompt cache).
func TestBatchedLaneEqualsSerial(t *testing.T) {
	d := loadDemo(t)
	serial := d.config()
	serial.Batch, serial.PromptCacheBytes = 1, -1
	_, hsSerial := startServer(t, serial)
	srv, hs := startServer(t, d.config())
	clients := 32
	if raceEnabled {
		clients = 8 // the race detector makes every step ~10× slower
	}
	body := func(i int) map[string]any {
		b := map[string]any{"messages": []any{
			map[string]any{"role": "system", "content": "You are a ship's log. Answer in one sentence, plainly and briefly."},
			map[string]any{"role": "user", "content": fmt.Sprintf("What happened on day %d?", i)}},
			"max_tokens": 12 + i%5, "temperature": 0}
		if i%2 == 1 {
			b["temperature"], b["seed"] = 0.8, i
		}
		return b
	}
	// One more request follows the concurrent burst: rows admitted in the
	// same step all prefill the system prompt themselves (nothing is
	// cached yet), so only this one is sure to start from cached blocks.
	solo := make([]string, clients+1)
	for i := range solo {
		solo[i], _ = streamChat(t, hsSerial.URL, body(i))
	}
	got := make([]string, clients+1)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = streamChat(t, hs.URL, body(i))
		}()
	}
	wg.Wait()
	got[clients], _ = streamChat(t, hs.URL, body(clients))
	for i := range got {
		if got[i] != solo[i] || got[i] == "" {
			t.Errorf("request %d: batched %q, alone %q", i, got[i], solo[i])
		}
	}
	st := srv.Stats()
	if st.Lane != "batched" || st.Batch == nil || st.Batch.Configured != DefaultBatch {
		t.Fatalf("stats: lane %q, batch %+v", st.Lane, st.Batch)
	}
	b := st.Batch
	if b.ActiveRows != 0 || b.PendingRows != 0 || b.Blocks.Used != 0 || b.Blocks.Reserved != 0 {
		t.Errorf("after the load: %+v", *b)
	}
	if b.Blocks.Peak == 0 || b.KVBytes == 0 || b.KVBudgetBytes == 0 || b.Blocks.Cached == 0 {
		t.Errorf("the pool was not used (or keeps no prefix): %+v", *b)
	}
	if st.CachedTokens == 0 || st.CacheHits == 0 {
		t.Errorf("no request reused the shared system prompt's blocks: %+v", st)
	}
}

// TestBatchedLaneOverBudget: a request that could never fit the KV
// budget is refused at once with 400 context_over_budget naming the
// numbers (its tokens, prompt and max_tokens, the blocks it needs, the
// blocks a layer holds); one that fits runs.
func TestBatchedLaneOverBudget(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.KVBudgetBytes, cfg.BlockSize = 1, 8 // one block of 8 tokens per layer
	_, hs := startServer(t, cfg)
	code, out := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": []int{2, 3, 4, 5, 6, 7}, "max_tokens": 10})
	e, _ := out["error"].(map[string]any)
	if code != 400 || e["code"] != "context_over_budget" || !strings.Contains(fmt.Sprint(e["message"]), "needs 16 tokens of KV (prompt 6 + max_tokens 10): 2 blocks of 8 in a layer that holds 1 ") {
		t.Errorf("over budget: %d %v", code, out)
	}
	code, out = post(t, hs.URL+"/v1/completions", map[string]any{"prompt": []int{2, 3, 4}, "max_tokens": 3})
	if code != 200 {
		t.Errorf("within budget: %d %v", code, out)
	}
}

// TestBatchedLaneShutdown: Close lets running rows go on for the shutdown
// timeout, then ends each stream with a finish chunk, an error event and
// [DONE]; a request still queued gets 503.
func TestBatchedLaneShutdown(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.Batch, cfg.ShutdownTimeout = 2, 300*time.Millisecond
	srv, hs := startServer(t, cfg)
	var streams []*bufio.Reader
	for range 2 {
		resp, kill := openStream(t, hs.URL, longBody(d, 3000))
		defer kill()
		defer resp.Body.Close()
		streams = append(streams, bufio.NewReader(resp.Body))
	}
	waitFor(t, "two rows running", func() bool { return srv.Stats().Active == 2 })
	queued := make(chan int, 1)
	go func() {
		code, _ := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": []int{2, 3}, "max_tokens": 3})
		queued <- code
	}()
	waitFor(t, "a third request queued", func() bool { return srv.Stats().QueueDepth == 1 })
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	for i, br := range streams {
		var evs []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				break
			}
			if data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: "); ok {
				evs = append(evs, data)
			}
		}
		n := len(evs)
		if n < 3 || evs[n-1] != "[DONE]" || !strings.Contains(evs[n-2], "shutting down") || !strings.Contains(evs[n-3], `"finish_reason":"length"`) {
			t.Errorf("stream %d ended with %q", i, evs[max(0, n-3):])
		}
		var last map[string]any
		if json.Unmarshal([]byte(evs[n-2]), &last) != nil || last["error"] == nil {
			t.Errorf("stream %d: the error event is %q", i, evs[n-2])
		}
	}
	if code := <-queued; code != 503 {
		t.Errorf("queued request at shutdown: %d, want 503", code)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestBatchedLaneChoices: n > 1 runs as rows of one batch, the later
// choices starting from the blocks the first computed for their prompt,
// and gives the choices the serial lane gives; usage names the lane.
func TestBatchedLaneChoices(t *testing.T) {
	d := loadDemo(t)
	serial := d.config()
	serial.Batch, serial.PromptCacheBytes = 1, -1
	_, hsSerial := startServer(t, serial)
	srv, hs := startServer(t, d.config())
	body := map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Write one line about the sea, the wind and the long voyage home."}},
		"max_tokens": 10, "temperature": 0.8, "seed": 5, "n": 3}
	texts := func(out map[string]any) []string {
		var s []string
		for _, c := range out["choices"].([]any) {
			s = append(s, fmt.Sprint(c.(map[string]any)["message"].(map[string]any)["content"]))
		}
		return s
	}
	code, want := post(t, hsSerial.URL+"/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("serial: %d %v", code, want)
	}
	code, got := post(t, hs.URL+"/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("batched: %d %v", code, got)
	}
	if g, w := texts(got), texts(want); fmt.Sprint(g) != fmt.Sprint(w) || len(g) != 3 {
		t.Errorf("batched choices %q, serial %q", g, w)
	}
	if l := got["usage"].(map[string]any)["lane"]; l != "batched" {
		t.Errorf("usage lane %v", l)
	}
	if l := want["usage"].(map[string]any)["lane"]; l != "serial" {
		t.Errorf("serial usage lane %v", l)
	}
	if st := srv.Stats(); st.CachedTokens == 0 || st.Batch.Blocks.Peak == 0 {
		t.Errorf("the later choices did not start from the first one's blocks: %+v", st)
	}
}

// TestBatchedLaneShutdownOtherStreams: a /v1/completions stream and an
// Anthropic /v1/messages stream cut off at shutdown end properly too: the
// completion with a finish_reason "length" chunk, an error chunk and
// [DONE]; the message with its open block stopped, a message_delta whose
// stop_reason is max_tokens, then an error event.
func TestBatchedLaneShutdownOtherStreams(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.Batch, cfg.ShutdownTimeout = 2, 300*time.Millisecond
	cfg.EOS = nil // (the messages request cannot ban EOS: no end token, so both run until cut off)
	srv, hs := startServer(t, cfg)
	bias := map[string]float64{}
	for _, id := range d.eos {
		bias[fmt.Sprint(id)] = -100
	}
	open := func(path string, body map[string]any) *bufio.Reader {
		raw, _ := json.Marshal(body)
		resp, err := http.Post(hs.URL+path, "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, resp.StatusCode)
		}
		return bufio.NewReader(resp.Body)
	}
	comp := open("/v1/completions", map[string]any{"prompt": "Call me Ishmael.", "max_tokens": 3000, "temperature": 0, "logit_bias": bias, "stream": true})
	msg := open("/v1/messages", map[string]any{"model": cfg.ModelID, "messages": []any{map[string]any{"role": "user", "content": "Tell me a long story."}},
		"max_tokens": 3000, "temperature": 0, "stream": true})
	waitFor(t, "two rows running", func() bool { return srv.Stats().Active == 2 })
	go srv.Close()
	readAll := func(br *bufio.Reader) (events, data []string) {
		var ev string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSpace(line)
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				ev = e
			}
			if dd, ok := strings.CutPrefix(line, "data: "); ok {
				events, data = append(events, ev), append(data, dd)
				ev = ""
			}
		}
	}
	_, cd := readAll(comp)
	n := len(cd)
	if n < 3 || cd[n-1] != "[DONE]" || !strings.Contains(cd[n-2], "shutting down") || !strings.Contains(cd[n-3], `"finish_reason":"length"`) {
		t.Errorf("the completions stream ended with %q", cd[max(0, n-3):])
	}
	me, md := readAll(msg)
	n = len(me)
	if n < 3 || me[n-1] != "error" || !strings.Contains(md[n-1], "shutting down") || me[n-2] != "message_delta" ||
		!strings.Contains(md[n-2], `"stop_reason":"max_tokens"`) || me[n-3] != "content_block_stop" {
		t.Errorf("the messages stream ended with %q %q", me[max(0, n-3):], md[max(0, n-3):])
	}
}
