package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

func rawWriter(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}

func TestWriteReadRoundTrip(t *testing.T) {
	kvs := []KV{
		{"general.architecture", "llama"},
		{"u8", uint8(7)}, {"i8", int8(-7)}, {"u16", uint16(700)}, {"i16", int16(-700)},
		{"u32", uint32(70000)}, {"i32", int32(-70000)}, {"f32", float32(1.5)}, {"b", true},
		{"u64", uint64(1) << 40}, {"i64", int64(-1) << 40}, {"f64", 2.25},
		{"strs", []string{"a", "", "▁t"}}, {"fs", []float32{0, -1}}, {"is", []int32{3, -3}},
	}
	a := bytes.Repeat([]byte{1, 2, 3, 4}, 3) // F32 [3]
	b := bytes.Repeat([]byte{9, 8}, 5*2)     // F16 [2,5] → dims {5,2}
	var buf bytes.Buffer
	err := WriteFile(&buf, kvs, []TensorSpec{
		{Name: "a", Type: TypeF32, Dims: []uint64{3}, Write: rawWriter(a)},
		{Name: "b", Type: TypeF16, Dims: []uint64{5, 2}, Write: rawWriter(b)},
	})
	if err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if string(data[:4]) != "GGUF" || binary.LittleEndian.Uint32(data[4:]) != 3 {
		t.Fatalf("header starts %q version %d", data[:4], binary.LittleEndian.Uint32(data[4:]))
	}
	h, err := ReadHeader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Keys) != len(kvs) {
		t.Fatalf("%d keys, want %d", len(h.Keys), len(kvs))
	}
	for i, kv := range kvs {
		if h.Keys[i] != kv.Key {
			t.Fatalf("key %d is %q, want %q", i, h.Keys[i], kv.Key)
		}
		got := h.KV[kv.Key]
		if arr, ok := got.([]any); ok {
			want, _ := json.Marshal(kv.Value)
			gotJSON, _ := json.Marshal(arr)
			if string(want) != string(gotJSON) {
				t.Errorf("%s = %s, want %s", kv.Key, gotJSON, want)
			}
			continue
		}
		if got != kv.Value {
			t.Errorf("%s = %v (%T), want %v (%T)", kv.Key, got, got, kv.Value, kv.Value)
		}
	}
	if h.DataOffset%32 != 0 || len(h.Tensors) != 2 {
		t.Fatalf("data at %d, %d tensors", h.DataOffset, len(h.Tensors))
	}
	for i, want := range [][]byte{a, b} {
		ti := h.Tensors[i]
		if ti.Offset%32 != 0 || ti.Size != uint64(len(want)) {
			t.Fatalf("tensor %s at %d size %d", ti.Name, ti.Offset, ti.Size)
		}
		got := data[h.DataOffset+ti.Offset:][:ti.Size]
		if !bytes.Equal(got, want) {
			t.Errorf("tensor %s data differs", ti.Name)
		}
	}
	if h.Tensors[1].Dims[0] != 5 || h.Tensors[1].Dims[1] != 2 {
		t.Errorf("dims %v, want [5 2]", h.Tensors[1].Dims)
	}
	if len(data)%32 != 0 {
		t.Errorf("file of %d bytes does not end aligned", len(data))
	}
}

func TestWriteFileRejects(t *testing.T) {
	one := []TensorSpec{{Name: "x", Type: TypeF32, Dims: []uint64{4}, Write: rawWriter(make([]byte, 12))}}
	if err := WriteFile(io.Discard, nil, one); err == nil || !strings.Contains(err.Error(), "wrote 12 bytes") {
		t.Errorf("short tensor: %v", err)
	}
	q := []TensorSpec{{Name: "q", Type: TypeQ4_0, Dims: []uint64{31}, Write: rawWriter(nil)}}
	if err := WriteFile(io.Discard, nil, q); err == nil {
		t.Error("31 elements of Q4_0 were accepted")
	}
	if err := WriteFile(io.Discard, []KV{{"k", 1}}, nil); err == nil {
		t.Error("an int (not a GGUF type) was accepted")
	}
	if err := WriteFile(io.Discard, []KV{{"k", uint8(1)}, {"k", uint8(2)}}, nil); err == nil {
		t.Error("a duplicate key was accepted")
	}
}

