package kv

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// turboTokens makes n random keys [1, 2, n, 64] and values [1, 2, n, 128].
func turboTokens(r *rand.Rand, n int) (k, v *tensor.Array) {
	k = tensor.FromFloat32(randVals(r, 2*n*64), []int{1, 2, n, 64}, tensor.Float32)
	v = tensor.FromFloat32(randVals(r, 2*n*128), []int{1, 2, n, 128}, tensor.Float32)
	return
}

var turboSpecs = []TurboSpec{{KeyBits: 8, ValueBits: 3}, {KeyBits: 4, ValueBits: 2}, {KeyBits: 2, ValueBits: 5}, {KeyBits: 5, ValueBits: 8}, {KeyBits: 4, ValueBits: 3, QJL: true}}

func turboMakers(spec TurboSpec) []struct {
	name  string
	plain func() Cache
	turbo func() Cache
} {
	return []struct {
		name  string
		plain func() Cache
		turbo func() Cache
	}{
		{"full", func() Cache { return NewKVCache() }, func() Cache { c, _ := NewTurboQuantKVCache(spec); return c }},
		{"rotating", func() Cache { return NewRotatingKVCache(40, 0) },
			func() Cache { c, _ := NewTurboQuantRotatingKVCache(40, 0, spec); return c }},
		{"rotating-keep", func() Cache { return NewRotatingKVCache(40, 4) },
			func() Cache { c, _ := NewTurboQuantRotatingKVCache(40, 4, spec); return c }},
	}
}

// codesOf is what a plain cache's fetched keys and values code to.
func codesOf(spec TurboSpec, kv KV) (k, v []byte) {
	var ka, va *tensor.Array
	scoped(func() {
		ka, va = turboEncode("test", spec, kv.Keys, kv.Values)
		keep(ka, va)
	})
	defer tensor.Free(ka, va)
	return ka.Bytes(), va.Bytes()
}

// TestTurboCacheFollowsPlain: through random prefill chunks and single
// steps (sliding windows wrapping, keep prefixes), a TurboQuant cache
// fetches exactly the codes of what the plain cache of its kind fetches,
// slot for slot, with the same offsets and masks.
func TestTurboCacheFollowsPlain(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	for _, spec := range turboSpecs {
		for _, m := range turboMakers(spec) {
			r := rand.New(rand.NewPCG(11, uint64(spec.KeyBits*10+spec.ValueBits)))
			p, q := m.plain(), m.turbo()
			for step := range 30 {
				n := 1
				if step%4 == 0 {
					n = 1 + r.IntN(30)
				}
				mp, mq := p.MakeMask(n, 0, true), q.MakeMask(n, 0, true)
				if !sameBytes(mp.Array, mq.Array) {
					t.Fatalf("%s %s step %d: masks differ", spec, m.name, step)
				}
				mp.Free()
				mq.Free()
				k, v := turboTokens(r, n)
				pk := p.UpdateAndFetch(k, v)
				qk := q.UpdateAndFetch(k, v)
				wk, wv := codesOf(spec, pk)
				if qk.Turbo == nil || !bytes.Equal(qk.Turbo.Keys.Bytes(), wk) || !bytes.Equal(qk.Turbo.Values.Bytes(), wv) {
					t.Fatalf("%s %s step %d: fetched codes differ from the plain cache's, coded", spec, m.name, step)
				}
				if qk.Len() != pk.Len() || qk.Start != pk.Start || q.Offset() != p.Offset() {
					t.Fatalf("%s %s step %d: len %d/%d, start %d/%d, offset %d/%d", spec, m.name, step,
						qk.Len(), pk.Len(), qk.Start, pk.Start, q.Offset(), p.Offset())
				}
				tensor.Free(k, v)
			}
			p.Free()
			q.Free()
		}
	}
}

