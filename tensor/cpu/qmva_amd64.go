package cpu

// hasAVX2 reports AVX2, FMA and F16C (with the OS saving the YMM state):
// the quantized matmul's AVX2 kernels (qmva_amd64.s), the dense matmul
// micro-kernel and the 16-bit float widening (avx2_amd64.s) may run. Tests switch it off to
// exercise the portable code.
var hasAVX2 = detectAVX2()

func detectAVX2() bool {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx, fma, f16c = 1 << 27, 1 << 28, 1 << 12, 1 << 29
	if ecx1&(osxsave|avx|fma|f16c) != osxsave|avx|fma|f16c {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // SSE and AVX state
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	const avx2 = 1 << 5
	return ebx7&avx2 != 0
}

// sgemm8x32Y is sgemm8x32 (the dense matmul micro-kernel) on AVX2, with
// the same arithmetic per element; see avx2_amd64.s.
//
//go:noescape
func sgemm8x32Y(kc int, a, b, c *float32, ldc int)

// cvtBF16ToF32Y and cvtF16ToF32Y widen len(dst) bfloat16 or float16
// values with AVX2 (F16C), exactly as cvtBF16ToF32 and cvtF16ToF32 do.
//
//go:noescape
func cvtBF16ToF32Y(dst []float32, src []uint16)

//go:noescape
func cvtF16ToF32Y(dst []float32, src []uint16)

// qmvA4 and qmvA8 are the AVX2 quantized matmul kernels (qmva_amd64.s):
// for nrows consecutive weight rows from w (ldw bytes apart; this chunk's
// ngc groups of cpg 32-code blocks; float32 scales at s, lds bytes per
// row; biases at b, ldb bytes per row, zero-padded to nbv vectors of 8)
// they run one K chunk of Σ_k x_k·(s·q_k + b) for each of nx x rows (1..8;
// x row r's chunk at x + r·ldx bytes in prepQMVA's layout, its padded
// group sums at gx + r·ldg bytes). flags bit 0 marks the first chunk (the
// accumulators start from the bias terms, else from acc), bit 1 the last
// (row r's result goes to out + r·ldo bytes, else the accumulators to
// acc, 8·nx floats per weight row). They prefetch pfd bytes ahead.
//
//go:noescape
func qmvA4(w *byte, ldw int, x *float32, ldx, ngc, cpg int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)

//go:noescape
func qmvA8(w *byte, ldw int, x *float32, ldx, ngc, cpg int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)

// qmvZ4, qmvZ8, qmvZ4p and qmvZ8p are the AVX-512 kernels
// (qmvz_amd64.s), qmvA4/qmvA8 on 16 lanes and 64-code blocks for 1..8 x
// rows: nit iterations of cpi blocks each, one scale per iteration (the
// p variants: one block per iteration and the scales of its two groups of
// 32); biases padded to nbv vectors of 16, acc 16·qmvzChains·nx floats per
// weight row; the rest as for qmvA4.
//
//go:noescape
func qmvZ4(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)

//go:noescape
func qmvZ8(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)

//go:noescape
func qmvZ4p(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)

//go:noescape
func qmvZ8p(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)

// qmvZ8B and qmvZ8pB are qmvZ8 and qmvZ8p reading the weight's bfloat16
// scales and biases in place (s, b at the first row's, lds and ldb their
// row strides in bytes; a row's groups whole vectors of 16, nbv of them):
// the same bits as with them widened to float32 first.
//
//go:noescape
func qmvZ8B(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)

//go:noescape
func qmvZ8pB(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int)
