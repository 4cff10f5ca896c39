package serve

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
)

// embeddings posts an embeddings request and returns the vectors (decoded
// from base64 when the reply carries strings) and the usage's token count.
func embeddings(t testing.TB, url string, body map[string]any) ([][]float32, int) {
	t.Helper()
	code, out := post(t, url+"/v1/embeddings", body)
	if code != 200 {
		t.Fatalf("embeddings %v: %d %v", body, code, out)
	}
	if out["object"] != "list" {
		t.Errorf("object %v", out["object"])
	}
	data := out["data"].([]any)
	vecs := make([][]float32, len(data))
	for i, e := range data {
		obj := e.(map[string]any)
		if obj["object"] != "embedding" || obj["index"] != float64(i) {
			t.Errorf("data[%d] = %v", i, obj)
		}
		switch v := obj["embedding"].(type) {
		case string:
			raw, err := base64.StdEncoding.DecodeString(v)
			if err != nil || len(raw)%4 != 0 {
				t.Fatalf("base64 embedding: %v", err)
			}
			for k := 0; k < len(raw); k += 4 {
				vecs[i] = append(vecs[i], math.Float32frombits(binary.LittleEndian.Uint32(raw[k:])))
			}
		case []any:
			for _, x := range v {
				vecs[i] = append(vecs[i], float32(x.(float64)))
			}
		default:
			t.Fatalf("embedding of type %T", v)
		}
	}
	u := out["usage"].(map[string]any)
	if u["prompt_tokens"] != u["total_tokens"] {
		t.Errorf("usage %v", u)
	}
	return vecs, int(u["prompt_tokens"].(float64))
}

// reference pools the demo model's final hidden states for ids in one
// pass, in float64 on the host: the mean over tokens or the last token,
// L2-normalized.
func (d *demoModel) reference(t testing.TB, ids []int32, last bool) []float64 {
	t.Helper()
	caches := d.gm.MakeCaches()
	defer freeCaches(caches)
	h, err := d.gm.Forward(tensor.FromInt32(ids, []int{1, len(ids)}), caches)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free()
	dim := h.Shape()[2]
	vals := h.Float32s()
	out := make([]float64, dim)
	for p := range len(ids) {
		if last && p != len(ids)-1 {
			continue
		}
		for i := range dim {
			out[i] += float64(vals[p*dim+i])
		}
	}
	var ss float64
	for _, v := range out {
		ss += v * v
	}
	for i := range out {
		out[i] /= math.Sqrt(ss)
	}
	return out
}

func maxDiff(a []float32, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

func norm(v []float32) float64 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	return math.Sqrt(ss)
}

