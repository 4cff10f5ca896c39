package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// longBody is a streaming chat request that would run for a long time:
// the demo model's EOS ids are banned.
func longBody(d *demoModel, maxTokens int) map[string]any {
	bias := map[string]float64{}
	for _, id := range d.eos {
		bias[fmt.Sprint(id)] = -100
	}
	return map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Tell me a long story."}},
		"max_tokens": maxTokens, "temperature": 0, "logit_bias": bias, "stream": true}
}

// openStream starts a streaming request and returns its response once
// the headers arrived (the request is queued or running), with a cancel
// that kills the client.
func openStream(t *testing.T, url string, body map[string]any) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		cancel()
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp, cancel
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestConcurrentStreams: 32 concurrent streaming clients all complete with
// their solo text while one killed client is cancelled; the engine's
// arrays return to the baseline afterwards (memory stays bounded).
func TestConcurrentStreams(t *testing.T) {
	d := loadDemo(t)
	base := tensor.LiveArrays()
	cfg := d.config()
	cfg.PromptCacheBytes = -1 // a cache hit changes the prefill split, hence bf16 rounding
	srv, hs := startServer(t, cfg)
	const clients = 32
	body := func(i int) map[string]any {
		return map[string]any{"messages": []any{map[string]any{"role": "user", "content": fmt.Sprintf("Tell me about ship number %d.", i)}},
			"max_tokens": 16, "temperature": 0}
	}
	solo := make([]string, clients)
	for i := range solo {
		solo[i], _ = streamChat(t, hs.URL, body(i))
	}
	// The killed client: streams until it has some text, then disconnects.
	resp, kill := openStream(t, hs.URL, longBody(d, 4000))
	var wg sync.WaitGroup
	got := make([]string, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = streamChat(t, hs.URL, body(i))
		}()
	}
	br := bufio.NewReader(resp.Body)
	for n := 0; n < 5; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			n++
		}
	}
	kill()
	resp.Body.Close()
	wg.Wait()
	for i := range clients {
		if got[i] != solo[i] || got[i] == "" {
			t.Errorf("client %d: concurrent %q, solo %q", i, got[i], solo[i])
		}
	}
	waitFor(t, "the killed stream to be cancelled", func() bool { return srv.Stats().Cancelled == 1 })
	st := srv.Stats()
	if st.Completed != 2*clients || st.Active != 0 || st.QueueDepth != 0 {
		t.Errorf("stats after the load: %+v", st)
	}
	hs.Close()
	srv.Close()
	if live := tensor.LiveArrays(); live != base {
		t.Errorf("live arrays %d after the server closed, %d before it started", live, base)
	}
}

// TestQueueFullAndKilledClient: with a queue of one, a third request gets
// 429 with Retry-After; killing the running client frees the engine for
// the queued one, and the queue then has room again.
func TestQueueFullAndKilledClient(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.QueueSize = 1
	// the serial lane: one request runs, the next waits in the queue (the
	// batched lane would admit B beside A while the KV budget has room)
	cfg.Batch = 1
	srv, hs := startServer(t, cfg)
	respA, killA := openStream(t, hs.URL, longBody(d, 4000))
	bufio.NewReader(respA.Body).ReadString('\n') // A is running
	waitFor(t, "A to run", func() bool { return srv.Stats().Active == 1 })
	// B waits in the queue.
	type res struct {
		text string
	}
	bDone := make(chan res, 1)
	go func() {
		text, _ := streamChat(t, hs.URL, map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 4, "temperature": 0})
		bDone <- res{text}
	}()
	waitFor(t, "B to queue", func() bool { return srv.Stats().QueueDepth == 1 })
	raw, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "Hi"}}, "max_tokens": 4})
	resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("full queue: status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	killA()
	respA.Body.Close()
	select {
	case r := <-bDone:
		if r.text == "" {
			t.Error("B produced no text")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B never ran after A was killed")
	}
	code, out := post(t, hs.URL+"/v1/chat/completions", string(raw))
	if code != 200 {
		t.Errorf("after the kill: %d %v", code, out)
	}
	if st := srv.Stats(); st.Cancelled != 1 || st.Rejected != 1 {
		t.Errorf("stats %+v", st)
	}
}
