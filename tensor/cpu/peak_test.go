//go:build amd64

package cpu

import (
	"testing"
)

// TestPeakLoops checks that the peak loops run the instructions they are
// named for: with all inputs 1, n iterations leave 2n in every lane of a
// VDPBF16PS chain (two products per lane), n in an FMA chain and 4n in a
// VPDPBUSD chain (four byte products), four chains summed.
func TestPeakLoops(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	const n = 1000
	var f [16]float32
	var d [16]int32
	if hasBF16 {
		peakDPBF16(n, &f[0])
		for i, v := range f {
			if v != 8*n {
				t.Fatalf("VDPBF16PS lane %d = %v, want %v", i, v, 8*n)
			}
		}
	}
	peakFMA(n, &f[0])
	for i, v := range f {
		if v != 4*n {
			t.Fatalf("FMA lane %d = %v, want %v", i, v, 4*n)
		}
	}
	if hasVNNI {
		peakDPBUSD(n, &d[0])
		for i, v := range d {
			if v != 16*n {
				t.Fatalf("VPDPBUSD lane %d = %v, want %v", i, v, 16*n)
			}
		}
	}
}

// BenchmarkPeak is one core's arithmetic ceiling for the matmul kernels:
// GFLOP/s of register-only VDPBF16PS (32 bfloat16 multiply-adds per
// instruction, the quantized matvec's dot), VFMADD231PS (16 float32) and
// VPDPBUSD (GOP/s of 64 byte multiply-adds, the int8 route), twelve
// independent chains each; compare BenchmarkQMVKern's GFLOP/s.
func BenchmarkPeak(b *testing.B) {
	const iters = 1 << 16
	var f [16]float32
	var d [16]int32
	for _, c := range []struct {
		name  string
		flops float64 // per instruction
		ok    bool
		run   func()
	}{
		{"dpbf16", 64, hasBF16, func() { peakDPBF16(iters, &f[0]) }},
		{"fma", 32, hasAVX512, func() { peakFMA(iters, &f[0]) }},
		{"dpbusd", 128, hasVNNI, func() { peakDPBUSD(iters, &d[0]) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			if !c.ok {
				b.Skip("instruction not available")
			}
			for b.Loop() {
				c.run()
			}
			ins := float64(b.N) * iters * 12
			b.ReportMetric(ins/b.Elapsed().Seconds()/1e9, "Ginstr/s")
			b.ReportMetric(ins*c.flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
