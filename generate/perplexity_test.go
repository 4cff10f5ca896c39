package generate_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model/demo"
	"github.com/mlxgo/mlxgo/tensor"
)

func scoreIDs(n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32((i*37 + 11) % vocab)
	}
	return ids
}

// TestScore: Score's NLL is the one of a single forward pass over the
// whole sequence (log-softmax of each position at the next token), for
// any chunk size; a reference run of an unquantized scheme diverges by
// exactly 0, a quantized one by a small positive KL.
func TestScore(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	ids := scoreIDs(40, m.VocabSize())
	var want float64
	err := tensor.Try(func() {
		caches := m.MakeCaches()
		h, err := m.Forward(tensor.FromInt32(ids, []int{1, len(ids)}), caches)
		if err != nil {
			t.Fatal(err)
		}
		lg, _ := m.Logits(h)
		x := lg.Float32s()
		v := m.VocabSize()
		for i := range len(ids) - 1 {
			row := x[i*v : (i+1)*v]
			mx := math.Inf(-1)
			for _, a := range row {
				mx = max(mx, float64(a))
			}
			s := 0.0
			for _, a := range row {
				s += math.Exp(float64(a) - mx)
			}
			want += mx + math.Log(s) - float64(row[ids[i+1]])
		}
		for _, c := range caches {
			c.Free()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{3, 16, 64} {
		got, err := generate.Score(context.Background(), m, ids, &generate.Options{PrefillChunkSize: chunk}, true)
		if err != nil {
			t.Fatal(err)
		}
		if got.Tokens != len(ids)-1 || math.Abs(got.NLL-want) > 1e-3*math.Abs(want) {
			t.Fatalf("chunk %d: %d tokens, NLL %v, one pass %v", chunk, got.Tokens, got.NLL, want)
		}
		if got.KL != 0 {
			t.Fatalf("chunk %d: unquantized run diverges from its reference by %v", chunk, got.KL)
		}
		if got.KVBytes <= 0 {
			t.Fatalf("chunk %d: kv bytes %d", chunk, got.KVBytes)
		}
	}
	// head dim 16: TurboQuant refuses, naming it
	spec := kv.DefaultTurbo
	_, err = generate.Score(context.Background(), m, ids, &generate.Options{PrefillChunkSize: 8, KVQuant: &spec}, false)
	if err == nil || !strings.Contains(err.Error(), "head dim 16") {
		t.Fatalf("TurboQuant at head dim 16: %v", err)
	}
	_, err = generate.Score(context.Background(), m, ids, &generate.Options{KVQuant: &spec, KVBits: 8}, false)
	if err == nil || !strings.Contains(err.Error(), "excludes") {
		t.Fatalf("KVQuant with KVBits: %v", err)
	}
}

// TestTurboGreedyDemo: on the demo model (head dim 64, sliding and full
// layers), greedy decoding with k8v8 TurboQuant from the first token gives
// plain decoding's first 16 tokens, and TurboQuant's kv_bytes are smaller;
// scored against unquantized runs, k8v3 and 4-bit affine KV diverge by a
// small positive KL.
func TestTurboGreedyDemo(t *testing.T) {
	dir, err := demo.Dir(demo.BF16)
	if err != nil {
		t.Fatal(err)
	}
	m := loadModel(t, dir, nil)
	prompt := scoreIDs(24, m.VocabSize())
	plain, ps, err := collect(t, m, prompt, &generate.Options{MaxTokens: 16, PrefillChunkSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	spec := kv.TurboSpec{KeyBits: 8, ValueBits: 8}
	got, ts, err := collect(t, m, prompt, &generate.Options{MaxTokens: 16, PrefillChunkSize: 8, KVQuant: &spec})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, plain) {
		t.Fatalf("k8v8 greedy %v, plain %v", got, plain)
	}
	if !(ts.KVBytes > 0 && ts.KVBytes < ps.KVBytes) {
		t.Fatalf("kv bytes: turbo %d, plain %d", ts.KVBytes, ps.KVBytes)
	}
	ids := scoreIDs(96, m.VocabSize())
	k8v3 := kv.DefaultTurbo
	tq, err := generate.Score(context.Background(), m, ids, &generate.Options{PrefillChunkSize: 16, KVQuant: &k8v3}, true)
	if err != nil {
		t.Fatal(err)
	}
	aq, err := generate.Score(context.Background(), m, ids, &generate.Options{PrefillChunkSize: 16, KVBits: 4, KVGroupSize: 64}, true)
	if err != nil {
		t.Fatal(err)
	}
	tk, ak := tq.KL/float64(tq.Tokens), aq.KL/float64(aq.Tokens)
	t.Logf("mean KL: k8v3 %.5f, kv4 %.5f", tk, ak)
	if !(tk > 0 && ak > 0 && tk < 0.5 && ak < 0.5) {
		t.Fatalf("mean KL: k8v3 %v, kv4 %v", tk, ak)
	}
}

// TestTurboTable1B prints, for the random 1B-shaped 4-bit Llama of the
// decode benchmarks (head dim 64), the perplexity, mean KL against
// unquantized KV and KV bytes per token of each KV scheme over 512
// teacher-forced tokens in 64-token chunks, and checks that k8v8's greedy
// tokens are plain's. It takes minutes on two cores, so it runs only with
// MLXGO_TURBO_TABLE=1.
func TestTurboTable1B(t *testing.T) {
	if os.Getenv("MLXGO_TURBO_TABLE") == "" {
		t.Skip("set MLXGO_TURBO_TABLE=1 to measure the 1B-shaped model's KV scheme table")
	}
	dir, _ := writeLlama(t, llamaShape{Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, FFN: 8192, Vocab: 32000}, 4)
	m := loadModel(t, dir, nil)
	prompt := scoreIDs(32, m.VocabSize())
	plain, _, err := collect(t, m, prompt, &generate.Options{MaxTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	k8v8 := kv.TurboSpec{KeyBits: 8, ValueBits: 8}
	got, _, err := collect(t, m, prompt, &generate.Options{MaxTokens: 16, KVQuant: &k8v8})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, plain) {
		t.Errorf("k8v8 greedy %v, plain %v", got, plain)
	}
	ids := scoreIDs(512, m.VocabSize())
	type scheme struct {
		name string
		o    generate.Options
	}
	turbo := func(k, v int) *kv.TurboSpec { return &kv.TurboSpec{KeyBits: k, ValueBits: v} }
	schemes := []scheme{{"bf16", generate.Options{}}, {"kv8", generate.Options{KVBits: 8}}, {"kv4", generate.Options{KVBits: 4}},
		{"k8v8", generate.Options{KVQuant: turbo(8, 8)}}, {"k8v4", generate.Options{KVQuant: turbo(8, 4)}},
		{"k8v3", generate.Options{KVQuant: turbo(8, 3)}}, {"k4v3", generate.Options{KVQuant: turbo(4, 3)}},
		{"k8v2", generate.Options{KVQuant: turbo(8, 2)}}}
	for _, s := range schemes {
		o := s.o
		o.PrefillChunkSize = 64
		r, err := generate.Score(context.Background(), m, ids, &o, s.name != "bf16")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("| %s | %.1f | %.4f | %.6f |", s.name, float64(r.LiveKVBytes)/float64(r.Tokens), math.Exp(r.NLL/float64(r.Tokens)), r.KL/float64(r.Tokens))
	}
}
