package serve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// BenchmarkServeConcurrency measures the batched lane under load: the
// aggregate decode tokens/s of 8 concurrent streams against one stream
// alone (first request sent to last token: prefill included; steady_*:
// only while every stream of the run was decoding); the time to
// first token of the 8 sent at once (p50: mean of the 4th and 5th)
// against the lone stream's (ttft_8_x); and the time to first token of a
// request that arrives while the 8 are decoding against one that arrives
// at an idle server (ttft_x; the median of three one-token probes each,
// MLXGO_PROBES of them when set;
// the server gets one row more than 8 so that a probe joins at once), in
// the same run, after one untimed warm-up request; the probes go to a
// second run of the 8, so that their work is not in the throughput. Each
// stream asks for 128 tokens with EOS banned, on its own prompt (the
// prefix cache sees no repeat). MLXGO_PROBE_TOKENS=256 makes the probes 256-token prompts
// (distinct token ids) instead of a short chat message; MLXGO_TOKEN_BUDGET
// sets Config.TokenBudget.
//
//	go test ./serve -run '^$' -bench ServeConcurrency -benchtime 3x
func BenchmarkServeConcurrency(b *testing.B) {
	d := loadDemo(b)
	serveConcurrency(b, d.config(), d.gm.VocabSize(), d.eos, true)
}

