// Command loadclient measures an OpenAI-compatible completion server (mlxgo
// serve, llama-server) under concurrent streaming load, on loopback only:
//
//	loadclient -url http://127.0.0.1:8080 -concurrency 8 -requests 16 \
//	    -prompt-tokens 256 -max-tokens 128
//
// Each request sends a distinct random prompt as token ids to
// /v1/completions with stream: true and greedy sampling. First an idle
// phase runs -idle requests one at a time (idle time to first token), then
// the load phase keeps -concurrency requests in flight until -requests
// have finished. It prints one JSON object: per phase the time to first
// token (p50, min, max), the completion tokens, the wall time and the
// aggregate tokens/s (all completion tokens over the phase's wall time),
// and one stream's decode tokens/s (tokens after the first over the time
// after the first). Request count and time are bounded (-requests,
// -timeout); only loopback addresses are accepted.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// config is the command line.
type config struct {
	url                     string
	concurrency, requests   int
	idle                    int
	promptTokens, maxTokens int
	vocab                   int
	seed                    uint64
	timeout                 time.Duration
	model                   string
}

// result is one finished request.
type result struct {
	ttft    time.Duration // request sent → first chunk with text
	total   time.Duration
	tokens  int // completion tokens (usage when reported, else streamed chunks)
	chunks  int
	err     error
	started time.Time
}

// phase summarises a set of requests.
type phase struct {
	Requests       int     `json:"requests"`
	Concurrency    int     `json:"concurrency"`
	Errors         int     `json:"errors"`
	TTFTp50        float64 `json:"ttft_p50_s"`
	TTFTMin        float64 `json:"ttft_min_s"`
	TTFTMax        float64 `json:"ttft_max_s"`
	Tokens         int     `json:"completion_tokens"`
	Wall           float64 `json:"wall_s"`
	AggregateTPS   float64 `json:"aggregate_tps"`
	StreamDecodeTP float64 `json:"stream_decode_tps_p50"`
	FirstError     string  `json:"first_error,omitempty"`
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "http://127.0.0.1:8080", "server base URL (loopback only)")
	flag.IntVar(&c.concurrency, "concurrency", 8, "requests in flight during the load phase")
	flag.IntVar(&c.requests, "requests", 16, "requests of the load phase")
	flag.IntVar(&c.idle, "idle", 3, "requests sent one at a time before the load phase")
	flag.IntVar(&c.promptTokens, "prompt-tokens", 256, "prompt length in tokens")
	flag.IntVar(&c.maxTokens, "max-tokens", 128, "completion tokens per request")
	flag.IntVar(&c.vocab, "vocab", 32000, "prompt ids are drawn from [259, vocab)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the prompts")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Minute, "bound on the whole run")
	flag.StringVar(&c.model, "model", "", "model field of the requests (optional)")
	flag.Parse()
	out, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

// checkLoopback refuses any URL whose host is not a loopback address.
func checkLoopback(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("url %q: want http://", raw)
	}
	host := u.Hostname()
	if host == "localhost" {
		return u, nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("url %q: only loopback addresses are load-tested", raw)
	}
	return u, nil
}

