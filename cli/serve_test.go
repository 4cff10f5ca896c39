package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildMlxgo builds the binary once per test binary run.
func buildMlxgo(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mlxgo")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var listenRE = regexp.MustCompile(`on (http://[0-9.:]+)`)

// startMlxgo starts `mlxgo args...` and returns the process, the base URL
// it printed, and when the process was started.
func startMlxgo(t testing.TB, bin string, args ...string) (*exec.Cmd, string, time.Time) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil && !sent {
				urlc <- m[1]
				sent = true
			}
		}
		if !sent {
			close(urlc)
		}
	}()
	select {
	case u, ok := <-urlc:
		if !ok {
			t.Fatal("mlxgo exited without listening")
		}
		return cmd, u, start
	case <-time.After(60 * time.Second):
		t.Fatal("mlxgo did not start listening")
	}
	return nil, "", start
}

// waitHealthy polls /health and returns when it first answers 200.
func waitHealthy(t testing.TB, url string) time.Time {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return time.Now()
			}
		}
	}
	t.Fatal("/health never answered 200")
	return time.Time{}
}

// TestServeBinary runs the real binary with no verb (serve is the
// default) on the embedded demo model with --token-budget 48 (which
// /stats.batch reports), chats with it, and stops it with
// SIGINT.
func TestServeBinary(t *testing.T) {
	bin := buildMlxgo(t)
	cmd, url, _ := startMlxgo(t, bin, "--port", "0", "--backend", "cpu", "--max-tokens", "8", "--token-budget", "48")
	waitHealthy(t, url)
	var stats struct {
		Batch struct {
			TokenBudget int `json:"token_budget"`
		} `json:"batch"`
	}
	if resp, err := http.Get(url + "/stats"); err != nil {
		t.Fatal(err)
	} else {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if json.Unmarshal(raw, &stats) != nil || stats.Batch.TokenBudget != 48 {
			t.Errorf("--token-budget 48: /stats %s", raw)
		}
	}
	body := `{"messages":[{"role":"user","content":"Hello"}],"temperature":0}`
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Model   string `json:"model"`
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(raw, &out) != nil || out.Model != "mlxgo-demo" || len(out.Choices) != 1 || out.Usage.CompletionTokens > 8 {
		t.Fatalf("chat: %d %s", resp.StatusCode, raw)
	}
	resp, err = http.Post(url+"/v1/models", "application/json", bytes.NewReader(nil))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST /v1/models: %d, want 405", resp.StatusCode)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGINT: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("mlxgo did not exit after SIGINT")
	}
}

func TestServeFlags(t *testing.T) {
	if defaultVerb != "serve" {
		t.Errorf("default verb %q", defaultVerb)
	}
	for _, args := range [][]string{{"serve", "--port", "70000"}, {"serve", "--log-level", "LOUD"}, {"serve", "extra"}, {"serve", "--chat-template-args", "{"},
		{"serve", "--embedding-pooling", "cls"}, {"serve", "--response-store-ttl", "0s"}, {"serve", "--matryoshka-min-dims", "-1"},
		{"serve", "--token-budget", "-1"}} {
		if code, _, _ := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := run(t, "serve", "--model", filepath.Join(t.TempDir(), "nope")); code == 0 || !strings.Contains(errOut, "does not exist") {
		t.Errorf("missing model: %d %q", code, errOut)
	}
}

// BenchmarkServeStartup measures process start to the first successful
// /health on the demo model (the CPU backend).
//
//	go test ./cli -run '^$' -bench ServeStartup -benchtime 5x
func BenchmarkServeStartup(b *testing.B) {
	bin := buildMlxgo(b)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		cmd, url, start := startMlxgo(b, bin, "--port", "0", "--backend", "cpu")
		total += waitHealthy(b, url).Sub(start)
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms_to_health")
}

// procCPU is the CPU time (user + system) process pid has used so far,
// from /proc/PID/stat, or -1 where the system does not say.
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return -1
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // fields from the state on
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(ut+st) * time.Second / 100 // clock ticks (USER_HZ, 100 on Linux)
}

// TestServeSSDRestart: the restart test of the SSD cache, with the real
// binary and a real signal. A prompt of over 2,000 tokens is answered
// cold; SIGTERM stops the server (no flush asked: shutdown flushes the
// tier) and it exits 0; restarted over the same --ssd-cache folder, the
// same request takes at least 90% of its prompt from the file and gives
// the cold answer. A byte flipped in the file is caught at the next
// restart: the file is set aside, nothing is served from it, and the
// answer is computed again, the same. The server's CPU time for the
// restored request against the cold one is logged (the TTFT bar
// is 0.1×; it is not asserted, timings being noise here).
func TestServeSSDRestart(t *testing.T) {
	bin := buildMlxgo(t)
	dir := t.TempDir()
	prompt := strings.Repeat("Call me Ishmael. Some years ago, never mind how long precisely, I thought I would sail about a little. ", 90)
	type result struct {
		text           string
		prompt, cached int
		cpu            time.Duration
	}
	serveOnce := func() result {
		t.Helper()
		cmd, url, _ := startMlxgo(t, bin, "--port", "0", "--backend", "cpu", "--ssd-cache", dir)
		waitHealthy(t, url)
		cpu0 := procCPU(cmd.Process.Pid)
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0})
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cpu := procCPU(cmd.Process.Pid) - cpu0
		var out struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(raw, &out) != nil || len(out.Choices) != 1 {
			t.Fatalf("completion: %d %s", resp.StatusCode, raw)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("exit after SIGTERM: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("mlxgo did not exit after SIGTERM")
		}
		return result{out.Choices[0].Text, out.Usage.PromptTokens, out.Usage.Details.CachedTokens, cpu}
	}
	cold := serveOnce()
	if cold.prompt < 2000 || cold.cached != 0 {
		t.Fatalf("cold run: %d prompt tokens, %d cached", cold.prompt, cold.cached)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.kvc"))
	if len(files) != 1 {
		t.Fatalf("after SIGTERM the SSD cache holds %v", files)
	}
	warm := serveOnce()
	if warm.text != cold.text || float64(warm.cached) < 0.9*float64(warm.prompt) {
		t.Errorf("after the restart: %q with %d of %d prompt tokens cached; cold %q", warm.text, warm.cached, warm.prompt, cold.text)
	}
	if cold.cpu > 0 && warm.cpu >= 0 {
		t.Logf("%d-token prompt: server CPU %v cold, %v restored from the SSD cache (%.3f×)", cold.prompt, cold.cpu, warm.cpu, float64(warm.cpu)/float64(cold.cpu))
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x04 // inside the arrays
	if err := os.WriteFile(files[0], raw, 0o644); err != nil {
		t.Fatal(err)
	}
	again := serveOnce()
	if again.text != cold.text || again.cached != 0 {
		t.Errorf("with a flipped byte: %q with %d cached tokens; cold %q", again.text, again.cached, cold.text)
	}
	if q, _ := filepath.Glob(filepath.Join(dir, "*.quarantined")); len(q) != 1 {
		t.Errorf("quarantined files: %v", q)
	}
}
