package serve

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// do sends one request and returns its status, headers and body.
func do(t *testing.T, method, url, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

// errorShape says which API's error object body is: "openai",
// "anthropic" or "".
func errorShape(body string) string {
	switch {
	case strings.Contains(body, `"type":"error"`) && strings.Contains(body, `"error":{"type":`):
		return "anthropic"
	case strings.Contains(body, `"error":{"message":`) && strings.Contains(body, `"param"`) && strings.Contains(body, `"code"`):
		return "openai"
	}
	return ""
}

// TestAPIKeyRequired: with a key set, no route but /health answers
// without it (401 in the route's API's shape), and both header styles
// carry it.
func TestAPIKeyRequired(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.APIKeys = []string{"sekret-key"}
	_, hs := startServer(t, cfg)
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	msgs := `{"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/models", ""}, {"GET", "/v1/models/mlxgo-demo", ""}, {"GET", "/stats", ""}, {"GET", "/metrics", ""},
		{"POST", "/v1/chat/completions", chat}, {"POST", "/chat/completions", chat}, {"POST", "/v1/completions", `{"prompt":"a","max_tokens":2}`},
		{"POST", "/v1/messages", msgs}, {"POST", "/v1/messages/count_tokens", msgs}, {"POST", "/v1/embeddings", `{"input":"a"}`},
		{"POST", "/v1/responses", `{"input":"a","max_output_tokens":2}`}, {"GET", "/v1/responses/resp_x", ""}, {"GET", "/nope", ""},
	}
	for _, r := range routes {
		want := "openai"
		if anthropicRoute(r.path) {
			want = "anthropic"
		}
		for _, hdr := range []map[string]string{nil, {"Authorization": "Bearer wrong"}, {"x-api-key": "wrong"}, {"Authorization": "sekret-key"}} {
			code, _, body := do(t, r.method, hs.URL+r.path, r.body, hdr)
			if code != 401 || errorShape(body) != want {
				t.Errorf("%s %s with %v: %d %s, want 401 in %s shape", r.method, r.path, hdr, code, body, want)
			}
		}
		for _, hdr := range []map[string]string{{"Authorization": "Bearer sekret-key"}, {"x-api-key": "sekret-key"}} {
			if code, _, body := do(t, r.method, hs.URL+r.path, r.body, hdr); code == 401 {
				t.Errorf("%s %s with %v: 401 %s", r.method, r.path, hdr, body)
			}
		}
	}
	if code, _, _ := do(t, "GET", hs.URL+"/health", "", nil); code != 200 {
		t.Errorf("/health without a key: %d", code)
	}
}

// TestForeignHostAndOrigin: a Host outside the allow-list and an Origin
// not allowed are refused; an allowed origin gets CORS headers and its
// preflight answered; a body that is not JSON-typed is 415.
func TestForeignHostAndOrigin(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.AllowedHosts = LoopbackHosts
	cfg.AllowedOrigins = []string{"http://app.example:3000"}
	_, hs := startServer(t, cfg)
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for _, h := range []string{"evil.example", "evil.example:80", "127.0.0.1.evil.example"} {
		if code, _, body := do(t, "POST", hs.URL+"/v1/chat/completions", chat, map[string]string{"Host": h}); code != 403 || errorShape(body) != "openai" {
			t.Errorf("Host %s: %d %s", h, code, body)
		}
		if code, _, body := do(t, "POST", hs.URL+"/v1/messages", `{}`, map[string]string{"Host": h}); code != 403 || errorShape(body) != "anthropic" {
			t.Errorf("Host %s on /v1/messages: %d %s", h, code, body)
		}
	}
	if code, _, _ := do(t, "GET", hs.URL+"/v1/models", "", map[string]string{"Host": "localhost:8080"}); code != 200 {
		t.Errorf("Host localhost: %d", code)
	}
	code, hdr, body := do(t, "POST", hs.URL+"/v1/chat/completions", chat, map[string]string{"Origin": "http://evil.example"})
	if code != 403 || hdr.Get("Access-Control-Allow-Origin") != "" || errorShape(body) != "openai" {
		t.Errorf("foreign Origin: %d %v %s", code, hdr, body)
	}
	code, hdr, _ = do(t, "OPTIONS", hs.URL+"/v1/chat/completions", "", map[string]string{"Origin": "http://app.example:3000",
		"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, authorization"})
	if code != 204 || hdr.Get("Access-Control-Allow-Origin") != "http://app.example:3000" || !strings.Contains(hdr.Get("Access-Control-Allow-Methods"), "POST") ||
		hdr.Get("Access-Control-Allow-Headers") != "content-type, authorization" {
		t.Errorf("preflight: %d %v", code, hdr)
	}
	code, hdr, _ = do(t, "POST", hs.URL+"/v1/chat/completions", chat, map[string]string{"Origin": "http://app.example:3000"})
	if code != 200 || hdr.Get("Access-Control-Allow-Origin") != "http://app.example:3000" {
		t.Errorf("allowed origin: %d %v", code, hdr)
	}
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", ""} {
		req, _ := http.NewRequest("POST", hs.URL+"/v1/chat/completions", strings.NewReader(chat))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 415 || errorShape(string(raw)) != "openai" {
			t.Errorf("Content-Type %q: %d %s", ct, resp.StatusCode, raw)
		}
	}
}

// TestNoPathInResponses: no response, error or success, carries a
// filesystem path: not the model's folder, not the working directory, not
// one from a failure inside generation.
func TestNoPathInResponses(t *testing.T) {
	d := loadDemo(t)
	cfg := scriptedConfig(t, d)
	cfg.Model = pathPanicky{newScripted(d)}
	_, hs := startServer(t, cfg)
	_, demo := startServer(t, d.config())
	cwd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	forbidden := []string{d.dir, filepath.Dir(d.dir), cwd, "/secret/models"}
	if home != "" && home != "/" {
		forbidden = append(forbidden, home)
	}
	var bodies []string
	for _, base := range []string{hs.URL, demo.URL} {
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3}`},
			{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3,"stream":true}`},
			{"POST", "/v1/messages", `{"max_tokens":3,"messages":[{"role":"user","content":"Hello"}]}`},
			{"POST", "/v1/messages", `{"max_tokens":3,"stream":true,"messages":[{"role":"user","content":"Hello"}]}`},
			{"POST", "/v1/completions", `{"prompt":"Hello","max_tokens":3}`},
			{"POST", "/v1/chat/completions", `{"model":"/etc/passwd","messages":[]}`},
			{"GET", "/v1/models", ""}, {"GET", "/v1/models/nope", ""}, {"GET", "/stats", ""}, {"GET", "/metrics", ""},
			{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"$ref":"file:///etc/passwd"}}}}`},
		} {
			_, _, body := do(t, r.method, base+r.path, r.body, nil)
			bodies = append(bodies, body)
		}
	}
	for _, b := range bodies {
		for _, f := range forbidden {
			if f != "" && strings.Contains(b, f) {
				t.Errorf("response carries the path %s: %.300s", f, b)
			}
		}
	}
}

