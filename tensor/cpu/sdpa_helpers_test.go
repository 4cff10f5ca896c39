package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSDPAVectorHelpers: the AVX-512 block max equals the Go loop's
// (NaNs and zeros through the loop), and the panel sums equal each row's
// own in-order sum, bit for bit, at every length.
func TestSDPAVectorHelpers(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512: the loops are the only path")
	}
	r := rand.New(rand.NewPCG(9, 9))
	loopMax := func(sc []float32) float32 {
		hasAVX512 = false
		defer func() { hasAVX512 = true }()
		return sdpaMax(sc)
	}
	for n := 1; n <= 70; n++ {
		for trial := range 6 {
			sc := make([]float32, n)
			for i := range sc {
				sc[i] = float32(r.NormFloat64() * 10)
				if r.IntN(5) == 0 {
					sc[i] = sdpaNegInf
				}
			}
			switch trial {
			case 1:
				sc[r.IntN(n)] = float32(math.NaN())
			case 2:
				for i := range sc {
					sc[i] = -float32(math.Abs(float64(sc[i])))
				}
				sc[r.IntN(n)] = 0
			case 3:
				for i := range sc {
					sc[i] = sdpaNegInf
				}
			}
			got, want := sdpaMax(sc), loopMax(sc)
			if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Fatalf("n=%d trial %d: max %v (%#08x), loop %v (%#08x)", n, trial, got, math.Float32bits(got), want, math.Float32bits(want))
			}
		}
		pan := make([]float32, 8*n)
		for i := range pan {
			pan[i] = float32(r.ExpFloat64())
		}
		var sums [8]float32
		sdpaPanelSums(&pan[0], n, &sums)
		for row := range 8 {
			var want float32
			for j := range n {
				want += pan[j*8+row]
			}
			if math.Float32bits(sums[row]) != math.Float32bits(want) {
				t.Fatalf("nk=%d row %d: panel sum %v, row loop %v", n, row, sums[row], want)
			}
		}
	}
}
