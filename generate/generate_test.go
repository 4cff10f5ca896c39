package generate_test

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestGreedyParity checks Generate's greedy output against HF's greedy
// continuation (float32 fixtures) for several prefill chunk sizes, and
// from pre-warmed caches taken from a PromptCache.
func TestGreedyParity(t *testing.T) {
	for _, name := range allFixtures {
		t.Run(name, func(t *testing.T) {
			t.Cleanup(tensortest.NoLeaks(t))
			g := readGolden(t, name)
			m := loadModel(t, filepath.Join(fixtures, name, "f32"), nil)
			for _, chunk := range []int{1, 3, 7, 2048} {
				cm := &countingModel{Model: m}
				out, st, err := collect(t, cm, g.Prompt, &generate.Options{MaxTokens: len(g.GreedyF32), PrefillChunkSize: chunk})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(out, g.GreedyF32) {
					t.Errorf("chunk %d: agrees for %d tokens:\n got %v\nwant %v", chunk, firstDiff(out, g.GreedyF32), out, g.GreedyF32)
				}
				// Prefill forwards: ceil((P−1)/chunk) chunks plus the last token alone.
				p := len(g.Prompt)
				wantFwd := (p-1+chunk-1)/chunk + 1 + len(out) - 1
				if cm.forwards != wantFwd {
					t.Errorf("chunk %d: %d forward passes, want %d", chunk, cm.forwards, wantFwd)
				}
				if st.PromptTokens != p || st.PrefillTokens != p || st.CachedTokens != 0 || st.GeneratedTokens != len(out) ||
					st.StopReason != generate.StopLength || !st.Pipelined {
					t.Errorf("chunk %d: stats %+v", chunk, st)
				}
				if want := append(slices.Clone(g.Prompt), out[:len(out)-1]...); !slices.Equal(st.CacheTokens, want) {
					t.Errorf("chunk %d: cache tokens %v, want %v", chunk, st.CacheTokens, want)
				}
			}
			// Pre-warmed: snapshot the first 10 prompt tokens of one run into a
			// PromptCache, then generate from what Take returns.
			pc := generate.NewPromptCache(1 << 30)
			defer pc.Clear()
			snap := func(caches []kv.Cache, n int) {
				cl := make([]kv.Cache, len(caches))
				for i, c := range caches {
					if c != nil {
						cl[i] = c.Clone()
					}
				}
				pc.Put(g.Prompt[:n], cl)
			}
			if _, _, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: 2, PrefillChunkSize: 4, SnapshotAt: 10, OnPrefillDone: snap}); err != nil {
				t.Fatal(err)
			}
			caches, n := pc.Take(g.Prompt)
			if n != 10 {
				t.Fatalf("Take gave %d tokens, want 10", n)
			}
			out, st, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: len(g.GreedyF32), PrefillChunkSize: 5, Caches: caches})
			freeAll(caches)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(out, g.GreedyF32) {
				t.Errorf("pre-warmed: agrees for %d tokens:\n got %v\nwant %v", firstDiff(out, g.GreedyF32), out, g.GreedyF32)
			}
			if st.CachedTokens != 10 || st.PrefillTokens != len(g.Prompt)-10 {
				t.Errorf("pre-warmed stats %+v", st)
			}
		})
	}
}

func freeAll(cs []kv.Cache) {
	for _, c := range cs {
		if c != nil {
			c.Free()
		}
	}
}

