package kv

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// writes draws a random write sequence: single tokens (decode) and prefill
// chunks, mixed, of total length up to maxLen.
func writes(r *rand.Rand, maxLen, maxChunk int) []int {
	total := 1 + r.IntN(maxLen)
	var out []int
	for total > 0 {
		n := 1
		if r.IntN(2) == 0 {
			n = 2 + r.IntN(maxChunk-1)
		}
		n = min(n, total)
		out = append(out, n)
		total -= n
	}
	return out
}

type randomCase struct {
	name string
	make func(r *rand.Rand) (c Cache, window, maskWindow int)
	// plain: max abs error per write; quantized: relative error over all
	// sequences pooled (a single sequence may reach 2× it: see below)
	tol    float64
	quant  *QuantSpec
	iid    bool // quantized: i.i.d. Gaussian keys and values instead of per-channel offsets + noise
	seqs   int
	maxLen int
}

// TestRandomSequences writes 1,080 random sequences through every cache
// kind and checks every step's attention output against attention over the
// full history: exact (float32 rounding) for KVCache, windowed for
// RotatingKVCache, and within 1e-2 (8-bit) and 6e-2 (4-bit) relative error
// for the quantized caches. Lengths cross the 256-slot growth step and
// the windows, so growth, trimming, wrapping and the rolled masks all run.
func TestRandomSequences(t *testing.T) {
	if total := randomSequences(t, 1); total < 1000 {
		t.Fatalf("only %d sequences", total)
	}
}