// Every truncation of a valid file and a few corruptions are errors that
// wrap ErrFormat, never panics.
func TestReadHeaderMalformed(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFile(&buf, []KV{{"s", "abc"}, {"a", []int32{1, 2}}},
		[]TensorSpec{{Name: "x", Type: TypeF32, Dims: []uint64{8}, Write: rawWriter(make([]byte, 32))}}); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	for n := range len(data) {
		if _, err := ReadHeader(bytes.NewReader(data[:n]), int64(n)); !errors.Is(err, ErrFormat) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	bad := bytes.Clone(data)
	bad[0] = 'X'
	if _, err := ReadHeader(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrFormat) {
		t.Errorf("bad magic: %v", err)
	}
	bad = bytes.Clone(data)
	binary.LittleEndian.PutUint64(bad[16:], 1<<40) // key count
	if _, err := ReadHeader(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, ErrFormat) {
		t.Errorf("huge key count: %v", err)
	}
}

// rope rotates pairs (x[a[i]], x[b[i]]) of a head by position p.
func rope(x []float32, p, d int, interleaved bool, theta float64) {
	for j := range d / 2 {
		a, b := j, j+d/2
		if interleaved {
			a, b = 2*j, 2*j+1
		}
		ang := float64(p) * math.Pow(theta, -2*float64(j)/float64(d))
		c, s := float32(math.Cos(ang)), float32(math.Sin(ang))
		x[a], x[b] = x[a]*c-x[b]*s, x[a]*s+x[b]*c
	}
}

func matvec(w []float32, rows, cols int, x []float32) []float32 {
	out := make([]float32, rows)
	for r := range rows {
		var s float64
		for c := range cols {
			s += float64(w[r*cols+c]) * float64(x[c])
		}
		out[r] = float32(s)
	}
	return out
}

// The permuted projections under interleaved rotary give the same
// attention scores as the original ones under Hugging Face's rotate-half
// rotary: the converted model is the same function.
func TestRopePermuteKeepsScores(t *testing.T) {
	const heads, d, cols = 2, 8, 5
	rows := heads * d
	r := rand.New(rand.NewPCG(1, 2))
	wq, wk := make([]float32, rows*cols), make([]float32, rows*cols)
	for i := range wq {
		wq[i], wk[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	xq, xk := make([]float32, cols), make([]float32, cols)
	for i := range xq {
		xq[i], xk[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	pq, pk := ropePermute(wq, rows, cols, heads), ropePermute(wk, rows, cols, heads)
	for _, pos := range [][2]int{{0, 0}, {3, 1}, {17, 9}} {
		q, k := matvec(wq, rows, cols, xq), matvec(wk, rows, cols, xk)
		q2, k2 := matvec(pq, rows, cols, xq), matvec(pk, rows, cols, xk)
		for h := range heads {
			rope(q[h*d:(h+1)*d], pos[0], d, false, 10000)
			rope(k[h*d:(h+1)*d], pos[1], d, false, 10000)
			rope(q2[h*d:(h+1)*d], pos[0], d, true, 10000)
			rope(k2[h*d:(h+1)*d], pos[1], d, true, 10000)
			var s1, s2 float64
			for i := h * d; i < (h+1)*d; i++ {
				s1 += float64(q[i]) * float64(k[i])
				s2 += float64(q2[i]) * float64(k2[i])
			}
			if math.Abs(s1-s2) > 1e-4*math.Max(1, math.Abs(s1)) {
				t.Errorf("positions %v head %d: score %g after conversion, %g before", pos, h, s2, s1)
			}
		}
	}
	// A non-permuted pair must differ, or the test proves nothing.
	q, k := matvec(wq, rows, cols, xq), matvec(wk, rows, cols, xk)
	q2, k2 := append([]float32(nil), q...), append([]float32(nil), k...)
	rope(q[:d], 5, d, false, 10000)
	rope(k[:d], 1, d, false, 10000)
	rope(q2[:d], 5, d, true, 10000)
	rope(k2[:d], 1, d, true, 10000)
	var s1, s2 float64
	for i := range d {
		s1 += float64(q[i]) * float64(k[i])
		s2 += float64(q2[i]) * float64(k2[i])
	}
	if math.Abs(s1-s2) < 1e-3 {
		t.Fatalf("the two rotary layouts agree without the permutation (%g, %g)", s1, s2)
	}
}

func readGGUF(t *testing.T, path string) (*File, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadHeader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	return h, data
}

func TestConvertTinyLlama(t *testing.T) {
	dir := t.TempDir()
	s := tinyShape
	if err := WriteRandomLlama(dir, s, 3); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []GGMLType{TypeF16, TypeF32} {
		out := filepath.Join(t.TempDir(), "m.gguf")
		if err := ConvertLlama(dir, out, ConvertOptions{Type: typ}); err != nil {
			t.Fatal(err)
		}
		h, data := readGGUF(t, out)
		want := map[string]any{
			"general.architecture": "llama", "llama.block_count": uint32(s.Layers),
			"llama.embedding_length": uint32(s.Hidden), "llama.feed_forward_length": uint32(s.FFN),
			"llama.attention.head_count": uint32(s.Heads), "llama.attention.head_count_kv": uint32(s.KVHeads),
			"llama.rope.dimension_count": uint32(s.HeadDim), "llama.rope.freq_base": float32(500000),
			"tokenizer.ggml.model": "llama", "tokenizer.ggml.eos_token_id": uint32(2),
			"tokenizer.ggml.unknown_token_id": uint32(0),
		}
		for k, v := range want {
			if h.KV[k] != v {
				t.Errorf("%s = %v, want %v", k, h.KV[k], v)
			}
		}
		toks, _ := h.KV["tokenizer.ggml.tokens"].([]any)
		types, _ := h.KV["tokenizer.ggml.token_type"].([]any)
		if len(toks) != s.Vocab || len(types) != s.Vocab {
			t.Fatalf("%d tokens and %d types, want %d", len(toks), len(types), s.Vocab)
		}
		pieces, _ := syntheticVocab(s.Vocab)
		for i, p := range pieces {
			if toks[i] != p {
				t.Fatalf("token %d is %q, want %q", i, toks[i], p)
			}
		}
		if types[0] != int32(tokUnknown) || types[1] != int32(tokControl) || types[2] != int32(tokControl) || types[300] != int32(tokNormal) {
			t.Errorf("token types %v %v %v %v", types[0], types[1], types[2], types[300])
		}
		if n := len(h.Tensors); n != 3+9*s.Layers {
			t.Fatalf("%d tensors, want %d", n, 3+9*s.Layers)
		}
		byName := map[string]TensorInfo{}
		for _, ti := range h.Tensors {
			byName[ti.Name] = ti
		}
		st, err := safetensors.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		// elem reads element i of a GGUF tensor as float32.
		elem := func(ti TensorInfo, i int) float32 {
			b := data[h.DataOffset+ti.Offset:]
			if ti.Type == TypeF32 {
				return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
			return tensor.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		src := func(name string, i int) float32 {
			b, err := st.Bytes(name)
			if err != nil {
				t.Fatal(err)
			}
			return tensor.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
		k := byName["blk.1.attn_k.weight"]
		if k.Type != typ || k.Dims[0] != uint64(s.Hidden) || k.Dims[1] != uint64(s.KVHeads*s.HeadDim) {
			t.Fatalf("attn_k is %s %v", k.Type, k.Dims)
		}
		if n := byName["blk.0.ffn_norm.weight"]; n.Type != TypeF32 || elem(n, 5) != 1 {
			t.Errorf("ffn_norm is %s, element 5 = %v", n.Type, elem(n, 5))
		}
		emb := byName["token_embd.weight"]
		for _, i := range []int{0, 77, s.Vocab*s.Hidden - 1} {
			if got, w := elem(emb, i), src("model.embed_tokens.weight", i); got != w {
				t.Errorf("token_embd[%d] = %v, want %v", i, got, w)
			}
		}
		// Row 2j+kk of head h comes from row kk*d/2+j.
		q := byName["blk.0.attn_q.weight"]
		d := s.HeadDim
		for _, c := range [][3]int{{0, 0, 0}, {1, 3, 1}, {3, d/2 - 1, 1}} {
			h0, j, kk := c[0], c[1], c[2]
			dst, from := h0*d+2*j+kk, h0*d+kk*d/2+j
			for _, col := range []int{0, s.Hidden - 1} {
				if got, w := elem(q, dst*s.Hidden+col), src("model.layers.0.self_attn.q_proj.weight", from*s.Hidden+col); got != w {
					t.Errorf("attn_q row %d col %d = %v, want source row %d: %v", dst, col, got, from, w)
				}
			}
		}
		v := byName["blk.0.attn_v.weight"]
		if got, w := elem(v, 2*s.Hidden+1), src("model.layers.0.self_attn.v_proj.weight", 2*s.Hidden+1); got != w {
			t.Errorf("attn_v is permuted or wrong: %v, want %v", got, w)
		}
		st.Close()
	}
}

func TestConvertRejects(t *testing.T) {
	dir := t.TempDir()
	if err := WriteRandomLlama(dir, tinyShape, 1); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.gguf")
	if err := ConvertLlama(dir, out, ConvertOptions{Type: TypeQ4_0}); err == nil {
		t.Error("Q4_0 output was accepted")
	}
	edit := func(key string, v any) {
		raw, _ := os.ReadFile(filepath.Join(dir, "config.json"))
		var cfg map[string]any
		json.Unmarshal(raw, &cfg)
		cfg[key] = v
		raw, _ = json.Marshal(cfg)
		os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644)
	}
	edit("quantization", map[string]any{"bits": 4, "group_size": 64})
	if err := ConvertLlama(dir, out, ConvertOptions{Type: TypeF16}); err == nil || !strings.Contains(err.Error(), "quantized") {
		t.Errorf("quantized checkpoint: %v", err)
	}
	edit("quantization", nil)
	edit("intermediate_size", 100)
	if err := ConvertLlama(dir, out, ConvertOptions{Type: TypeF16}); err == nil || !strings.Contains(err.Error(), "shape") {
		t.Errorf("wrong FFN size: %v", err)
	}
	edit("intermediate_size", tinyShape.FFN)
	os.Remove(filepath.Join(dir, "tokenizer.json"))
	if err := ConvertLlama(dir, out, ConvertOptions{Type: TypeF16}); err == nil || !strings.Contains(err.Error(), "vocabulary") {
		t.Errorf("no tokenizer: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a failed conversion left %s: %v", out, err)
	}
}

func TestRandomLlamaDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if err := WriteRandomLlama(d, tinyShape, 9); err != nil {
			t.Fatal(err)
		}
	}
	x, _ := os.ReadFile(filepath.Join(a, "model.safetensors"))
	y, _ := os.ReadFile(filepath.Join(b, "model.safetensors"))
	if !bytes.Equal(x, y) {
		t.Error("the same seed gave different weights")
	}
}

func TestInfo(t *testing.T) {
	dir := t.TempDir()
	if err := WriteRandomLlama(dir, tinyShape, 1); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.gguf")
	if err := run([]string{"convert", "-in", dir, "-out", out}, io.Discard); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := run([]string{"info", out}, &buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GGUF v3", "general.architecture = llama", "F16 ", "16.000 bits/weight", "F32 "} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("info lacks %q:\n%s", want, buf.String())
		}
	}
	if err := run([]string{"nope"}, io.Discard); err == nil {
		t.Error("an unknown command was accepted")
	}
}

func TestReadVocabTypes(t *testing.T) {
	dir := t.TempDir()
	tj := `{"model":{"type":"BPE","unk_token":"<unk>","vocab":{"<unk>":0,"<0x0A>":1,"a":2}},
		"added_tokens":[{"id":3,"content":"<|end|>","special":true}]}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tj), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := readVocab(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	wantTok := []string{"<unk>", "<0x0A>", "a", "<|end|>", "<pad_4>"}
	wantType := []int32{tokUnknown, tokByte, tokNormal, tokControl, tokUnused}
	for i := range wantTok {
		if v.tokens[i] != wantTok[i] || v.types[i] != wantType[i] {
			t.Errorf("id %d: %q type %d, want %q type %d", i, v.tokens[i], v.types[i], wantTok[i], wantType[i])
		}
	}
	if _, err := readVocab(dir, 3); err == nil {
		t.Error("an added token past the vocabulary size was accepted")
	}
}