func run(c config) (map[string]any, error) {
	u, err := checkLoopback(c.url)
	if err != nil {
		return nil, err
	}
	switch {
	case c.concurrency < 1 || c.concurrency > 64:
		return nil, errors.New("-concurrency must be 1..64")
	case c.requests < 0 || c.requests > 1000 || c.idle < 0 || c.idle > 100:
		return nil, errors.New("-requests must be 0..1000 and -idle 0..100")
	case c.promptTokens < 1 || c.maxTokens < 1 || c.vocab <= 259:
		return nil, errors.New("-prompt-tokens and -max-tokens must be ≥ 1, -vocab > 259")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	endpoint := u.JoinPath("/v1/completions").String()
	// a fresh connection per request: a server that closes idle keep-alive
	// connections (llama-server does, after seconds) would otherwise fail a
	// POST sent on one it has just closed ("server closed idle connection")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
	n := 0
	prompt := func() []int {
		r := rand.New(rand.NewPCG(c.seed, uint64(n)))
		n++
		ids := make([]int, c.promptTokens)
		for i := range ids {
			ids[i] = 259 + r.IntN(c.vocab-259)
		}
		return ids
	}
	out := map[string]any{"url": c.url, "prompt_tokens": c.promptTokens, "max_tokens": c.maxTokens}
	// A warm-up request, not counted: the first request of a fresh
	// server pays for page faults and lazy setup.
	if r := one(ctx, client, endpoint, c, prompt()); r.err != nil {
		return nil, fmt.Errorf("warm-up request: %w", r.err)
	}
	var idle []result
	tic := time.Now()
	for range c.idle {
		idle = append(idle, one(ctx, client, endpoint, c, prompt()))
	}
	out["idle"] = summarise(idle, 1, time.Since(tic))
	prompts := make([][]int, c.requests)
	for i := range prompts {
		prompts[i] = prompt()
	}
	var mu sync.Mutex
	var load []result
	next := 0
	var wg sync.WaitGroup
	tic = time.Now()
	for range c.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= len(prompts) || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				p := prompts[next]
				next++
				mu.Unlock()
				r := one(ctx, client, endpoint, c, p)
				mu.Lock()
				load = append(load, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	out["load"] = summarise(load, c.concurrency, time.Since(tic))
	return out, ctx.Err()
}

// one sends one streaming completion and reads it to the end.
func one(ctx context.Context, client *http.Client, endpoint string, c config, prompt []int) result {
	body := map[string]any{"prompt": prompt, "max_tokens": c.maxTokens, "stream": true, "temperature": 0,
		"stream_options": map[string]any{"include_usage": true}}
	if c.model != "" {
		body["model"] = c.model
	}
	raw, _ := json.Marshal(body)
	r := result{started: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(raw))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		r.err = err
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		r.err = fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))
		return r
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	usage := -1
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			break
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error any `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			r.err = fmt.Errorf("bad event %q: %w", data, err)
			return r
		}
		if ev.Error != nil {
			r.err = fmt.Errorf("server error event: %v", ev.Error)
			return r
		}
		if ev.Usage != nil && ev.Usage.CompletionTokens > 0 {
			usage = ev.Usage.CompletionTokens
		}
		if len(ev.Choices) > 0 {
			if r.chunks == 0 {
				r.ttft = time.Since(r.started)
			}
			r.chunks++
		}
	}
	if err := sc.Err(); err != nil {
		r.err = err
		return r
	}
	r.total = time.Since(r.started)
	r.tokens = r.chunks
	if usage >= 0 {
		r.tokens = usage
	}
	if r.chunks == 0 {
		r.err = errors.New("the stream carried no completion chunk")
	}
	return r
}

func summarise(rs []result, concurrency int, wall time.Duration) phase {
	p := phase{Requests: len(rs), Concurrency: concurrency, Wall: wall.Seconds()}
	var ttft, decode []float64
	for _, r := range rs {
		if r.err != nil {
			p.Errors++
			if p.FirstError == "" {
				p.FirstError = r.err.Error()
			}
			continue
		}
		ttft = append(ttft, r.ttft.Seconds())
		p.Tokens += r.tokens
		if r.tokens > 1 && r.total > r.ttft {
			decode = append(decode, float64(r.tokens-1)/(r.total-r.ttft).Seconds())
		}
	}
	if len(ttft) > 0 {
		p.TTFTp50, p.TTFTMin, p.TTFTMax = median(ttft), slices.Min(ttft), slices.Max(ttft)
	}
	if len(decode) > 0 {
		p.StreamDecodeTP = median(decode)
	}
	if wall > 0 {
		p.AggregateTPS = float64(p.Tokens) / wall.Seconds()
	}
	return p
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