// TestTwoTurnChat runs a second turn through the PromptCache: only the
// new tokens are prefilled and the output equals a cold run's.
func TestTwoTurnChat(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	g := readGolden(t, "qwen3")
	m := loadModel(t, filepath.Join(fixtures, "qwen3", "f32"), nil)
	pc := generate.NewPromptCache(1 << 30)
	defer pc.Clear()

	turn1 := g.Prompt
	s, err := generate.Generate(context.Background(), m, turn1, &generate.Options{MaxTokens: 8, PrefillChunkSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	var gen1 []int32
	for tok, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		gen1 = append(gen1, tok.ID)
	}
	st1 := s.Stats()
	pc.Put(st1.CacheTokens, s.TakeCaches())
	s.Close()
	if pc.Len() != 1 {
		t.Fatalf("prompt cache has %d entries", pc.Len())
	}

	newTurn := []int32{11, 12, 13, 14, 15, 16}
	turn2 := slices.Concat(turn1, gen1, newTurn)
	caches, n := pc.Take(turn2)
	if want := len(turn1) + len(gen1) - 1; n != want {
		t.Fatalf("Take: %d tokens, want %d (prompt and every fed generated token)", n, want)
	}
	cm := &countingModel{Model: m}
	warm, st2, err := collect(t, cm, turn2, &generate.Options{MaxTokens: 12, PrefillChunkSize: 7, Caches: caches})
	if err != nil {
		t.Fatal(err)
	}
	pc.Put(st2.CacheTokens, caches)
	if st2.CachedTokens != n || st2.PrefillTokens != len(newTurn)+1 {
		t.Errorf("turn 2 prefilled %d tokens with %d cached, want %d and %d", st2.PrefillTokens, st2.CachedTokens, len(newTurn)+1, n)
	}
	if prefilled := cm.tokens - (len(warm) - 1); prefilled != len(newTurn)+1 {
		t.Errorf("turn 2 ran %d prompt tokens through the model, want %d", prefilled, len(newTurn)+1)
	}
	cold, _, err := collect(t, m, turn2, &generate.Options{MaxTokens: 12, PrefillChunkSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(warm, cold) {
		t.Errorf("warm turn 2 %v, cold %v", warm, cold)
	}
	if pc.Len() != 1 {
		t.Errorf("turn 2's entry should replace turn 1's (its prefix): %d entries", pc.Len())
	}
}

// TestCancelMidDecode cancels the context while tokens stream: the loop
// returns before another forward pass, frees everything and reports
// consistent statistics.
func TestCancelMidDecode(t *testing.T) {
	g := readGolden(t, "llama3")
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	for _, pipelined := range []bool{true, false} {
		leak := tensortest.NoLeaks(t)
		ctx, cancel := context.WithCancel(context.Background())
		cm := &countingModel{Model: m}
		o := &generate.Options{MaxTokens: 30}
		if !pipelined {
			o.Sampler.RepetitionPenalty = 1.1
		}
		s, err := generate.Generate(ctx, cm, g.Prompt, o)
		if err != nil {
			t.Fatal(err)
		}
		var got []int32
		var fwdAtCancel int
		var final error
		for tok, err := range s.Tokens() {
			if err != nil {
				final = err
				continue
			}
			got = append(got, tok.ID)
			if len(got) == 5 {
				cancel()
				fwdAtCancel = cm.forwards
			}
		}
		st := s.Stats()
		if len(got) != 5 || !errors.Is(final, context.Canceled) {
			t.Errorf("pipelined=%v: %d tokens after cancel at 5, final error %v", pipelined, len(got), final)
		}
		if cm.forwards != fwdAtCancel {
			t.Errorf("pipelined=%v: %d forward passes after cancel", pipelined, cm.forwards-fwdAtCancel)
		}
		if st.StopReason != generate.StopCancelled || st.GeneratedTokens != 5 || st.Pipelined != pipelined {
			t.Errorf("pipelined=%v: stats %+v", pipelined, st)
		}
		off := s.Caches()[0].Offset()
		if len(st.CacheTokens) != off {
			t.Errorf("pipelined=%v: %d cache tokens, caches hold %d", pipelined, len(st.CacheTokens), off)
		}
		if !slices.Equal(st.CacheTokens[len(g.Prompt):], got[:off-len(g.Prompt)]) {
			t.Errorf("pipelined=%v: cache tokens %v do not continue with %v", pipelined, st.CacheTokens[len(g.Prompt):], got)
		}
		s.Close()
		cancel()
		leak()
	}
	// Cancelled during prefill: no forward pass after the chunk that saw it.
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cm := &countingModel{Model: m}
	s, err := generate.Generate(ctx, cm, g.Prompt, &generate.Options{PrefillChunkSize: 4, OnPrefillProgress: func(done, total int) {
		if done == 8 {
			cancel()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for tok, err := range s.Tokens() {
		if err == nil {
			t.Errorf("token %d after cancel in prefill", tok.ID)
		}
	}
	if cm.forwards != 2 || s.Stats().StopReason != generate.StopCancelled {
		t.Errorf("%d forwards, stats %+v", cm.forwards, s.Stats())
	}
}

// TestConsumerStops leaves the loop early: stats are final and the
// in-flight step is freed.
func TestConsumerStops(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	g := readGolden(t, "qwen3")
	m := loadModel(t, filepath.Join(fixtures, "qwen3", "f32"), nil)
	s, err := generate.Generate(context.Background(), m, g.Prompt, &generate.Options{MaxTokens: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 0
	for _, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}
	st := s.Stats()
	if st.StopReason != generate.StopConsumer || st.GeneratedTokens != 3 || st.PrefillMs <= 0 || st.DecodeTPS <= 0 {
		t.Errorf("stats %+v", st)
	}
	// Pipelined: the third token's step was dispatched, so its KV is there too.
	if len(st.CacheTokens) != len(g.Prompt)+3 || s.Caches()[0].Offset() != len(g.Prompt)+3 {
		t.Errorf("cache tokens %d, offset %d, want %d", len(st.CacheTokens), s.Caches()[0].Offset(), len(g.Prompt)+3)
	}
	for range s.Tokens() {
		// A second iteration yields one error.
		n++
	}
	if n != 4 {
		t.Errorf("second iteration yielded %d items, want 1", n-3)
	}
}

// TestEOS stops at an EOS token without yielding it.
func TestEOS(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	g := readGolden(t, "qwen3")
	m := loadModel(t, filepath.Join(fixtures, "qwen3", "f32"), nil)
	k := 4
	for slices.Index(g.GreedyF32, g.GreedyF32[k]) != k {
		k++
	}
	out, st, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: 32, EOS: []int32{g.GreedyF32[k]}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out, g.GreedyF32[:k]) || st.StopReason != generate.StopEOS || st.GeneratedTokens != k {
		t.Errorf("got %v (%+v), want %v then EOS", out, st, g.GreedyF32[:k])
	}
}

// TestSamplingAndLogprobs: seeded sampling is reproducible, logprobs are
// consistent with the top alternatives, and greedy picks the top one.
func TestSamplingAndLogprobs(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	g := readGolden(t, "llama3")
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	run := func(p sampler.Params) []generate.Token {
		s, err := generate.Generate(context.Background(), m, g.Prompt, &generate.Options{MaxTokens: 12, Sampler: p})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var out []generate.Token
		for tok, err := range s.Tokens() {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, tok)
		}
		return out
	}
	ids := func(ts []generate.Token) []int32 {
		var o []int32
		for _, t := range ts {
			o = append(o, t.ID)
		}
		return o
	}
	seed1, seed2 := uint64(1), uint64(2)
	a := run(sampler.Params{Temperature: 1.5, Seed: &seed1})
	b := run(sampler.Params{Temperature: 1.5, Seed: &seed1})
	c := run(sampler.Params{Temperature: 1.5, Seed: &seed2})
	if !slices.Equal(ids(a), ids(b)) {
		t.Errorf("same seed: %v vs %v", ids(a), ids(b))
	}
	if slices.Equal(ids(a), ids(c)) {
		t.Errorf("different seeds gave the same 12 tokens %v", ids(a))
	}
	gr := run(sampler.Params{TopLogprobs: 3})
	if !slices.Equal(ids(gr), g.GreedyF32[:12]) {
		t.Errorf("greedy with logprobs %v, want %v", ids(gr), g.GreedyF32[:12])
	}
	for _, tok := range gr {
		if len(tok.Top) != 3 || int32(tok.Top[0].ID) != tok.ID || tok.Top[0].Logprob != tok.Logprob ||
			tok.Logprob > 0 || tok.Top[1].Logprob > tok.Top[0].Logprob {
			t.Fatalf("token %+v", tok)
		}
	}
	if !math.IsNaN(float64(a[0].Logprob)) {
		t.Errorf("logprob %v without asking", a[0].Logprob)
	}
	// Bad parameters are the sampler's typed error, before anything runs.
	if _, err := generate.Generate(context.Background(), m, g.Prompt, &generate.Options{Sampler: sampler.Params{TopP: 2}}); !errors.Is(err, sampler.ErrInvalidParams) {
		t.Errorf("top_p 2: %v", err)
	}
}

// allowGrammar allows a fixed set of tokens and terminates after n.
type allowGrammar struct {
	allowed  []int
	n, seen  int
	rejected bool
}

func (g *allowGrammar) AcceptToken(id int) bool {
	if !slices.Contains(g.allowed, id) {
		g.rejected = true
		return false
	}
	g.seen++
	return true
}

func (g *allowGrammar) FillNextTokenBitmask(mask []int32) error {
	clear(mask)
	for _, id := range g.allowed {
		mask[id/32] |= int32(uint32(1) << (id % 32))
	}
	return nil
}

func (g *allowGrammar) IsTerminated() bool { return g.seen >= g.n }

// TestGrammar masks decoding to a token set and stops when it terminates.
func TestGrammar(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	g := readGolden(t, "llama3")
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	gr := &allowGrammar{allowed: []int{3, 77, 200}, n: 6}
	out, st, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: 20, Grammar: gr})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 6 || st.StopReason != generate.StopGrammar || st.Pipelined {
		t.Errorf("got %v, stats %+v", out, st)
	}
	for _, id := range out {
		if !slices.Contains(gr.allowed, int(id)) {
			t.Errorf("token %d outside the grammar", id)
		}
	}
}

// TestPrewarmedNotPrefix refuses caches that hold the whole prompt or more.
func TestPrewarmedNotPrefix(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	g := readGolden(t, "llama3")
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	s, err := generate.Generate(context.Background(), m, g.Prompt, &generate.Options{MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	for range s.Tokens() {
	}
	caches := s.TakeCaches() // prompt + nothing fed: exactly the prompt
	s.Close()
	defer freeAll(caches)
	if _, err := generate.Generate(context.Background(), m, g.Prompt, &generate.Options{Caches: caches}); err == nil {
		t.Error("caches holding the whole prompt were accepted")
	}
	if _, err := generate.Generate(context.Background(), m, g.Prompt[:5], &generate.Options{Caches: caches}); err == nil {
		t.Error("caches longer than the prompt were accepted")
	}
	if _, err := generate.Generate(context.Background(), m, []int32{1, 999}, nil); err == nil {
		t.Error("a token outside the vocabulary was accepted")
	}
}

// TestPipelineOrder checks the structure on whatever backend is the
// default: when token n reaches the consumer, step n+1 has already been
// dispatched (pipelined) or not (eager).
func TestPipelineOrder(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	g := readGolden(t, "llama3")
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	checkPipelineOrder(t, m, g.Prompt)
}

func checkPipelineOrder(t *testing.T, m generate.Model, prompt []int32) {
	t.Helper()
	for _, pipelined := range []bool{true, false} {
		cm := &countingModel{Model: m}
		o := &generate.Options{MaxTokens: 6, PrefillChunkSize: 2048}
		if !pipelined {
			o.Sampler.PresencePenalty = 0.5
		}
		s, err := generate.Generate(context.Background(), cm, prompt, o)
		if err != nil {
			t.Fatal(err)
		}
		for tok, err := range s.Tokens() {
			if err != nil {
				t.Fatal(err)
			}
			// 1 prefill chunk + the last prompt token give token 0.
			want := 2 + tok.Index
			if pipelined && tok.Index < 5 {
				want++
			}
			if cm.forwards != want {
				t.Errorf("pipelined=%v: at token %d, %d forwards dispatched, want %d", pipelined, tok.Index, cm.forwards, want)
			}
		}
		s.Close()
	}
}

// TestKVQuantization converts caches to 8 bits from QuantizedKVStart on,
// except a layer the per-layer config keeps plain, and still decodes
// close to the float run.
func TestKVQuantization(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t)) // after the model closes (cleanups run last-in first-out)
	dir := writeRandomLlama(t, 64, 2, nil)
	m := loadModel(t, dir, nil)
	prompt := []int32{5, 9, 33, 2, 17, 80, 41, 7, 99, 3}
	plain, _, err := collect(t, m, prompt, &generate.Options{MaxTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	s, err := generate.Generate(context.Background(), m, prompt, &generate.Options{MaxTokens: 8, KVBits: 8, QuantizedKVStart: 12,
		KVConfig: map[int]kv.QuantSpec{1: {Bits: 0}}, PrefillChunkSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	var q []int32
	for tok, err := range s.Tokens() {
		if err != nil {
			t.Fatal(err)
		}
		q = append(q, tok.ID)
		_, isQ := s.Caches()[0].(*kv.QuantizedKVCache)
		seen = append(seen, map[bool]string{true: "q", false: "f"}[isQ])
	}
	if _, ok := s.Caches()[0].(*kv.QuantizedKVCache); !ok {
		t.Errorf("layer 0 cache is %T, want quantized", s.Caches()[0])
	}
	if _, ok := s.Caches()[1].(*kv.KVCache); !ok {
		t.Errorf("layer 1 cache is %T, want plain (kv config bits 0)", s.Caches()[1])
	}
	s.Close()
	// Prompt 10 + fed tokens: offset reaches 12 after the forward of token 1.
	if want := []string{"f", "q", "q"}; !slices.Equal(seen[:3], want) {
		t.Errorf("layer 0 quantized at tokens %v, want %v...", seen, want)
	}
	t.Logf("8-bit KV from 12: %v; plain: %v (%d agree)", q, plain, firstDiff(q, plain))
	if firstDiff(q, plain) < 2 {
		t.Errorf("8-bit KV diverges at once: %v vs %v", q, plain)
	}
	if _, err := generate.Generate(context.Background(), m, prompt, &generate.Options{KVBits: 7}); err == nil {
		t.Error("7-bit KV accepted")
	}
}

// TestPenaltiesHistory: with history-based penalties (windows shorter
// than the prompt) the loop samples the tokens a hand-made loop gets by
// giving the sampler the whole history (prompt and generated tokens) at
// every step: the loop may hand it only the window it reads.
func TestPenaltiesHistory(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	g := readGolden(t, "llama3")
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	p := sampler.Params{RepetitionPenalty: 1.5, RepetitionContextSize: 3, PresencePenalty: 0.4, PresenceContextSize: 5,
		FrequencyPenalty: 0.3, FrequencyContextSize: 4}
	const n = 12
	got, st, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: n, Sampler: p})
	if err != nil || st.Pipelined {
		t.Fatalf("err %v, pipelined %v", err, st.Pipelined)
	}
	smp, err := sampler.New(p, m.VocabSize())
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Free()
	caches := m.MakeCaches()
	defer func() {
		for _, c := range caches {
			if c != nil {
				c.Free()
			}
		}
	}()
	forward := func(ids []int32) *tensor.Array { // logits [1, V] of the last position
		h, err := m.Forward(tensor.FromInt32(ids, []int{1, len(ids)}), caches)
		if err != nil {
			t.Fatal(err)
		}
		l, err := m.Logits(tensor.SliceAxis(h, 1, len(ids)-1, len(ids)))
		if err != nil {
			t.Fatal(err)
		}
		return tensor.Reshape(l, 1, l.Dim(-1))
	}
	history := slices.Clone(g.Prompt)
	last := len(g.Prompt) - 1
	tensor.WithScope(func() []*tensor.Array { tensor.Eval(forward(g.Prompt[:last])); return nil })
	in := g.Prompt[last:]
	var want []int32
	for len(want) < n {
		var r sampler.Result
		tensor.WithScope(func() []*tensor.Array {
			if r, err = smp.Sample(forward(in), history, nil); err != nil {
				t.Fatal(err)
			}
			return nil
		})
		id := int32(r.Token)
		want = append(want, id)
		history = append(history, id)
		in = []int32{id}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("loop %v, by hand with the whole history %v", got, want)
	}
	plain, _, err := collect(t, m, g.Prompt, &generate.Options{MaxTokens: n})
	if err != nil || slices.Equal(plain, want) {
		t.Fatalf("the penalties changed nothing (err %v): %v", err, plain)
	}
}
