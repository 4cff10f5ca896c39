package tensor

import (
	"math"
	"testing"
)

func TestBF16RoundTripAllPatterns(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := BF16ToF32(uint16(h))
		back := F32ToBF16(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(BF16ToF32(back))) {
				t.Fatalf("bf16 NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("bf16 %#04x -> %v -> %#04x", h, f, back)
		}
	}
}

func TestF16RoundTripAllPatterns(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToF32(uint16(h))
		back := F32ToF16(f)
		if math.IsNaN(float64(f)) {
			if !math.IsNaN(float64(F16ToF32(back))) {
				t.Fatalf("f16 NaN %#04x came back as %#04x", h, back)
			}
			continue
		}
		if back != uint16(h) {
			t.Fatalf("f16 %#04x -> %v -> %#04x", h, f, back)
		}
	}
}

// Rounding must be to nearest, ties to even, measured against float64 arithmetic.
func TestNarrowingRoundsToNearestEven(t *testing.T) {
	cases := []struct {
		in      float32
		bf, f16 float32
	}{
		{1 + 1.0/256, 1, 1 + 1.0/1024*4},        // bf16 tie → even (1); f16 exact
		{1 + 3.0/256, 1 + 4.0/256, 1 + 3.0/256}, // bf16 tie → even (1+4/256)
		{65520, 65536, float32(math.Inf(1))},    // f16 overflows to +Inf at the halfway point
		{-0.0, 0, 0},
		{5.960464477539063e-08, 5.960464477539063e-08, 5.960464477539063e-08}, // smallest f16 subnormal
		{2.9802322387695312e-08, 2.9802322387695312e-08, 0},                   // half of it ties to even (0)
	}
	for _, c := range cases {
		if got := BF16ToF32(F32ToBF16(c.in)); got != c.bf {
			t.Errorf("bf16(%v) = %v, want %v", c.in, got, c.bf)
		}
		if got := F16ToF32(F32ToF16(c.in)); got != c.f16 {
			t.Errorf("f16(%v) = %v, want %v", c.in, got, c.f16)
		}
	}
}

func TestPromoteTypes(t *testing.T) {
	cases := []struct{ a, b, want DType }{
		{Float32, BFloat16, Float32},
		{BFloat16, Float16, Float32},
		{Int32, BFloat16, BFloat16},
		{Int32, Uint32, Int64},
		{Bool, Uint8, Uint8},
		{Int64, Int32, Int64},
		{Bool, Bool, Bool},
	}
	for _, c := range cases {
		if got := PromoteTypes(c.a, c.b); got != c.want {
			t.Errorf("PromoteTypes(%s, %s) = %s, want %s", c.a, c.b, got, c.want)
		}
		if got := PromoteTypes(c.b, c.a); got != c.want {
			t.Errorf("PromoteTypes(%s, %s) = %s, want %s", c.b, c.a, got, c.want)
		}
	}
}

func TestParseDType(t *testing.T) {
	for d := Bool; d <= Float32; d++ {
		got, err := ParseDType(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDType(%q) = %v, %v", d.String(), got, err)
		}
	}
	if _, err := ParseDType("F64"); err == nil {
		t.Error("ParseDType(F64) succeeded")
	}
}
