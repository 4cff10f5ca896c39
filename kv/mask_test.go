package kv

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

func maskBits(m Mask) []bool {
	if m.Array == nil {
		return nil
	}
	return m.Array.Bools()
}

func boolsOf(s string) []bool {
	out := make([]bool, 0, len(s))
	for _, c := range s {
		switch c {
		case '1':
			out = append(out, true)
		case '0':
			out = append(out, false)
		}
	}
	return out
}

// TestLinearMasks: mlx-lm's create_attention_mask rules at offset 2.
func TestLinearMasks(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(2, 1))
	c := NewKVCache()
	defer c.Free()
	k, v := tokens(r, 2)
	c.UpdateAndFetch(k, v)
	tensor.Free(k, v)
	cases := []struct {
		name        string
		n, window   int
		returnArray bool
		kind        tensor.MaskKind
		shape       []int
		bits        string
	}{
		{"one token needs no mask", 1, 0, false, tensor.MaskNone, nil, ""},
		{"chunk uses the causal kind", 3, 0, false, tensor.MaskCausal, nil, ""},
		{"array on request", 2, 0, true, tensor.MaskArray, []int{2, 4}, "1110 1111"},
		{"a window always needs an array", 1, 2, false, tensor.MaskArray, []int{1, 3}, "011"},
		{"windowed chunk", 2, 2, false, tensor.MaskArray, []int{2, 4}, "0110 0011"},
	}
	for _, tc := range cases {
		m := c.MakeMask(tc.n, tc.window, tc.returnArray)
		if m.Kind != tc.kind {
			t.Errorf("%s: kind %v, want %v", tc.name, m.Kind, tc.kind)
		}
		if tc.shape != nil {
			if m.Array == nil || !slices.Equal(m.Array.Shape(), tc.shape) {
				t.Errorf("%s: mask %v, want shape %v", tc.name, m.Array, tc.shape)
			} else if got := maskBits(m); !slices.Equal(got, boolsOf(tc.bits)) {
				t.Errorf("%s: mask %v, want %s", tc.name, got, tc.bits)
			}
		} else if m.Array != nil {
			t.Errorf("%s: unexpected array %v", tc.name, m.Array)
		}
		m.Free()
	}
}

// TestRotatingMasks: mlx-lm's RotatingKVCache.make_mask rules.
func TestRotatingMasks(t *testing.T) {
	defer tensortest.NoLeaks(t)()
	r := rand.New(rand.NewPCG(2, 2))
	c := NewRotatingKVCache(4, 0)
	defer c.Free()
	one := func() {
		k, v := tokens(r, 1)
		c.UpdateAndFetch(k, v)
		tensor.Free(k, v)
	}
	check := func(name string, m Mask, kind tensor.MaskKind, shape []int, bits string) {
		t.Helper()
		defer m.Free()
		if m.Kind != kind {
			t.Fatalf("%s: kind %v, want %v", name, m.Kind, kind)
		}
		if shape == nil {
			if m.Array != nil {
				t.Fatalf("%s: unexpected array", name)
			}
			return
		}
		if !slices.Equal(m.Array.Shape(), shape) || !slices.Equal(maskBits(m), boolsOf(bits)) {
			t.Fatalf("%s: mask %v %v, want %v %s", name, m.Array.Shape(), maskBits(m), shape, bits)
		}
	}
	// empty cache: a chunk within the window is plainly causal
	check("chunk within window", c.MakeMask(3, 0, false), tensor.MaskCausal, nil, "")
	// a chunk longer than the window gets a windowed array
	check("chunk beyond window", c.MakeMask(5, 0, false), tensor.MaskArray, []int{5, 5},
		"10000 11000 11100 11110 01111")
	for range 5 {
		one()
	}
	// offset 5: the mask offset is clamped to maxSize-1 = 3
	check("chunk after wrap", c.MakeMask(2, 0, false), tensor.MaskArray, []int{2, 5}, "11110 01111")
	check("single token, no window", c.MakeMask(1, 0, false), tensor.MaskNone, nil, "")
	check("single token, window = max size", c.MakeMask(1, 4, false), tensor.MaskNone, nil, "")
	// window 2 < maxSize: the newest two keys after the write, which
	// UpdateAndFetch hands over in temporal order (the last two), whatever
	// slots of the ring they sit in
	check("single token, narrower window", c.MakeMask(1, 2, false), tensor.MaskArray, []int{4}, "0011")
	one() // token 5 at slot 1; next goes to slot 2
	check("not rolled with the write position", c.MakeMask(1, 2, false), tensor.MaskArray, []int{4}, "0011")
	// before the cache fills, the mask covers offset+1 slots
	d := NewRotatingKVCache(8, 0)
	defer d.Free()
	for range 3 {
		k, v := tokens(r, 1)
		d.UpdateAndFetch(k, v)
		tensor.Free(k, v)
	}
	check("narrow window before the cache fills", d.MakeMask(1, 2, false), tensor.MaskArray, []int{4}, "0011")
	check("offset below window", d.MakeMask(1, 4, false), tensor.MaskNone, nil, "")
}