// pathPanicky fails generation with a message naming a file, as a
// loader or kernel error might.
type pathPanicky struct{ *scriptedModel }

func (p pathPanicky) VocabSize() int { return p.scriptedModel.VocabSize() }

func (p pathPanicky) Logits(h *tensor.Array) (*tensor.Array, error) {
	panic("open /secret/models/weights/model-00001.safetensors: input/output error")
}

// TestSlowConnectionsCut: connections that dribble their headers or
// their body are cut at their timeouts, an oversized header block is
// refused, and the server answers a normal request afterwards. Counts
// and time are bounded; everything stays on loopback.
func TestSlowConnectionsCut(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.BodyTimeout = 300 * time.Millisecond
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = LimitListener(ln, 64)
	hsrv := srv.HTTPServer(HTTPLimits{ReadHeaderTimeout: 300 * time.Millisecond, MaxHeaderBytes: 8 << 10})
	go func() { _ = hsrv.Serve(ln) }()
	defer hsrv.Close()
	addr := ln.Addr().String()
	const n = 12
	var wg sync.WaitGroup
	results := make(chan string, 2*n)
	dribble := func(head string, slow string) {
		defer wg.Done()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			results <- "dial: " + err.Error()
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a safety net, far beyond the timeouts
		if _, err := io.WriteString(c, head); err != nil {
			results <- "cut" // cut while writing the head: fine
			return
		}
		stop := make(chan struct{})
		go func() {
			for i := 0; i < len(slow); i++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := c.Write([]byte{slow[i]}); err != nil {
					return
				}
			}
		}()
		defer close(stop)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		switch {
		case err != nil && strings.Contains(err.Error(), "timeout"):
			results <- "not cut: " + err.Error()
		case err != nil:
			results <- "cut" // closed without a response
		default:
			resp.Body.Close()
			results <- fmt.Sprintf("status %d", resp.StatusCode)
		}
	}
	for i := 0; i < n; i++ {
		wg.Add(2)
		go dribble("", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: "+strings.Repeat("a", 400))
		go dribble("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{", strings.Repeat(" ", 400))
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r != "cut" && r != "status 408" && r != "status 400" {
			t.Errorf("slow connection: %s", r)
		}
	}
	// A header flood: more header bytes than allowed.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	var b strings.Builder
	b.WriteString("GET /v1/models HTTP/1.1\r\nHost: x\r\n")
	for i := 0; i < 400; i++ {
		fmt.Fprintf(&b, "X-Flood-%d: %s\r\n", i, strings.Repeat("f", 60))
	}
	b.WriteString("\r\n")
	_, _ = io.WriteString(c, b.String())
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("header flood: status %d", resp.StatusCode)
		}
	}
	c.Close()
	code, _, body := do(t, "GET", "http://"+addr+"/v1/models", "", nil)
	if code != 200 {
		t.Errorf("after the slow connections: %d %s", code, body)
	}
}
