package serve

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPublicAddr(t *testing.T) {
	for s, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1111": true, "93.184.216.34": true,
		"127.0.0.1": false, "127.8.9.10": false, "::1": false, "10.1.2.3": false, "172.16.0.9": false,
		"192.168.1.1": false, "169.254.169.254": false, "0.0.0.0": false, "::": false, "100.64.1.1": false,
		"fd00::1": false, "fe80::1": false, "::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false,
		"224.0.0.1": false, "ff02::1": false, "255.255.255.255": false, "64:ff9b::a00:1": false,
		"2002:7f00:1::": false, "::7f00:1": false, "2001:0:4136:e378:8000:63bf:3fff:fdd2": false,
	} {
		if got := publicAddr(netip.MustParseAddr(s)); got != want {
			t.Errorf("publicAddr(%s) = %v, want %v", s, got, want)
		}
	}
}

// TestMediaFetch: a server on loopback is refused by default (by IP and
// by a name resolving to it, or to a public and a private address); an
// allow-list set by the test permits it, and then the fetch returns the
// body, and a slow answer, an oversized body and a 404 are errors naming
// the problem.
func TestMediaFetch(t *testing.T) {
	release := make(chan struct{})
	big := strings.Repeat("x", 2000)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			fmt.Fprint(w, "IMAGE")
		case "/big":
			fmt.Fprint(w, big)
		case "/slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/hop":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer hs.Close()
	defer close(release)
	port := hs.URL[strings.LastIndex(hs.URL, ":")+1:]
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "loop.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		case "mixed.test": // one public, one loopback: refused as a whole
			return []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, fmt.Errorf("no such host %s", host)
	}
	def := &MediaFetch{resolve: resolve}
	for _, u := range []string{hs.URL + "/ok", "http://loop.test:" + port + "/ok", "http://mixed.test:" + port + "/ok",
		"http://[::1]:" + port + "/ok", "http://localhost:" + port + "/ok"} {
		f := def
		if strings.Contains(u, "localhost") {
			f = &MediaFetch{} // the real resolver
		}
		_, err := f.fetch(u, "p")
		if err == nil || !strings.Contains(err.Error(), "private or loopback") {
			t.Errorf("%s: %v, want a refusal", u, err)
		}
	}
	loop := func(a netip.Addr) bool { return a.IsLoopback() }
	f := &MediaFetch{allow: loop, resolve: resolve, Timeout: 200 * time.Millisecond, MaxBytes: 1000}
	for _, u := range []string{hs.URL + "/ok", "http://loop.test:" + port + "/ok", hs.URL + "/hop"} {
		body, err := f.fetch(u, "p")
		if err != nil || string(body) != "IMAGE" {
			t.Errorf("%s: %q, %v", u, body, err)
		}
	}
	for path, want := range map[string]string{"/slow": "timed out", "/big": "too large", "/missing": "404", "/file": "redirect"} {
		_, err := f.fetch(hs.URL+path, "p")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", path, err, want)
		}
	}
	for _, u := range []string{"ftp://example.com/a.png", "http://", "gopher://x"} {
		if _, err := f.fetch(u, "p"); err == nil || !strings.Contains(err.Error(), "unsupported media URL") {
			t.Errorf("%s: %v", u, err)
		}
	}
}

// TestServeMediaFetch: with MediaFetch set, an image_url naming an http
// URL is fetched — refused on loopback by default, and with the test's
// allow-list the fixture's image request equals the data: URL's reply.
func TestServeMediaFetch(t *testing.T) {
	s := newMMServe(t)
	pr := s.gold.Prompts["image"]
	png, err := os.ReadFile(filepath.Join(mmFixture, "media", pr.Image+".png"))
	if err != nil {
		t.Fatal(err)
	}
	img := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(png) }))
	defer img.Close()
	parts := splitPrompt(pr.IDs)
	req := func(url string) map[string]any {
		return map[string]any{"model": "gemma4-mm", "max_tokens": len(pr.Greedy), "temperature": 0,
			"messages": []any{map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": parts[0] + " "},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}},
				map[string]any{"type": "text", "text": " " + parts[1]},
			}}}}
	}
	cfg := s.cfg
	cfg.MediaFetch = &MediaFetch{}
	_, hs := startServer(t, cfg)
	code, body := post(t, hs.URL+"/v1/chat/completions", req(img.URL+"/a.png"))
	e, _ := body["error"].(map[string]any)
	if code != 400 || !strings.Contains(fmt.Sprint(e["message"]), "private or loopback") {
		t.Fatalf("loopback URL: status %d, %v", code, body)
	}
	cfg.MediaFetch = &MediaFetch{allow: func(a netip.Addr) bool { return a.IsLoopback() }}
	_, hs2 := startServer(t, cfg)
	want := s.tok.Decode(pr.Greedy, false)
	code, body = post(t, hs2.URL+"/v1/chat/completions", req(img.URL+"/a.png"))
	if got := chatText(t, code, body); got != want {
		t.Fatalf("fetched image: reply %q, HF's greedy %q", got, want)
	}
	code, body = post(t, hs2.URL+"/v1/messages", map[string]any{"model": "gemma4-mm", "max_tokens": len(pr.Greedy), "temperature": 0,
		"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": parts[0] + " "},
			map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": img.URL + "/a.png"}},
			map[string]any{"type": "text", "text": " " + parts[1]},
		}}}})
	if code != 200 {
		t.Fatalf("messages: status %d: %v", code, body)
	}
	if got := body["content"].([]any)[0].(map[string]any)["text"].(string); got != want {
		t.Fatalf("messages with a url source: reply %q, HF's greedy %q", got, want)
	}
}