// TestEmbeddings: vectors of the model's width, unit length, equal to
// the mean (or last-token) pooling of its hidden states computed apart;
// deterministic; a batch equals its inputs alone; token ids equal their
// text; base64 carries the same floats; long inputs run in prefill chunks.
func TestEmbeddings(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	texts := []string{"Call me Ishmael.", "Some years ago, never mind how long precisely.", "The whale"}
	ids := toI32(d.tok.Encode(texts[0], true))

	one, n := embeddings(t, hs.URL, map[string]any{"model": "mlxgo-demo", "input": texts[0]})
	if len(one) != 1 || len(one[0]) != d.m.Info().Hidden {
		t.Fatalf("%d vectors of width %d, want 1 of %d", len(one), len(one[0]), d.m.Info().Hidden)
	}
	if n != len(ids) {
		t.Errorf("usage %d tokens, want %d", n, len(ids))
	}
	if nv := norm(one[0]); math.Abs(nv-1) > 1e-5 {
		t.Errorf("norm %v", nv)
	}
	if diff := maxDiff(one[0], d.reference(t, ids, false)); diff > 1e-4 {
		t.Errorf("mean pooling differs from the reference by %g", diff)
	} else if diff2 := maxDiff(one[0], d.reference(t, ids, true)); diff2 < 1e-3 {
		t.Errorf("the mean is within %g of the last token's state: the reference cannot tell them apart", diff2)
	}
	again, _ := embeddings(t, hs.URL, map[string]any{"input": texts[0]})
	if !reflect.DeepEqual(again, one) {
		t.Error("the same input twice gave different vectors")
	}
	b64, _ := embeddings(t, hs.URL, map[string]any{"input": texts[0], "encoding_format": "base64"})
	if !reflect.DeepEqual(b64, one) {
		t.Error("base64 and float encodings disagree")
	}
	batch, total := embeddings(t, hs.URL, map[string]any{"input": texts, "encoding_format": "float"})
	sum := 0
	for i, text := range texts {
		single, k := embeddings(t, hs.URL, map[string]any{"input": text})
		sum += k
		if !reflect.DeepEqual(batch[i], single[0]) {
			t.Errorf("batch row %d differs from the input alone", i)
		}
	}
	if total != sum {
		t.Errorf("batch usage %d, singles %d", total, sum)
	}
	if reflect.DeepEqual(batch[0], batch[1]) {
		t.Error("different texts gave the same vector")
	}
	byIDs, _ := embeddings(t, hs.URL, map[string]any{"input": ids})
	byLists, _ := embeddings(t, hs.URL, map[string]any{"input": [][]int32{ids, toI32(d.tok.Encode(texts[2], true))}})
	if !reflect.DeepEqual(byIDs[0], one[0]) || !reflect.DeepEqual(byLists[0], one[0]) || !reflect.DeepEqual(byLists[1], batch[2]) {
		t.Error("token-id inputs differ from their text")
	}

	// Chunked prefill (4 tokens a pass) matches one pass; last-token
	// pooling matches its reference; the serial lane gives the batched
	// lane's vectors.
	long := strings.Repeat("Call me Ishmael. ", 4)
	longIDs := toI32(d.tok.Encode(long, true))
	cfg := d.config()
	cfg.PrefillChunkSize, cfg.EmbeddingPooling, cfg.Batch = 4, PoolLast, 1
	_, hsLast := startServer(t, cfg)
	lastVec, _ := embeddings(t, hsLast.URL, map[string]any{"input": long})
	if diff := maxDiff(lastVec[0], d.reference(t, longIDs, true)); diff > 1e-3 {
		t.Errorf("chunked last-token pooling differs from the reference by %g", diff)
	}
	// its passes ask for their last position alone: the bits of computing
	// every position
	if _, ok := cfg.Model.(generate.OutputForwarder); !ok {
		t.Fatal("the demo's served model is not a generate.OutputForwarder")
	}
	plain := cfg
	plain.Model = struct{ generate.Model }{cfg.Model}
	_, hsPlain := startServer(t, plain)
	if v, _ := embeddings(t, hsPlain.URL, map[string]any{"input": long}); !reflect.DeepEqual(v, lastVec) {
		t.Error("last-token pooling asking for one position differs from computing every position")
	}
	cfg.EmbeddingPooling = PoolMean
	_, hsMean := startServer(t, cfg)
	meanVec, _ := embeddings(t, hsMean.URL, map[string]any{"input": long})
	if diff := maxDiff(meanVec[0], d.reference(t, longIDs, false)); diff > 1e-3 {
		t.Errorf("chunked mean pooling differs from the reference by %g", diff)
	}
	if reflect.DeepEqual(meanVec, lastVec) {
		t.Error("mean and last-token pooling agree")
	}
}

