package serve

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
)

// tinyLlamaConfig loads the llama3 fixture (full attention only, so a
// row's blocks are its prompt plus max_tokens) and returns a config for
// it and the bytes of one block of every layer at the default block size.
func tinyLlamaConfig(t *testing.T) (func() Config, int) {
	t.Helper()
	lm := llamaFixture(t)
	tok := charTokenizer(t)
	config := func() Config {
		return Config{Model: generate.Wrap(lm, lm.Info().Vocab), ModelID: "llama3-tiny", Tokenizer: tok, EOS: []int32{2},
			ContextLength: 512, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	probe := config()
	probe.KVBudgetBytes = 4 << 20
	psrv, phs := startServer(t, probe)
	pst := psrv.Stats().Batch
	phs.Close()
	psrv.Close()
	return config, pst.KVBudgetBytes / (pst.Blocks.Capacity / lm.Info().Layers)
}

// TestBatchedLaneFIFOAdmission: admission is first come, first served and
// never reordered. The KV budget holds 16 blocks of 16 tokens per layer:
// A (20 + 200 tokens, 14 blocks) runs; B (the same size) cannot fit
// beside it and waits; C (4 + 4 tokens, one block) would fit beside A but
// arrived after B, so it waits too — it completes only after A has.
// Every request completes.
func TestBatchedLaneFIFOAdmission(t *testing.T) {
	config, per := tinyLlamaConfig(t)
	cfg := config()
	cfg.KVBudgetBytes = 16 * per
	srv, hs := startServer(t, cfg)
	if c := srv.Stats().Batch.Blocks.Capacity / len(srv.eng.lane.pool.Stats().Layers); c != 16 {
		t.Fatalf("the pool holds %d blocks per layer, the test needs 16", c)
	}
	ban := map[string]float64{"2": -100}
	ids := func(n, base int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 3 + (base+7*i)%250
		}
		return p
	}
	var mu sync.Mutex
	// done: for each request, how many generations the server had
	// completed when its response arrived (the server counts a row when it
	// finishes, before its response is written, so this does not depend on
	// how soon the client goroutines run)
	done := map[string]int64{}
	var wg sync.WaitGroup
	run := func(name string, body map[string]any) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out := post(t, hs.URL+"/v1/completions", body)
			if code != 200 {
				t.Errorf("%s: %d %v", name, code, out)
			}
			n := srv.Stats().Completed
			mu.Lock()
			done[name] = n
			mu.Unlock()
		}()
	}
	run("A", map[string]any{"prompt": ids(20, 1), "max_tokens": 200, "temperature": 0, "logit_bias": ban})
	waitFor(t, "A to run", func() bool { return srv.Stats().Active == 1 })
	run("B", map[string]any{"prompt": ids(20, 2), "max_tokens": 200, "temperature": 0, "logit_bias": ban})
	waitFor(t, "B to wait for blocks", func() bool { return srv.Stats().Batch.PendingRows == 1 })
	run("C", map[string]any{"prompt": ids(4, 3), "max_tokens": 4, "temperature": 0, "logit_bias": ban})
	waitFor(t, "C to wait behind B", func() bool { return srv.Stats().Batch.PendingRows == 2 })
	if st := srv.Stats(); st.Batch.ActiveRows != 1 || st.Completed != 0 {
		t.Errorf("while A runs: %d rows running, %d completed", st.Batch.ActiveRows, st.Completed)
	}
	wg.Wait()
	// A finished before B and C were admitted: by the time either's
	// response arrived, A's generation and its own had completed
	for _, name := range []string{"B", "C"} {
		if done[name] < 2 {
			t.Errorf("%s's response came when %d generations had completed: it ran before A finished", name, done[name])
		}
	}
	if len(done) != 3 {
		t.Errorf("responses %v, want A, B and C", done)
	}
}

// TestBatchedLaneQueueFull: on the batched lane (two rows) the queue
// bound still answers 429 with Retry-After: two long requests run, a
// third waits in the queue of one, a fourth is refused; the queued one
// runs once a row is free.
func TestBatchedLaneQueueFull(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.Batch, cfg.QueueSize = 2, 1
	srv, hs := startServer(t, cfg)
	var kills []func()
	for range 2 {
		resp, kill := openStream(t, hs.URL, longBody(d, 4000))
		defer resp.Body.Close()
		kills = append(kills, kill)
	}
	defer func() {
		for _, k := range kills {
			k()
		}
	}()
	waitFor(t, "two rows running", func() bool { return srv.Stats().Active == 2 })
	queued := make(chan int, 1)
	go func() {
		code, _ := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": []int{2, 3, 4}, "max_tokens": 3})
		queued <- code
	}()
	waitFor(t, "a third request queued", func() bool { return srv.Stats().QueueDepth == 1 })
	raw, _ := json.Marshal(map[string]any{"prompt": []int{2, 3}, "max_tokens": 3})
	resp, err := http.Post(hs.URL+"/v1/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("full queue on the batched lane: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	kills[0]()
	if code := <-queued; code != 200 {
		t.Errorf("the queued request, once a row was free: %d", code)
	}
	if st := srv.Stats(); st.Rejected != 1 || st.Lane != "batched" {
		t.Errorf("stats %+v", st)
	}
}

// TestBatchedLaneStreamsPerToken: streams on the batched lane are not
// bunched: three concurrent streaming chats (logprobs on, 24 tokens each,
// EOS banned) get their tokens one chunk at a time — every token in a
// chunk of its own but where the detokenizer held back an incomplete
// character (at most a tenth of them here) — and the usage chunk names
// the batched lane.
func TestBatchedLaneStreamsPerToken(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	const clients, n = 3, 24
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := longBody(d, n)
			body["messages"] = []any{map[string]any{"role": "user", "content": "Tell me a story about ship " + string(rune('A'+i)) + "."}}
			body["logprobs"] = true
			body["stream_options"] = map[string]any{"include_usage": true}
			_, evs := streamChat(t, hs.URL, body)
			tokens, single, lane := 0, 0, ""
			for _, e := range evs {
				if e == "[DONE]" {
					continue
				}
				var c struct {
					Choices []struct {
						Logprobs *struct {
							Content []json.RawMessage `json:"content"`
						} `json:"logprobs"`
					} `json:"choices"`
					Usage *struct {
						Lane string `json:"lane"`
					} `json:"usage"`
				}
				if err := json.Unmarshal([]byte(e), &c); err != nil {
					t.Errorf("chunk %q: %v", e, err)
					continue
				}
				if c.Usage != nil {
					lane = c.Usage.Lane
				}
				for _, ch := range c.Choices {
					if ch.Logprobs != nil {
						tokens += len(ch.Logprobs.Content)
						if len(ch.Logprobs.Content) == 1 {
							single++
						}
					}
				}
			}
			if tokens != n || single < n*9/10 || lane != "batched" {
				t.Errorf("stream %d: %d tokens, %d of them alone in a chunk, lane %q", i, tokens, single, lane)
			}
		}()
	}
	wg.Wait()
}

