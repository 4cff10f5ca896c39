package cpu

// Assembly kernels (simd_amd64.s). They need AVX-512 F/BW/VL (for 512-bit
// integer widening and conversions), detected once at start-up; every
// caller has a pure-Go path for machines without it.

//go:noescape
func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

//go:noescape
func xgetbv() (eax, edx uint32)

// cvtBF16ToF32 widens len(dst) bfloat16 values.
//
//go:noescape
func cvtBF16ToF32(dst []float32, src []uint16)

// cvtF16ToF32 widens len(dst) half-precision values.
//
//go:noescape
func cvtF16ToF32(dst []float32, src []uint16)

// qdot4 is one 4-bit row against one permuted x row; see the assembly.
//
//go:noescape
func qdot4(w *byte, x *float32, s, b, iota *float32, ng, cpg int) float32

// qgemm4x8 is one 4-bit row against an 8-row interleaved x block.
//
//go:noescape
func qgemm4x8(w *byte, x *float32, s, b *float32, ng, cpg int, out *float32, ldo int)

// hasAVX512 reports that the assembly kernels may run (tests switch it off
// to exercise the portable code).
var hasAVX512 = detectAVX512()

func detectAVX512() bool {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx, fma, f16c = 1 << 27, 1 << 28, 1 << 12, 1 << 29
	if ecx1&(osxsave|avx|fma|f16c) != osxsave|avx|fma|f16c {
		return false
	}
	// the OS must save SSE, AVX and the three AVX-512 state components
	if xcr0, _ := xgetbv(); xcr0&0xe6 != 0xe6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const avx512f, avx512dq, avx512bw, avx512vl = 1 << 16, 1 << 17, 1 << 30, 1 << 31
	want := uint32(avx512f | avx512dq | avx512bw | avx512vl)
	return ebx7&want == want
}

// sgemm8x32 is the matmul micro-kernel: C[8×32] += packed A panel · packed B panel.
//
//go:noescape
func sgemm8x32(kc int, a, b, c *float32, ldc int)

// sgemm8x32B is sgemm8x32 with B's rows ldb floats apart, bit for bit.
//
//go:noescape
func sgemm8x32B(kc int, a, b *float32, ldb int, c *float32, ldc int)

// sgemm4x32B is sgemm8x32B for the first 4 rows of the A panel, bit for
// bit; C rows 4..7 are left as they are.
//
//go:noescape
func sgemm4x32B(kc int, a, b *float32, ldb int, c *float32, ldc int)

// sgemm8x32BH is sgemm8x32B with B in bfloat16 (rows ldb elements
// apart), widened as loaded: the same bits as sgemm8x32B on the widened B.
//
//go:noescape
func sgemm8x32BH(kc int, a *float32, b *uint16, ldb int, c *float32, ldc int)

// sgemm4x32BH is sgemm4x32B with B in bfloat16, as sgemm8x32BH.
//
//go:noescape
func sgemm4x32BH(kc int, a *float32, b *uint16, ldb int, c *float32, ldc int)

// qdot4x4 is qdot4 for 4 consecutive rows sharing the x loads.
//
//go:noescape
func qdot4x4(w *byte, bpr int, x *float32, s, b *float32, iota *float32, ng, cpg int, out *float32)

// cvtF32ToBF16 rounds n floats (a multiple of 16) as tensor.F32ToBF16
// does; see simd_amd64.s.
//
//go:noescape
func cvtF32ToBF16(dst *uint16, src *float32, n int)

// cvtF32ToF16 rounds n floats (a multiple of 16) as tensor.F32ToF16 does;
// see simd_amd64.s.
//
//go:noescape
func cvtF32ToF16(dst *uint16, src *float32, n int)

// prefetchL2 asks for the n (> 0) bytes at p to be brought into L2 ahead
// of their use (a hint: it never faults and changes no data).
//
//go:noescape
func prefetchL2(p *byte, n int)