// TestEmbeddingDimensions: dimensions equal to the width is allowed
// everywhere; shorter only with MatryoshkaMinDims, as the full vector's
// prefix renormalized; out of range is a 400 naming dimensions.
func TestEmbeddingDimensions(t *testing.T) {
	d := loadDemo(t)
	width := d.m.Info().Hidden
	_, hs := startServer(t, d.config())
	full, _ := embeddings(t, hs.URL, map[string]any{"input": "The whale"})
	same, _ := embeddings(t, hs.URL, map[string]any{"input": "The whale", "dimensions": width})
	if !reflect.DeepEqual(same, full) {
		t.Error("dimensions equal to the width changed the vector")
	}
	refused := func(url string, dims int) {
		t.Helper()
		code, out := post(t, url+"/v1/embeddings", map[string]any{"input": "The whale", "dimensions": dims})
		if e, _ := out["error"].(map[string]any); code != 400 || e == nil || e["param"] != "dimensions" {
			t.Errorf("dimensions %d: %d %v", dims, code, out)
		}
	}
	for _, dims := range []int{width / 2, width + 1, 0} {
		refused(hs.URL, dims)
	}
	cfg := d.config()
	cfg.MatryoshkaMinDims = 8
	_, hsM := startServer(t, cfg)
	short, _ := embeddings(t, hsM.URL, map[string]any{"input": "The whale", "dimensions": 16})
	want := make([]float64, 16)
	for i := range want {
		want[i] = float64(full[0][i]) / norm(full[0][:16])
	}
	if diff := maxDiff(short[0], want); len(short[0]) != 16 || diff > 1e-6 {
		t.Errorf("16 dimensions: %d values, %g from the renormalized prefix", len(short[0]), diff)
	}
	refused(hsM.URL, 4)
	refused(hsM.URL, width+1)
}

// TestEmbeddingsBesideGeneration: embeddings requests sent while chats
// stream get their vectors, and the chats their greedy text: the passes
// take turns on the engine goroutine.
func TestEmbeddingsBesideGeneration(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	msgs := []map[string]string{{"role": "user", "content": "Call me Ishmael."}}
	want, _ := d.direct(t, d.chatPrompt(t, msgs), 24, sampler.Params{})
	ref, _ := embeddings(t, hs.URL, map[string]any{"input": "The whale"})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			got, _ := streamChat(t, hs.URL, map[string]any{"messages": msgs, "max_tokens": 24, "temperature": 0})
			if got != want {
				t.Errorf("chat beside embeddings: %q, want %q", got, want)
			}
		})
		wg.Go(func() {
			for range 3 {
				v, _ := embeddings(t, hs.URL, map[string]any{"input": "The whale"})
				if !reflect.DeepEqual(v, ref) {
					t.Error("an embedding beside generation differs")
				}
			}
		})
	}
	wg.Wait()
}

// TestLoadEmbeddingPooling reads sentence-transformers pooling configs.
func TestLoadEmbeddingPooling(t *testing.T) {
	for _, c := range []struct {
		pooling string
		want    string
		bad     bool
	}{{`{"pooling_mode_lasttoken": true, "pooling_mode_mean_tokens": false}`, PoolLast, false},
		{`{"pooling_mode_mean_tokens": true}`, PoolMean, false},
		{`{"pooling_mode_cls_token": true}`, "", true},
		{"", "", false}} {
		dir := t.TempDir()
		if c.pooling != "" {
			mods := `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`
			if err := os.WriteFile(filepath.Join(dir, "modules.json"), []byte(mods), 0o644); err != nil {
				t.Fatal(err)
			}
			_ = os.Mkdir(filepath.Join(dir, "1_Pooling"), 0o755)
			if err := os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(c.pooling), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := LoadEmbeddingPooling(dir)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("%s: %q, %v; want %q (error %v)", c.pooling, got, err, c.want, c.bad)
		}
	}
}

// BenchmarkEmbeddings measures POST /v1/embeddings on the demo model:
// requests of 8 inputs of one sentence each, reporting input tokens
// embedded per second (client-side wall time, HTTP included).
//
//	go test ./serve -run '^$' -bench Embeddings -benchtime 20x
func BenchmarkEmbeddings(b *testing.B) {
	d := loadDemo(b)
	_, hs := startServer(b, d.config())
	inputs := make([]string, 8)
	for i := range inputs {
		inputs[i] = strings.Repeat("Call me Ishmael. ", i+1)
	}
	body := map[string]any{"input": inputs, "encoding_format": "base64"}
	embeddings(b, hs.URL, body) // warm up
	tokens := 0
	b.ResetTimer()
	for b.Loop() {
		_, n := embeddings(b, hs.URL, body)
		tokens += n
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}
