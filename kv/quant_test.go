package kv

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestToQuantized: a converted cache holds the same tokens, quantized, and
// attention through it continues the sequence within the quantized bound.
func TestToQuantized(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, rotating := range []bool{false, true} {
		r := rand.New(rand.NewPCG(4, 1))
		s := newSeq(1, 4, 2, 32, 32).withMeans(r)
		var c Cache = NewKVCache()
		window := 0
		if rotating {
			c, window = NewRotatingKVCache(24, 0), 24
		}
		for _, n := range []int{9, 1, 1, 20, 1} {
			k, v, q, _ := s.chunk(r, n)
			tensor.Free(write(c, k, v)...)
			tensor.Free(k, v, q)
		}
		var qc Cache
		var err error
		if rotating {
			qc, err = c.(*RotatingKVCache).ToQuantized(32, 8)
		} else {
			qc, err = c.(*KVCache).ToQuantized(32, 8)
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Free()
		if qc.Offset() != len(s.keys) {
			t.Fatalf("offset %d, want %d", qc.Offset(), len(s.keys))
		}
		for _, n := range []int{1, 5, 1} {
			k, v, q, qh := s.chunk(r, n)
			got := attend(qc, k, v, q, 0)
			tensor.Free(k, v, q)
			want := s.reference(qh, n, window, 1/math.Sqrt(32), false)
			if e := relErr(got, want); e > 1e-2 {
				t.Fatalf("rotating %v: relative error %.3g after conversion", rotating, e)
			}
		}
		qc.Free()
	}
}

// TestMaybeQuantize: layers convert once their offset reaches the start,
// with per-layer overrides; zero-bit layers and other kinds stay as they are.
func TestMaybeQuantize(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(4, 2))
	qc, _ := NewQuantizedKVCache(32, 4)
	caches := []Cache{NewKVCache(), NewKVCache(), NewRotatingKVCache(16, 0), NewKVCache(), qc}
	plan := QuantPlan{Default: QuantSpec{Bits: 8, GroupSize: 32}, PerLayer: map[int]QuantSpec{1: {Bits: 4, GroupSize: 32}, 3: {}}, Start: 10}
	fill := func(n int) {
		for _, c := range caches {
			k, v := tokens(r, n)
			c.UpdateAndFetch(k, v)
			tensor.Free(k, v)
		}
	}
	fill(5)
	if n, err := MaybeQuantize(caches, plan); err != nil || n != 0 {
		t.Fatalf("below start: converted %d, %v", n, err)
	}
	fill(5)
	n, err := MaybeQuantize(caches, plan)
	if err != nil || n != 3 {
		t.Fatalf("converted %d, %v; want 3", n, err)
	}
	if q, ok := caches[0].(*QuantizedKVCache); !ok || q.Bits() != 8 {
		t.Fatalf("layer 0 is %T", caches[0])
	}
	if q, ok := caches[1].(*QuantizedKVCache); !ok || q.Bits() != 4 {
		t.Fatalf("layer 1 is %T", caches[1])
	}
	if _, ok := caches[2].(*QuantizedRotatingKVCache); !ok {
		t.Fatalf("layer 2 is %T", caches[2])
	}
	if _, ok := caches[3].(*KVCache); !ok {
		t.Fatalf("layer 3 (0 bits) is %T", caches[3])
	}
	if caches[4] != Cache(qc) {
		t.Fatal("an already quantized layer was replaced")
	}
	for _, c := range caches {
		if c.Offset() != 10 {
			t.Fatalf("%T offset %d", c, c.Offset())
		}
		c.Free()
	}
}

// TestReadKVConfig parses kv_config.json and rejects bad entries.
func TestReadKVConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "kv_config.json")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := ReadKVConfig(write(`[{"layer_idx": 0, "bits": 8, "group_size": 32}, {"layer_idx": 5, "bits": 4}, {"layer_idx": 2, "bits": 0}]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != (QuantSpec{Bits: 8, GroupSize: 32}) || got[5] != (QuantSpec{Bits: 4, GroupSize: 64}) || got[2].Bits != 0 {
		t.Fatalf("parsed %v", got)
	}
	plan := QuantPlan{Default: QuantSpec{Bits: 4, GroupSize: 64}, PerLayer: got}
	if plan.For(0) != (QuantSpec{Bits: 8, GroupSize: 32}) || plan.For(1) != (QuantSpec{Bits: 4, GroupSize: 64}) {
		t.Fatalf("plan gives %v, %v", plan.For(0), plan.For(1))
	}
	for _, bad := range []string{
		`{"layer_idx": 0}`,
		`[{"bits": 8}]`,
		`[{"layer_idx": 1, "bits": 7}]`,
		`[{"layer_idx": 1, "bits": 8, "group_size": 48}]`,
		`[{"layer_idx": 1, "bits": 8}, {"layer_idx": 1, "bits": 4}]`,
	} {
		if _, err := ReadKVConfig(write(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// TestQuantizedAttentionMasks: the quantized path honours every mask form
// the plain path does (causal kind, bool array, additive array), matching
// SDPA over the dequantized keys and values.
func TestQuantizedAttentionMasks(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(4, 3))
	q, _ := NewQuantizedKVCache(32, 8)
	defer q.Free()
	k, v := tokens(r, 6)
	defer tensor.Free(k, v)
	kv := q.UpdateAndFetch(k, v)
	qa := tensor.FromFloat32(randVals(r, 4*3*32), []int{1, 4, 3, 32}, tensor.Float32)
	defer qa.Free()
	p := kv.Quant
	dk := tensor.Dequantize(p.Keys.W, p.Keys.Scales, p.Keys.Biases, 32, 8, tensor.Float32)
	dv := tensor.Dequantize(p.Values.W, p.Values.Scales, p.Values.Biases, 32, 8, tensor.Float32)
	defer tensor.Free(dk, dv)
	boolMask := causalMask(tensor.Default(), 3, 3, 2)
	defer boolMask.Free()
	addVals := make([]float32, 4*3*6)
	for i := range addVals {
		addVals[i] = float32(r.NormFloat64())
	}
	addMask := tensor.FromFloat32(addVals, []int{1, 4, 3, 6}, tensor.Float32)
	defer addMask.Free()
	for _, o := range []tensor.SDPAOptions{
		{},
		{MaskKind: tensor.MaskCausal},
		{MaskKind: tensor.MaskArray, Mask: boolMask},
		{MaskKind: tensor.MaskArray, Mask: addMask},
		{Scale: 0.3, MaskKind: tensor.MaskCausal},
	} {
		got := Attention(qa, kv, o)
		want := tensor.ScaledDotProductAttention(qa, dk, dv, o)
		if e := maxAbsErr(got.Float32s(), f64(want.Float32s())); e > 1e-5 {
			t.Errorf("mask %v: %.3g from SDPA over dequantized K/V", o.MaskKind, e)
		}
		tensor.Free(got, want)
	}
}

func f64(a []float32) []float64 {
	o := make([]float64, len(a))
	for i, v := range a {
		o[i] = float64(v)
	}
	return o
}