// randomSequences runs TestRandomSequences's cases on the default backend
// with each case's sequence count divided by div (at least 2 per case),
// and returns the number of sequences run.
func randomSequences(t *testing.T, div int) (total int) {
	defer tensortest.NoLeaks(t)()
	spec8, spec4 := &QuantSpec{Bits: 8, GroupSize: 32}, &QuantSpec{Bits: 4, GroupSize: 32}
	q := func(bits int, rotating bool, sizes ...int) func(r *rand.Rand) (Cache, int, int) {
		if len(sizes) == 0 {
			sizes = []int{8, 19, 64}
		}
		return func(r *rand.Rand) (Cache, int, int) {
			if rotating {
				ms := sizes[r.IntN(len(sizes))]
				c, err := NewQuantizedRotatingKVCache(ms, 0, 32, bits)
				if err != nil {
					panic(err)
				}
				return c, ms, 0
			}
			c, err := NewQuantizedKVCache(32, bits)
			if err != nil {
				panic(err)
			}
			return c, 0, 0
		}
	}
	cases := []randomCase{
		{name: "KVCache", make: func(r *rand.Rand) (Cache, int, int) { return NewKVCache(), 0, 0 },
			tol: 2e-5, seqs: 300, maxLen: 120},
		{name: "KVCache/long", make: func(r *rand.Rand) (Cache, int, int) { return NewKVCache(), 0, 0 },
			tol: 2e-5, seqs: 20, maxLen: 700},
		{name: "RotatingKVCache", make: func(r *rand.Rand) (Cache, int, int) {
			ms := []int{1, 2, 5, 8, 17, 40}[r.IntN(6)]
			mw := 0
			if r.IntN(3) == 0 && ms > 2 {
				mw = 1 + r.IntN(ms-1) // a narrower attention window than the cache
			}
			w := ms
			if mw > 0 {
				w = mw
			}
			return NewRotatingKVCache(ms, 0), w, mw
		}, tol: 2e-5, seqs: 300, maxLen: 100},
		{name: "RotatingKVCache/long", make: func(r *rand.Rand) (Cache, int, int) {
			return NewRotatingKVCache(300, 0), 300, 0
		}, tol: 2e-5, seqs: 20, maxLen: 700},
		{name: "QuantizedKVCache/8", make: q(8, false), tol: 1e-2, quant: spec8, seqs: 100, maxLen: 100},
		{name: "QuantizedKVCache/4", make: q(4, false), tol: 6e-2, quant: spec4, seqs: 100, maxLen: 100},
		{name: "QuantizedRotatingKVCache/8", make: q(8, true), tol: 1e-2, quant: spec8, seqs: 100, maxLen: 100},
		{name: "QuantizedRotatingKVCache/4", make: q(4, true), tol: 6e-2, quant: spec4, seqs: 100, maxLen: 100},
		{name: "QuantizedKVCache/8/long", make: q(8, false), tol: 1e-2, quant: spec8, seqs: 8, maxLen: 600},
		{name: "QuantizedRotatingKVCache/4/long", make: q(4, true, 300), tol: 6e-2, quant: spec4, seqs: 8, maxLen: 600},
		{name: "QuantizedKVCache/8/iid", make: q(8, false), tol: 2e-2, quant: spec8, iid: true, seqs: 20, maxLen: 100},
		{name: "QuantizedKVCache/4/iid", make: q(4, false), tol: 1.2e-1, quant: spec4, iid: true, seqs: 20, maxLen: 100},
	}
	for ci, tc := range cases {
		tc.seqs = max(tc.seqs/div, 2)
		t.Run(tc.name, func(t *testing.T) {
			defer tensortest.NoLeaks(t)()
			worst, worstExact := 0.0, 0.0
			poolNum, poolDen := 0.0, 0.0
			for si := range tc.seqs {
				r := rand.New(rand.NewPCG(uint64(ci), uint64(si)))
				hkv := 1 + r.IntN(2)
				hq := hkv * (1 + r.IntN(2))
				c, window, maskWindow := tc.make(r)
				s := newSeq(1, hq, hkv, 32, 32)
				if tc.quant != nil {
					s.quant = tc.quant
					if !tc.iid {
						s.withMeans(r)
					}
				}
				ws := writes(r, tc.maxLen, 24)
				num, den := 0.0, 0.0
				for wi, n := range ws {
					k, v, qa, qh := s.chunk(r, n)
					got := attend(c, k, v, qa, maskWindow)
					freeAll(k, v, qa)
					scale := 1 / math.Sqrt(32)
					want := s.reference(qh, n, window, scale, false)
					if tc.quant == nil {
						e := maxAbsErr(got, want)
						worst = max(worst, e)
						if !(e <= tc.tol) {
							c.Free()
							t.Fatalf("seq %d (writes %v), write %d (n=%d): error %.3g > %.3g", si, ws, wi, n, e, tc.tol)
						}
						continue
					}
					// the cache logic is exact: attention over the
					// dequantized history matches to float32 rounding
					exact := maxAbsErr(got, s.reference(qh, n, window, scale, true))
					worstExact = max(worstExact, exact)
					if !(exact <= 5e-5) {
						c.Free()
						t.Fatalf("seq %d (writes %v), write %d (n=%d): %.3g from attention over the dequantized history", si, ws, wi, n, exact)
					}
					for i := range want {
						d := float64(got[i]) - want[i]
						num += d * d
						den += want[i] * want[i]
					}
				}
				if tc.quant != nil {
					// A context of a few tokens makes the output
					// (nearly) a value row, whose 4-bit round trip
					// alone is off by 7–10% on Gaussian-like data: single
					// short sequences get twice the pooled bound.
					e := math.Sqrt(num / den)
					worst = max(worst, e)
					poolNum += num
					poolDen += den
					if !(e <= 2*tc.tol) {
						c.Free()
						t.Fatalf("seq %d (writes %v): relative error %.3g > %.3g", si, ws, e, 2*tc.tol)
					}
				}
				if c.Offset() != len(s.keys) {
					t.Fatalf("seq %d: offset %d after %d tokens", si, c.Offset(), len(s.keys))
				}
				c.Free()
			}
			if tc.quant != nil {
				pooled := math.Sqrt(poolNum / poolDen)
				if !(pooled <= tc.tol) {
					t.Fatalf("pooled relative error %.3g > %.3g", pooled, tc.tol)
				}
				t.Logf("%d sequences: pooled relative error %.3g (bound %.3g), worst sequence %.3g; max abs vs dequantized history %.3g",
					tc.seqs, pooled, tc.tol, worst, worstExact)
				return
			}
			t.Logf("%d sequences, worst max abs error %.3g (bound %.3g)", tc.seqs, worst, tc.tol)
		})
		total += tc.seqs
	}
	return total
}