// TestTurboCacheStates: trim-then-write, snapshot/restore, clones and
// conversion from a plain cache all fetch what the straight-through cache
// fetches; states of another scheme are refused.
func TestTurboCacheStates(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	spec := DefaultTurbo
	for _, m := range turboMakers(spec) {
		r := rand.New(rand.NewPCG(12, 0))
		ka, va := turboTokens(r, 9)
		kb, vb := turboTokens(r, 5)
		kc, vc := turboTokens(r, 3)
		a, b := m.turbo(), m.turbo()
		tensor.Free(write(a, ka, va)...)
		tensor.Free(write(b, ka, va)...)
		st := a.State()
		cl := a.Clone()
		tensor.Free(write(a, kb, vb)...)
		if a.Trim(5) != 5 {
			t.Fatalf("%s: trim", m.name)
		}
		ga, gb := write(a, kc, vc), write(b, kc, vc)
		sameAll(t, m.name+" trim then write", ga, gb)
		tensor.Free(ga...)
		tensor.Free(gb...)
		// restore the snapshot, and the clone, and both match b after kc
		c := m.turbo()
		if err := c.SetState(st); err != nil {
			t.Fatal(err)
		}
		gc, gl := write(c, kc, vc), write(cl, kc, vc)
		bs := b.State()
		cs := c.State()
		ls := cl.State()
		sameState(t, bs, cs)
		sameState(t, bs, ls)
		if cs.ValueBits != spec.ValueBits || cs.Bits != spec.KeyBits || cs.GroupSize != TurboGroup {
			t.Fatalf("%s: state scheme %d/%d/%d", m.name, cs.GroupSize, cs.Bits, cs.ValueBits)
		}
		other, _ := NewTurboQuantKVCache(TurboSpec{KeyBits: 4, ValueBits: 3})
		if m.name == "full" {
			if err := other.SetState(st); err == nil {
				t.Fatalf("a k4v3 cache took a k8v3 state")
			}
		}
		tensor.Free(gc...)
		tensor.Free(gl...)
		bs.Free()
		cs.Free()
		ls.Free()
		st.Free()
		// conversion: a plain cache converted after ka, then written kb,
		// fetches b's codes after kb
		p := m.plain()
		tensor.Free(write(p, ka, va)...)
		var conv Cache
		switch pc := p.(type) {
		case *KVCache:
			conv, _ = pc.ToTurbo(spec)
		case *RotatingKVCache:
			conv, _ = pc.ToTurbo(spec)
		}
		d := m.turbo()
		tensor.Free(write(d, ka, va)...)
		g1, g2 := write(conv, kb, vb), write(d, kb, vb)
		sameAll(t, m.name+" converted", g1, g2)
		tensor.Free(g1...)
		tensor.Free(g2...)
		for _, x := range []Cache{a, b, c, cl, other, p, conv, d} {
			x.Free()
		}
		tensor.Free(ka, va, kb, vb, kc, vc)
	}
}

// TestTurboPersist: TurboQuant caches save and load bit for bit (kind,
// scheme, window), keep writing like the originals, and a flipped byte in
// their codes is refused as corrupt.
func TestTurboPersist(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(13, 0))
	var cs []Cache
	makers := append(turboMakers(TurboSpec{KeyBits: 4, ValueBits: 3}), turboMakers(DefaultTurboQJL)...)
	for _, m := range makers {
		c := m.turbo()
		for range 8 {
			k, v := turboTokens(r, 1+r.IntN(12))
			c.UpdateAndFetch(k, v)
			tensor.Free(k, v)
		}
		cs = append(cs, c)
	}
	path := filepath.Join(t.TempDir(), "turbo.kv")
	if err := Save(path, cs, []int32{1, 2}, Meta{ModelID: "m"}); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path, Expect{ModelID: "m", Layers: len(cs)})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cs {
		a, b := c.State(), got.Caches[i].State()
		sameState(t, a, b)
		if b.ValueBits != 3 || b.Bits != 4 || b.Kind != a.Kind {
			t.Fatalf("loaded scheme %s k%dv%d", b.Kind, b.Bits, b.ValueBits)
		}
		a.Free()
		b.Free()
		k, v := turboTokens(r, 2)
		ga, gb := write(c, k, v), write(got.Caches[i], k, v)
		sameAll(t, "write after load", ga, gb)
		tensor.Free(ga...)
		tensor.Free(gb...)
		tensor.Free(k, v)
	}
	got.Free()
	raw, _ := os.ReadFile(path)
	idx, err := parseFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	raw[idx.Caches[0].Arrays[1].Offset+7] ^= 0x10
	bad := filepath.Join(t.TempDir(), "bad.kv")
	os.WriteFile(bad, raw, 0o644)
	if _, err := Load(bad, Expect{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped code byte: %v", err)
	}
	for _, c := range cs {
		c.Free()
	}
}