// TestBatchedLaneMultiTurnReuse: a conversation's next turn re-prefills
// only what is new, also while another row runs: turn 1 (50 prompt
// tokens, 20 generated) leaves its whole blocks in the pool; turn 2 — the
// same prompt, the answer and 10 new tokens — arrives while a long
// stream decodes beside it and takes every whole block turn 1's caches
// were fed (64 of its 80 tokens) from the pool, answering what the serial
// lane (no cache) answers.
func TestBatchedLaneMultiTurnReuse(t *testing.T) {
	config, _ := tinyLlamaConfig(t)
	srv, hs := startServer(t, config())
	serial := config()
	serial.Batch, serial.PromptCacheBytes = 1, -1
	_, hsSerial := startServer(t, serial)
	tok := charTokenizer(t)
	ban := map[string]float64{"2": -100}
	ids := func(n, base int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 3 + (base*31+7*i)%250
		}
		return p
	}
	ask := func(url string, p []int, gen int) (string, float64) {
		t.Helper()
		code, out := post(t, url+"/v1/completions", map[string]any{"prompt": p, "max_tokens": gen, "temperature": 0, "logit_bias": ban})
		if code != 200 {
			t.Fatalf("completion: %d %v", code, out)
		}
		return out["choices"].([]any)[0].(map[string]any)["text"].(string), out["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)["cached_tokens"].(float64)
	}
	turn1 := ids(50, 1)
	answer, _ := ask(hs.URL, turn1, 20)
	genIDs := tok.Encode(answer, false)
	if len(genIDs) != 20 {
		t.Fatalf("the answer re-encodes to %d tokens", len(genIDs))
	}
	turn2 := append(append(slices.Clone(turn1), genIDs...), ids(10, 2)...)
	// a long row decoding beside the second turn
	long := make(chan struct{})
	go func() {
		defer close(long)
		code, _ := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": ids(30, 3), "max_tokens": 400, "temperature": 0, "logit_bias": ban})
		if code != 200 {
			t.Errorf("the long request: %d", code)
		}
	}()
	waitFor(t, "the long row to run", func() bool { return srv.Stats().Batch.ActiveRows == 1 })
	got, cached := ask(hs.URL, turn2, 12)
	if st := srv.Stats().Batch; st.ActiveRows != 1 {
		t.Logf("(the long row was not running at the end of the second turn: %d rows)", st.ActiveRows)
	}
	if want := (50 + 19) / 16 * 16; cached != float64(want) {
		t.Errorf("the second turn took %v cached tokens, want %d (every whole block turn 1 was fed)", cached, want)
	}
	if want, _ := ask(hsSerial.URL, turn2, 12); got != want {
		t.Errorf("the second turn: %q, serial lane %q", got, want)
	}
	<-long
}

// TestStatsBatchFields: GET /stats names the batched lane's fields as the
// issue lists them (batch: configured, active_rows, pending_rows,
// kv_bytes, kv_budget_bytes, blocks, and token_budget), with the values
// the lane runs under.
func TestStatsBatchFields(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.Batch, cfg.TokenBudget = 3, 40
	_, hs := startServer(t, cfg)
	if code, out := post(t, hs.URL+"/v1/completions", map[string]any{"prompt": []int{2, 3, 4}, "max_tokens": 2}); code != 200 {
		t.Fatalf("completion: %d %v", code, out)
	}
	resp, err := http.Get(hs.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Lane  string                     `json:"lane"`
		Batch map[string]json.RawMessage `json:"batch"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"configured", "active_rows", "pending_rows", "kv_bytes", "kv_budget_bytes", "blocks", "token_budget"} {
		if _, ok := st.Batch[k]; !ok {
			t.Errorf("/stats.batch has no %q: %v", k, st.Batch)
		}
	}
	if st.Lane != "batched" || string(st.Batch["configured"]) != "3" || string(st.Batch["token_budget"]) != "40" {
		t.Errorf("/stats: lane %q, batch %v", st.Lane, st.Batch)
	}
	var blocks map[string]int
	if json.Unmarshal(st.Batch["blocks"], &blocks) != nil || blocks["capacity"] == 0 || blocks["peak"] == 0 {
		t.Errorf("/stats.batch.blocks %s", st.Batch["blocks"])
	}
}