// serveConcurrency is BenchmarkServeConcurrency's measurement over cfg:
// streams ask /v1/chat/completions for a short story when chat is set
// (the model has a chat template), else /v1/completions for a 16-id
// prompt of their own; eos are banned so every stream runs its 128 tokens.
func serveConcurrency(b *testing.B, cfg Config, vocab int, eos []int32, chat bool) {
	if s := os.Getenv("MLXGO_TOKEN_BUDGET"); s != "" { // compare budgets (Config.TokenBudget)
		cfg.TokenBudget, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("MLXGO_PREFILL_ALONE"); s != "" { // compare schedules (Config.PrefillAlone)
		cfg.PrefillAlone, _ = strconv.Atoi(s)
	}
	nProbes := 3 // MLXGO_PROBES: one-token requests sent one after another (idle, and while the streams decode)
	if s := os.Getenv("MLXGO_PROBES"); s != "" {
		nProbes, _ = strconv.Atoi(s)
	}
	probeTokens := 0 // MLXGO_PROBE_TOKENS: probes with prompts of that many token ids (else a short chat message)
	if s := os.Getenv("MLXGO_PROBE_TOKENS"); s != "" {
		probeTokens, _ = strconv.Atoi(s)
	}
	if !chat && probeTokens == 0 {
		probeTokens = 16
	}
	// one row more than the 8 streams, so that a probe joins while they decode
	cfg.Batch = max(cfg.Batch, DefaultBatch) + 1
	_, hs := startServer(b, cfg)
	const tokens = 128
	bias := map[string]float64{}
	for _, id := range eos {
		bias[fmt.Sprint(id)] = -100
	}
	ids := func(n, id int) []int32 { // n distinct token ids of request id
		p := make([]int32, n)
		for i := range p {
			p[i] = int32((i*7919 + id*104729) % min(vocab, 30000))
		}
		return p
	}
	req := 0
	var mu sync.Mutex
	streamed := 0 // content chunks received so far, over every stream
	// stream streams one request, appending each token's arrival to times
	// when given
	stream := func(maxTokens int, times *[]time.Time) (ttft time.Duration, chunks int, err error) {
		mu.Lock()
		req++
		id := req
		mu.Unlock()
		var body []byte
		var url, field string
		switch {
		case maxTokens == 1 && probeTokens > 0: // a probe of probeTokens distinct token ids
			body, _ = json.Marshal(map[string]any{"prompt": ids(probeTokens, id), "max_tokens": 1, "temperature": 0, "logit_bias": bias, "stream": true})
			url, field = hs.URL+"/v1/completions", `"text":"`
		case chat:
			body, _ = json.Marshal(map[string]any{"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Story %d: tell me about the sea.", id)}},
				"max_tokens": maxTokens, "temperature": 0, "logit_bias": bias, "stream": true})
			url, field = hs.URL+"/v1/chat/completions", `"content":"`
		default:
			body, _ = json.Marshal(map[string]any{"prompt": ids(16, id), "max_tokens": maxTokens, "temperature": 0, "logit_bias": bias, "stream": true})
			url, field = hs.URL+"/v1/completions", `"text":"`
		}
		start := time.Now()
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, `data: {`) && strings.Contains(line, field) && !strings.Contains(line, `"role"`) {
				if chunks == 0 {
					ttft = time.Since(start)
				}
				if times != nil {
					*times = append(*times, time.Now())
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
	run := func(n int, probe bool) (tps, steady float64, probes, firsts []time.Duration) {
		var wg sync.WaitGroup
		total := 0
		all := make([][]time.Time, n)
		mu.Lock()
		streamed = 0
		mu.Unlock()
		start := time.Now()
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tt, c, err := stream(tokens, &all[i])
				if err != nil {
					b.Error(err)
				}
				mu.Lock()
				firsts = append(firsts, tt)
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
			for range nProbes {
				tt, _, err := stream(1, nil)
				if err != nil {
					b.Error(err)
				}
				probes = append(probes, tt)
			}
		}
		wg.Wait()
		tps = float64(total) / time.Since(start).Seconds()
		// steady: tokens/s while every stream was decoding (from the last
		// first token to the first last token)
		var from, to time.Time
		for _, ts := range all {
			if len(ts) == 0 {
				continue
			}
			if ts[0].After(from) {
				from = ts[0]
			}
			if to.IsZero() || ts[len(ts)-1].Before(to) {
				to = ts[len(ts)-1]
			}
		}
		in := 0
		for _, ts := range all {
			for _, t := range ts {
				if t.After(from) && !t.After(to) {
					in++
				}
			}
		}
		if to.After(from) {
			steady = float64(in) / to.Sub(from).Seconds()
		}
		mu.Lock()
		defer mu.Unlock()
		return tps, steady, probes, firsts
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	// one untimed request first: the first products build the weights'
	// derived layouts (the int8 repack) and warm the buffer pool
	if _, _, err := stream(4, nil); err != nil {
		b.Fatal(err)
	}
	var one, eight, steady1, steady8, idle, loaded, first1, first8 float64
	for range b.N {
		t1, s1, _, f1 := run(1, false)
		_, _, idleP, _ := run(0, true)
		t8, s8, _, f8 := run(8, false) // throughput and the 8's TTFT without probes
		_, _, loadP, _ := run(8, true)
		slices.Sort(idleP)
		slices.Sort(loadP)
		slices.Sort(f8)
		one += t1
		eight += t8
		steady1 += s1
		steady8 += s8
		idle += ms(idleP[len(idleP)/2])
		loaded += ms(loadP[len(loadP)/2])
		first1 += ms(f1[0])
		first8 += (ms(f8[3]) + ms(f8[4])) / 2
	}
	n := float64(b.N)
	b.ReportMetric(one/n, "tok/s_1")
	b.ReportMetric(eight/n, "tok/s_8")
	b.ReportMetric(eight/one, "x_at_8")
	b.ReportMetric(steady1/n, "steady_tok/s_1")
	b.ReportMetric(steady8/n, "steady_tok/s_8")
	b.ReportMetric(steady8/steady1, "steady_x_at_8")
	b.ReportMetric(idle/n, "ttft_idle_ms")
	b.ReportMetric(loaded/n, "ttft_p50_8_ms")
	b.ReportMetric(loaded/idle, "ttft_x")
	b.ReportMetric(first1/n, "ttft_1_ms")
	b.ReportMetric(first8/n, "ttft_8_p50_ms")
	b.ReportMetric(first8/first1, "ttft_8_x")
	b.Logf("GOMAXPROCS %d", runtime.GOMAXPROCS(0))
}

// BenchmarkServeTTFTLoad measures the time to first token of 8 distinct
// ~256-token prompts sent at once, against that of one such prompt at an
// idle server, for several token budgets per pass (Config.TokenBudget;
// "256/1": also Config.PrefillRows 1; "256f": Config.FillPrefill),
// alternated within one run: rounds × budgets, each round a fresh order.
// A budget holding all 8 prompts prefills them in one pass (every first
// token at once, after all of the work); a budget of about one prompt
// prefills them first come first served (the k-th first token after k
// prompts' work), decoding the rows already in at every pass.
//
// Reported per budget (medians over rounds): the idle TTFT (median of 3),
// the p50 of the 8 under load (mean of the 4th and 5th), their ratio, the
// worst TTFT, the longest gap between two tokens of a stream that was
// already decoding (the stall prefill puts on decode rows) and the
// aggregate tokens/s of the 8 (first request sent to last token).
//
//	MLXGO_TTFT_BUDGETS=2048,256f,256,128 go test ./serve -run '^$' -bench ServeTTFTLoad -benchtime 1x
func BenchmarkServeTTFTLoad(b *testing.B) {
	d := loadDemo(b)
	budgets := strings.Split("2048,256f,256,128", ",") // token budget [/ most joining rows per pass] [f: FillPrefill]
	if s := os.Getenv("MLXGO_TTFT_BUDGETS"); s != "" {
		budgets = strings.Split(s, ",")
	}
	rounds := 3
	if s := os.Getenv("MLXGO_TTFT_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	const promptLen, gen, streams = 256, 16, 8
	urls := make([]string, len(budgets))
	for i, bud := range budgets {
		cfg := d.config()
		bud = strings.TrimSpace(bud)
		cfg.FillPrefill = strings.HasSuffix(bud, "f")
		tb, pr, _ := strings.Cut(strings.TrimSuffix(bud, "f"), "/")
		var err error
		if cfg.TokenBudget, err = strconv.Atoi(tb); err != nil {
			b.Fatal(err)
		}
		if pr != "" {
			if cfg.PrefillRows, err = strconv.Atoi(pr); err != nil {
				b.Fatal(err)
			}
		}
		cfg.KVBudgetBytes = 256 << 20
		_, hs := startServer(b, cfg)
		urls[i] = hs.URL
	}
	bias := map[string]float64{}
	for _, id := range d.eos {
		bias[fmt.Sprint(id)] = -100
	}
	v := d.gm.VocabSize()
	seed := uint64(1)
	prompt := func() []int32 { // distinct random ids: the prefix cache sees no repeat
		p := make([]int32, promptLen)
		for i := range p {
			seed = seed*6364136223846793005 + 1442695040888963407
			p[i] = int32(seed>>33) % int32(min(v, 30000))
		}
		return p
	}
	// one streamed completion: its TTFT, token arrival times and count
	stream := func(url string, p []int32, n int, start time.Time) (ttft time.Duration, gaps time.Duration, toks int, err error) {
		body, _ := json.Marshal(map[string]any{"prompt": p, "max_tokens": n, "temperature": 0, "logit_bias": bias, "stream": true})
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, 0, 0, err
		}
		defer resp.Body.Close()
		var last time.Time
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, `data: {`) || !strings.Contains(line, `"text":"`) {
				continue
			}
			now := time.Now()
			if toks == 0 {
				ttft = now.Sub(start)
			} else {
				gaps = max(gaps, now.Sub(last))
			}
			last = now
			toks++
		}
		return ttft, gaps, toks, sc.Err()
	}
	type res struct{ idle, p50, worst, stall, tps []float64 }
	out := make([]res, len(budgets))
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for r := range rounds * b.N {
		order := make([]int, len(budgets))
		for i := range order {
			order[i] = (i + r) % len(budgets)
		}
		for _, i := range order {
			var idle []float64
			for range 3 {
				tt, _, _, err := stream(urls[i], prompt(), 1, time.Now())
				if err != nil {
					b.Fatal(err)
				}
				idle = append(idle, ms(tt))
			}
			slices.Sort(idle)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var ttfts []float64
			stall, total := 0.0, 0
			start := time.Now()
			for range streams {
				p := prompt()
				wg.Add(1)
				go func() {
					defer wg.Done()
					tt, gap, n, err := stream(urls[i], p, gen, start)
					if err != nil {
						b.Error(err)
					}
					mu.Lock()
					ttfts = append(ttfts, ms(tt))
					stall = max(stall, ms(gap))
					total += n
					mu.Unlock()
				}()
			}
			wg.Wait()
			wall := time.Since(start).Seconds()
			slices.Sort(ttfts)
			o := &out[i]
			o.idle = append(o.idle, idle[1])
			o.p50 = append(o.p50, (ttfts[streams/2-1]+ttfts[streams/2])/2)
			o.worst = append(o.worst, ttfts[streams-1])
			o.stall = append(o.stall, stall)
			o.tps = append(o.tps, float64(total)/wall)
			b.Logf("round %d budget %s: idle %.0f ms, ttfts %v ms, stall %.0f ms, %.1f tok/s, load %s", r, budgets[i], idle[1], ttfts, stall, float64(total)/wall, loadAvg())
		}
	}
	med := func(x []float64) float64 {
		x = slices.Clone(x)
		slices.Sort(x)
		if len(x)%2 == 1 {
			return x[len(x)/2]
		}
		return (x[len(x)/2-1] + x[len(x)/2]) / 2
	}
	for i, bud := range budgets {
		o := out[i]
		ratio := make([]float64, len(o.p50))
		for k := range ratio {
			ratio[k] = o.p50[k] / o.idle[k]
		}
		tag := "_b" + strings.ReplaceAll(strings.TrimSpace(bud), "/", "r")
		b.ReportMetric(med(o.idle), "ttft_idle_ms"+tag)
		b.ReportMetric(med(o.p50), "ttft_p50_8_ms"+tag)
		b.ReportMetric(med(ratio), "ttft_x"+tag)
		b.ReportMetric(med(o.worst), "ttft_max_ms"+tag)
		b.ReportMetric(med(o.stall), "stall_ms"+tag)
		b.ReportMetric(med(o.tps), "tok/s"+tag)
	}
	b.Logf("GOMAXPROCS %d, load %s", runtime.GOMAXPROCS(0), loadAvg())
}

