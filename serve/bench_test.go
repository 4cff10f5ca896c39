package serve

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/sampler"
)

// BenchmarkServedVsDirect compares decode tokens/s of a streamed chat
// completion (measured by the client, from the first content chunk to the
// last) with the library's Generate on the same prompt and parameters,
// measured in the same run; it also reports the served time to first
// token. The prompt cache is off so that every request prefills alike.
//
//	go test ./serve -run '^$' -bench ServedVsDirect -benchtime 3x
func BenchmarkServedVsDirect(b *testing.B) {
	d := loadDemo(b)
	cfg := d.config()
	cfg.PromptCacheBytes = -1
	_, hs := startServer(b, cfg)
	const n = 256
	msgs := []map[string]string{{"role": "user", "content": "Tell me a long story about the sea."}}
	prompt := d.chatPrompt(b, msgs)
	bias := map[int]float64{}
	sbias := map[string]float64{}
	for _, id := range d.eos {
		bias[int(id)] = -100
		sbias[fmt.Sprint(id)] = -100
	}
	body, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": n, "temperature": 0, "logit_bias": sbias, "stream": true})
	var directTPS, servedTPS, ttft, directTTFT float64
	for i := 0; i < b.N; i++ {
		s, err := generate.Generate(context.Background(), d.gm, prompt, &generate.Options{MaxTokens: n, EOS: d.eos, Sampler: sampler.Params{LogitBias: bias}})
		if err != nil {
			b.Fatal(err)
		}
		for _, err := range s.Tokens() {
			if err != nil {
				b.Fatal(err)
			}
		}
		st := s.Stats()
		s.Close()
		directTPS += st.DecodeTPS
		directTTFT += st.PrefillMs

		start := time.Now()
		resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		var first, last time.Time
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, `data: {`) || !strings.Contains(line, `"delta":{"content":"`) || strings.Contains(line, `"role"`) {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
		}
		resp.Body.Close()
		ttft += float64(first.Sub(start).Microseconds()) / 1000
		// Tokens after the first, over the time after the first (as
		// Stats.DecodeTPS counts); chunks ≈ tokens (a few tokens carry no
		// text of their own and ride on the next chunk).
		servedTPS += float64(n-1) / last.Sub(first).Seconds()
	}
	k := float64(b.N)
	b.ReportMetric(directTPS/k, "direct_tok/s")
	b.ReportMetric(servedTPS/k, "served_tok/s")
	b.ReportMetric(servedTPS/directTPS, "served/direct")
	b.ReportMetric(ttft/k, "ttft_ms")
	b.ReportMetric(directTTFT/k, "direct_ttft_ms")
}
