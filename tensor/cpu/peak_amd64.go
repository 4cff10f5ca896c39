package cpu

// The peak* loops (peak_amd64.s) run n iterations of twelve independent
// 512-bit VDPBF16PS, VFMADD231PS or VPDPBUSD instructions, register
// operands only, and store the sum of four of the accumulators' lanes
// to out (16 values); BenchmarkPeak turns them into the arithmetic
// ceiling of one core that the matmul kernels are measured against.

//go:noescape
func peakDPBF16(n int, out *float32)

//go:noescape
func peakFMA(n int, out *float32)

//go:noescape
func peakDPBUSD(n int, out *int32)

// hasVNNI reports AVX512_VNNI (CPUID leaf 7, ECX bit 11) on top of
// hasAVX512.
var hasVNNI = hasAVX512 && func() bool { _, _, ecx, _ := cpuid(7, 0); return ecx&(1<<11) != 0 }()