// loadAvg is /proc/loadavg's first three fields ("?" where unreadable).
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// BenchmarkServeConcurrency1B4bit is BenchmarkServeConcurrency over the
// random 1B-shaped 4-bit Llama (write1BAdapters' checkpoint, no adapters)
// with a tokenizer of one character per id, prompts given as token ids:
// the model the serve issue's throughput bar names. MLXGO_INT8_ACTIVATIONS=1
// runs it with int8 activations (tensor/cpu).
//
//	GOMAXPROCS=2 go test ./serve -run '^$' -bench ServeConcurrency1B4bit -benchtime 1x
func BenchmarkServeConcurrency1B4bit(b *testing.B) {
	dir, _ := write1BAdapters(b, 0)
	m, err := model.Load(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	tok := wideCharTokenizer(b, llama1B.vocab)
	eos := []int32{2}
	cfg := Config{Model: generate.Wrap(m, m.Info().Vocab), ModelID: "llama-1b-random", Tokenizer: tok, EOS: eos,
		ContextLength: 4096, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	serveConcurrency(b, cfg, llama1B.vocab, eos, false)
}

// wideCharTokenizer is a tokenizer of n tokens, token i the character
// U+0100+i, so that any id decodes.
func wideCharTokenizer(t testing.TB, n int) *tokenizer.Tokenizer {
	t.Helper()
	vocab := make(map[string]int, n)
	for i := range n {
		vocab[string(rune(0x100+i))] = i
	}
	raw, _ := json.Marshal(map[string]any{"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}}, "decoder": map[string]any{"type": "Fuse"}})
	tok, err := tokenizer.New(raw)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