// TestTurboAttention: attention over the codes — the backend's fused
// kernel where it has one (the CPU backend's) and the composed path
// (decode keys and rotated values, SDPA, transform the output back) —
// equals SDPA over the decoded keys and values: grouped queries, two
// sequences, prefill with the causal mask, decode steps, a sliding
// window's rolled bool mask, an additive mask, long contexts (split key
// ranges) and bfloat16 queries.
func TestTurboAttention(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(14, 0))
	type tcase struct {
		spec      TurboSpec
		ctx, n, b int
		window    int // sliding window (rotating cache) when > 0
		additive  bool
		dt        tensor.DType
	}
	cases := []tcase{
		{TurboSpec{KeyBits: 8, ValueBits: 3}, 20, 7, 1, 0, false, tensor.Float32},
		{TurboSpec{KeyBits: 8, ValueBits: 3}, 20, 1, 2, 0, false, tensor.Float32},
		{TurboSpec{KeyBits: 4, ValueBits: 8}, 33, 1, 1, 0, false, tensor.Float32},
		{TurboSpec{KeyBits: 2, ValueBits: 5}, 9, 5, 1, 0, true, tensor.Float32},
		{TurboSpec{KeyBits: 5, ValueBits: 2}, 1500, 1, 1, 0, false, tensor.Float32},
		{TurboSpec{KeyBits: 8, ValueBits: 4}, 700, 3, 2, 0, false, tensor.BFloat16},
		{TurboSpec{KeyBits: 8, ValueBits: 3}, 50, 1, 1, 16, false, tensor.Float32},
		{TurboSpec{KeyBits: 8, ValueBits: 3}, 50, 4, 1, 16, false, tensor.Float32},
	}
	for _, tc := range cases {
		var c Cache
		if tc.window > 0 {
			c, _ = NewTurboQuantRotatingKVCache(tc.window, 0, tc.spec)
		} else {
			c, _ = NewTurboQuantKVCache(tc.spec)
		}
		mk := func(n int) (*tensor.Array, *tensor.Array) {
			k := tensor.FromFloat32(randVals(r, tc.b*2*n*64), []int{tc.b, 2, n, 64}, tensor.Float32)
			v := tensor.FromFloat32(randVals(r, tc.b*2*n*128), []int{tc.b, 2, n, 128}, tensor.Float32)
			return k, v
		}
		k0, v0 := mk(tc.ctx)
		c.UpdateAndFetch(k0, v0)
		k, v := mk(tc.n)
		qf := tensor.FromFloat32(randVals(r, tc.b*4*tc.n*64), []int{tc.b, 4, tc.n, 64}, tensor.Float32)
		q := tensor.AsType(qf, tc.dt)
		win := 0
		if tc.window > 0 {
			win = tc.window - 4 // narrower than the ring: a rolled mask even for one token
		}
		m := c.MakeMask(tc.n, win, tc.additive)
		kv := c.UpdateAndFetch(k, v)
		if tc.additive {
			z := tensor.FullOn(q.Backend(), []int{1}, 0, tensor.Float32)
			add := tensor.WhereScalar(m.Array, z, -1e9)
			m.Free()
			z.Free()
			m = Mask{Kind: tensor.MaskArray, Array: add}
		}
		name := fmt.Sprintf("%s ctx %d n %d b %d window %d additive %v %s", tc.spec, tc.ctx, tc.n, tc.b, tc.window, tc.additive, tc.dt)
		if tc.window > 0 && tc.n == 1 && m.Array == nil {
			t.Fatalf("%s: expected a rolled window mask", name)
		}
		o := m.Options(0.125)
		got := Attention(q, kv, o)
		comp := turboAttentionComposed(q, kv.Turbo, o)
		dk, dv := kv.Turbo.Decode()
		q32 := tensor.AsType(q, tensor.Float32)
		want := tensor.ScaledDotProductAttention(q32, dk, dv, o)
		if g, w := got.Shape(), want.Shape(); !slices.Equal(g, w) || got.DType() != tc.dt {
			t.Fatalf("%s: shape %v %s, want %v", name, g, got.DType(), w)
		}
		tol := 2e-5
		if tc.dt == tensor.BFloat16 {
			tol = 2e-2
		}
		wf := want.Float32s()
		for what, a := range map[string]*tensor.Array{"fused": got, "composed": comp} {
			for i, g := range a.Float32s() {
				if math.Abs(float64(g-wf[i])) > tol*(1+math.Abs(float64(wf[i]))) {
					t.Fatalf("%s: %s out[%d] = %v, decoded attention %v", name, what, i, g, wf[i])
				}
			}
		}
		tensor.Free(k0, v0, k, v, qf, q, q32, got, comp, dk, dv, want)
		m.Free()
		c.Free()
	}
}

