package cpu

import (
	"encoding/json"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// randomGolden mirrors tensor/testdata/random_golden.json, written by
// tools/oracle/random_golden from MLX v0.31.2 itself.
type randomGolden struct {
	LogitsShape []int    `json:"logits_shape"`
	Logits      []uint32 `json:"logits"` // float32 bit patterns
	Cases       []struct {
		Seed        uint64   `json:"seed"`
		Key         []uint32 `json:"key"`
		Bits2       []uint32 `json:"bits_2"`
		Bits3       []uint32 `json:"bits_3"`
		Bits5x7     []uint32 `json:"bits_5x7"`
		Bits2x2     []uint32 `json:"bits_2x2"`
		Bits1       []uint32 `json:"bits_1"`
		Split3      []uint32 `json:"split_3"`
		SplitA      []uint32 `json:"split_a"`
		SplitB      []uint32 `json:"split_b"`
		UniformBits []uint32 `json:"uniform_f32_bits"`
		Categorical []uint32 `json:"categorical"`
	} `json:"cases"`
}

func loadRandomGolden(t *testing.T) *randomGolden {
	t.Helper()
	raw, err := os.ReadFile("../testdata/random_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g randomGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) == 0 {
		t.Fatal("no cases in golden file")
	}
	return &g
}

func u32sOf(a *tensor.Array) []uint32 {
	v := a.Int64s()
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = uint32(x)
	}
	return out
}

// mustRun runs f and fails the test on a tensor error. Every op these
// tests need is implemented on the CPU backend, so a missing one
// (ErrBackend) is a failure too, not a reason to skip.
func mustRun(t *testing.T, f func()) {
	t.Helper()
	if err := tensor.Try(f); err != nil {
		t.Fatal(err)
	}
}

func TestRandomGoldenBits(t *testing.T) {
	g := loadRandomGolden(t)
	before := tensor.LiveArrays()
	for _, c := range g.Cases {
		key := tensor.Key(c.Seed)
		if got := u32sOf(key); !slices.Equal(got, c.Key) {
			t.Fatalf("seed %d: key %v, want %v", c.Seed, got, c.Key)
		}
		for _, tc := range []struct {
			shape []int
			want  []uint32
		}{{[]int{2}, c.Bits2}, {[]int{3}, c.Bits3}, {[]int{5, 7}, c.Bits5x7}, {[]int{2, 2}, c.Bits2x2}, {[]int{1}, c.Bits1}} {
			b := tensor.RandomBits(key, tc.shape...)
			if got := u32sOf(b); !slices.Equal(got, tc.want) {
				t.Errorf("seed %d bits %v: got %v, want %v", c.Seed, tc.shape, got, tc.want)
			}
			b.Free()
		}
		ks := tensor.SplitKey(key, 3)
		if got := u32sOf(ks); !slices.Equal(got, c.Split3) || !slices.Equal(ks.Shape(), []int{3, 2}) {
			t.Errorf("seed %d split 3: got %v %v, want %v", c.Seed, ks.Shape(), got, c.Split3)
		}
		ka, kb := tensor.SplitKey2(key)
		if got := u32sOf(ka); !slices.Equal(got, c.SplitA) {
			t.Errorf("seed %d split a: got %v, want %v", c.Seed, got, c.SplitA)
		}
		// a key that is a view at an offset must be read through its layout
		bb := tensor.RandomBits(kb, 3)
		kref := tensor.FromUint32(c.SplitB, []int{2})
		ref := tensor.RandomBits(kref, 3)
		if got, want := u32sOf(bb), u32sOf(ref); !slices.Equal(got, want) || !slices.Equal(u32sOf(kb), c.SplitB) {
			t.Errorf("seed %d split b: key %v bits %v, want key %v bits %v", c.Seed, u32sOf(kb), got, c.SplitB, want)
		}
		tensor.Free(ks, ka, kb, bb, kref, ref, key)
	}
	if d := tensor.LiveArrays() - before; d != 0 {
		t.Errorf("leaked %d arrays", d)
	}
}

func TestRandomGoldenUniform(t *testing.T) {
	g := loadRandomGolden(t)
	for _, c := range g.Cases {
		key := tensor.Key(c.Seed)
		// MLX's formula on our bits, independent of the elementwise ops:
		// min(float32(bits)/float32(2³²-1), nextafter(1, 0))
		b := tensor.RandomBits(key, 10)
		for i, w := range u32sOf(b) {
			u := min(float32(w)/float32(math.MaxUint32), math.Nextafter32(1, 0))
			if math.Float32bits(u) != c.UniformBits[i] {
				t.Errorf("seed %d: uniform from bits[%d] = %v, want %v", c.Seed, i, u, math.Float32frombits(c.UniformBits[i]))
			}
		}
		b.Free()
		mustRun(t, func() {
			u := tensor.Uniform(key, []int{10}, 0, 1, tensor.Float32)
			defer u.Free()
			for i, v := range u.Float32s() {
				if math.Float32bits(v) != c.UniformBits[i] {
					t.Errorf("seed %d uniform[%d] = %v, want %v", c.Seed, i, v, math.Float32frombits(c.UniformBits[i]))
				}
			}
		})
		key.Free()
	}
}

func TestRandomGoldenCategorical(t *testing.T) {
	g := loadRandomGolden(t)
	lf := make([]float32, len(g.Logits))
	for i, b := range g.Logits {
		lf[i] = math.Float32frombits(b)
	}
	logits := tensor.FromFloat32(lf, g.LogitsShape, tensor.Float32)
	defer logits.Free()
	for _, c := range g.Cases {
		key := tensor.Key(c.Seed)
		mustRun(t, func() {
			s := tensor.Categorical(key, logits, -1)
			defer s.Free()
			if got := u32sOf(s); !slices.Equal(got, c.Categorical) {
				t.Errorf("seed %d categorical %v, want %v", c.Seed, got, c.Categorical)
			}
		})
		key.Free()
	}
}
