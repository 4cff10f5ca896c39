package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkServeConcurrency measures the batched lane under load: the
// aggregate decode tokens/s of 8 concurrent streams against one stream
// alone, and the time to first token of a request that arrives while the
// 8 are decoding against one that arrives at an idle server (the median of
// three one-token probes each), in the same run. Each stream asks for 128
// tokens with EOS banned, on its own prompt (the prefix cache sees no
// repeat).
//
//	go test ./serve -run '^$' -bench ServeConcurrency -benchtime 3x
func BenchmarkServeConcurrency(b *testing.B) {
	d := loadDemo(b)
	_, hs := startServer(b, d.config())
	const tokens = 128
	bias := map[string]float64{}
	for _, id := range d.eos {
		bias[fmt.Sprint(id)] = -100
	}
	req := 0
	var mu sync.Mutex
	streamed := 0 // content chunks received so far, over every stream
	stream := func(maxTokens int) (ttft time.Duration, chunks int, err error) {
		mu.Lock()
		req++
		id := req
		mu.Unlock()
		body, _ := json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Story %d: tell me about the sea.", id)}},
			"max_tokens": maxTokens, "temperature": 0, "logit_bias": bias, "stream": true})
		start := time.Now()
		resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, `data: {`) && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"role"`) {
				if chunks == 0 {
					ttft = time.Since(start)
				}
				chunks++
				mu.Lock()
				streamed++
				mu.Unlock()
			}
		}
		return ttft, chunks, sc.Err()
	}
	// run streams n requests at once and returns their aggregate tokens/s;
	// with probe, once every stream is decoding, three one-token requests
	// are sent one after another and their times to first token returned.
	run := func(n int, probe bool) (tps float64, probes []time.Duration) {
		var wg sync.WaitGroup
		total := 0
		mu.Lock()
		streamed = 0
		mu.Unlock()
		start := time.Now()
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, c, err := stream(tokens)
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				total += c
				mu.Unlock()
			}()
		}
		if probe {
			for {
				mu.Lock()
				s := streamed
				mu.Unlock()
				if s >= 2*n {
					break
				}
				time.Sleep(time.Millisecond)
			}
			for range 3 {
				tt, _, err := stream(1)
				if err != nil {
					b.Error(err)
				}
				probes = append(probes, tt)
			}
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return float64(total) / time.Since(start).Seconds(), probes
	}
	var one, eight, idle, loaded float64
	for range b.N {
		t1, _ := run(1, false)
		_, idleP := run(0, true)
		t8, loadP := run(8, true)
		slices.Sort(idleP)
		slices.Sort(loadP)
		one += t1
		eight += t8
		idle += float64(idleP[1].Microseconds()) / 1000
		loaded += float64(loadP[1].Microseconds()) / 1000
	}
	n := float64(b.N)
	b.ReportMetric(one/n, "tok/s_1")
	b.ReportMetric(eight/n, "tok/s_8")
	b.ReportMetric(eight/one, "x_at_8")
	b.ReportMetric(idle/n, "ttft_idle_ms")
	b.ReportMetric(loaded/n, "ttft_p50_8_ms")
	b.ReportMetric(loaded/idle, "ttft_x")
	b.Logf("GOMAXPROCS %d", runtime.GOMAXPROCS(0))
}
