package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestTurboValueRowAVX2: the AVX2 decoding of 3-bit value rows gives the
// portable loop's floats, on random rows of every head dim.
func TestTurboValueRowAVX2(t *testing.T) {
	if !hasAVX2 {
		t.Skip("no AVX2 on this machine")
	}
	r := rand.New(rand.NewPCG(1, 2))
	levels := []float32{-2.15195, -1.34391, -0.75601, -0.24509, 0.24509, 0.75601, 1.34391, 2.15195}
	for _, d := range []int{64, 128, 256, 512} {
		row := make([]byte, d*3/8+2*(d/32))
		for i := range row {
			row[i] = byte(r.IntN(256))
		}
		for i := d * 3 / 8; i < len(row); i += 2 { // float16 scales near 1
			row[i], row[i+1] = byte(r.IntN(256)), 0x3c
		}
		got, want := make([]float32, d), make([]float32, d)
		turboValueRow(got, 32, row, d, 3, 32, levels)
		hasAVX2 = false
		turboValueRow(want, 32, row, d, 3, 32, levels)
		hasAVX2 = true
		if !slices.Equal(got, want) {
			t.Fatalf("head dim %d: AVX2 %v…, portable %v…", d, got[:8], want[:8])
		}
	}
}
