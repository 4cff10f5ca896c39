package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckLoopback(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:8080", "http://localhost:1", "http://[::1]:9", "http://127.9.0.1"} {
		if _, err := checkLoopback(ok); err != nil {
			t.Errorf("%s refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://10.0.0.1:8080", "http://192.168.1.2", "http://example.com", "https://127.0.0.1", "ftp://127.0.0.1"} {
		if _, err := checkLoopback(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// fakeServer streams max_tokens chunks per request and reports usage,
// recording the prompts it saw and the most requests in flight at once.
type fakeServer struct {
	mu       sync.Mutex
	prompts  [][]int
	inFlight atomic.Int32
	peak     atomic.Int32
	usage    bool
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/completions" {
		http.Error(w, "no", http.StatusNotFound)
		return
	}
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	var req struct {
		Prompt    []int `json:"prompt"`
		MaxTokens int   `json:"max_tokens"`
		Stream    bool  `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Stream {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.prompts = append(f.prompts, req.Prompt)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range req.MaxTokens {
		fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
		fl.Flush()
		time.Sleep(time.Millisecond)
	}
	if f.usage {
		// Usage one lower than the chunks: the client must prefer it.
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":%d}}\n\n", req.MaxTokens-1)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func TestRunCountsAndBounds(t *testing.T) {
	for _, usage := range []bool{false, true} {
		f := &fakeServer{usage: usage}
		srv := httptest.NewServer(f)
		c := config{url: srv.URL, concurrency: 4, requests: 8, idle: 2, promptTokens: 5, maxTokens: 6,
			vocab: 1000, seed: 3, timeout: time.Minute}
		out, err := run(c)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		load, idle := out["load"].(phase), out["idle"].(phase)
		per := 6
		if usage {
			per = 5
		}
		if load.Requests != 8 || load.Errors != 0 || load.Tokens != 8*per {
			t.Errorf("usage %v: load phase %+v", usage, load)
		}
		if idle.Requests != 2 || idle.Tokens != 2*per || idle.TTFTp50 <= 0 || idle.TTFTMax < idle.TTFTMin {
			t.Errorf("usage %v: idle phase %+v", usage, idle)
		}
		if got := f.peak.Load(); got > 4 {
			t.Errorf("%d requests in flight, the bound is 4", got)
		}
		if len(f.prompts) != 1+2+8 {
			t.Fatalf("server saw %d requests, want 11 (warm-up, idle, load)", len(f.prompts))
		}
		seen := map[string]bool{}
		for _, p := range f.prompts {
			if len(p) != 5 {
				t.Fatalf("prompt of %d tokens", len(p))
			}
			for _, id := range p {
				if id < 259 || id >= 1000 {
					t.Fatalf("prompt id %d outside [259, 1000)", id)
				}
			}
			key := fmt.Sprint(p)
			if seen[key] {
				t.Errorf("prompt %v sent twice; every request should miss the prefix cache", p)
			}
			seen[key] = true
		}
	}
}

func TestRunReportsErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	_, err := run(config{url: srv.URL, concurrency: 2, requests: 2, idle: 1, promptTokens: 3, maxTokens: 2, vocab: 500, timeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("a failing server gave %v", err)
	}
	if _, err := run(config{url: "http://10.1.2.3:80", concurrency: 1, promptTokens: 1, maxTokens: 1, vocab: 500, timeout: time.Second}); err == nil {
		t.Error("a non-loopback URL was accepted")
	}
	if _, err := run(config{url: srv.URL, concurrency: 0, promptTokens: 1, maxTokens: 1, vocab: 500, timeout: time.Second}); err == nil {
		t.Error("concurrency 0 was accepted")
	}
}