// TestTurboPlan: MaybeQuantize with a Turbo plan converts full and sliding
// caches once they reach Start, and a head dim TurboQuant cannot take is
// an error that names it.
func TestTurboPlan(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(15, 0))
	spec := TurboSpec{KeyBits: 8, ValueBits: 4}
	caches := []Cache{NewKVCache(), NewRotatingKVCache(16, 0), nil}
	plan := QuantPlan{Turbo: &spec, Start: 10}
	for _, n := range []int{6, 6} {
		k, v := turboTokens(r, n)
		for _, c := range caches[:2] {
			c.UpdateAndFetch(k, v)
		}
		tensor.Free(k, v)
		if _, err := MaybeQuantize(caches, plan); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := caches[0].(*TurboQuantKVCache); !ok {
		t.Fatalf("full cache is %T after start", caches[0])
	}
	if _, ok := caches[1].(*TurboQuantRotatingKVCache); !ok {
		t.Fatalf("sliding cache is %T after start", caches[1])
	}
	if !plan.Quantizes() {
		t.Fatal("a turbo plan does not quantize")
	}
	for _, c := range caches[:2] {
		c.Free()
	}
	bad := []Cache{NewKVCache()}
	k := tensor.FromFloat32(randVals(r, 96), []int{1, 1, 1, 96}, tensor.Float32)
	bad[0].UpdateAndFetch(k, k)
	_, err := MaybeQuantize(bad, QuantPlan{Turbo: &spec})
	if err == nil || !strings.Contains(err.Error(), "96") {
		t.Fatalf("head dim 96: %v", err)
	}
	bad[0].Free()
	k.Free()
	for _, s := range []string{"turbo:k3v3", "turbo:k8", "turbo:x", "affine"} {
		if _, err := ParseKVQuant(s); err == nil {
			t.Errorf("ParseKVQuant(%q) accepted", s)
		}
	}
	if s, err := ParseKVQuant("turbo"); err != nil || s != DefaultTurbo {
		t.Errorf("turbo: %v %v", s, err)
	}
	if s, err := ParseKVQuant("turbo:k4v2"); err != nil || s != (TurboSpec{KeyBits: 4, ValueBits: 2}) {
		t.Errorf("turbo:k4v2: %v %v", s, err)
	}
}

// TestTurboBytes: at head dim 128, k8v3 codes 200 bytes per token and KV
// head (2.56× fewer than bfloat16's 512).
func TestTurboBytes(t *testing.T) {
	s := DefaultTurbo
	if got := s.KeyBytes(128) + s.ValueBytes(128); got != 200 {
		t.Fatalf("k8v3 at 128: %d bytes", got)
	}
	for _, sp := range []TurboSpec{{KeyBits: 2, ValueBits: 2}, {KeyBits: 5, ValueBits: 5}, {KeyBits: 8, ValueBits: 8}, {KeyBits: 4, ValueBits: 3}, {KeyBits: 3, ValueBits: 2, QJL: true}, {KeyBits: 5, ValueBits: 8, QJL: true}} {
		for _, d := range TurboHeadDims {
			if sp.keyDim(sp.KeyBytes(d)) != d || sp.valueDim(sp.ValueBytes(d)) != d {
				t.Fatalf("%s d=%d: sizes do not invert", sp, d)
			}
		}
	}
}
