package cpu

// qmvDeinterleave reorders nb blocks of 128 bfloat16 x values into the
// kernel's layout (see prepQMV); idx is qmvDeintIdx.
//
//go:noescape
func qmvDeinterleave(dst, src *uint16, nb int, idx *uint16)

// qmvGroupSums writes the sum of each of ng groups of 16·vpg floats.
//
//go:noescape
func qmvGroupSums(dst, x *float32, ng, vpg int)

// hasBF16 reports AVX512_BF16 (VDPBF16PS) on top of hasAVX512; the
// quantized matvec's fast path needs it.
var hasBF16 = hasAVX512 && detectBF16()

// detectBF16 reads CPUID leaf 7 sub-leaf 1 (EAX bit 5); detectAVX512 has
// already checked that leaf 7 exists and the OS saves the ZMM state.
func detectBF16() bool {
	eax, _, _, _ := cpuid(7, 1)
	return eax&(1<<5) != 0
}

// qmvRowsX and qmvRowsXL are the matvec kernels (qmvr_amd64.s): for
// nrows consecutive weight rows from w (each nblk full 128-code blocks then
// a last block of tailw words; float32 scales and biases ng per row from s
// and b) they write Σ_k x_k·(s·q_k + b) for each of nx x rows (1, 2, 4 or
// 8): x row r's layout at x + r·ldx bytes (prepQMV; for XL its residual
// layout lo bytes further), its group sums at gx + r·ldg bytes, its
// outputs at out + r·ldo bytes. They prefetch the weights pfd bytes ahead.
// A row may run in chunks (see qmvr_amd64.s and qmvChunk): flags holds
// qmvAccLoad and qmvAccFinish, acc the chunks' accumulators, wskip the
// bytes from the end of a row's chunk to the next row's.
//
//go:noescape
func qmvRowsX(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int)

//go:noescape
func qmvRowsXL(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int)

// qmvRows2X and qmvRows2XL are qmvRowsX and qmvRowsXL for an even number
// of weight rows taken in pairs (the second ldw bytes after the first),
// 1, 2 or 4 x rows per pass, each row's result the same bits.
//
//go:noescape
func qmvRows2X(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip, ldw int)

//go:noescape
func qmvRows2XL(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip, ldw int)

// qmvRowsXB, qmvRowsXLB, qmvRows2XB and qmvRows2XLB are the kernels above
// reading the weight's bfloat16 scales and biases in place (s and b point
// at them, ng per row, sblk in bfloat16 bytes; sidx is qmvLaneWord's table
// for the group size): no float32 copy per block of rows, the same bits.
// A block's scales are read as 64 bytes from its first one, so the caller
// makes sure that many are readable.
//
//go:noescape
func qmvRowsXB(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int)

//go:noescape
func qmvRowsXLB(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int)

//go:noescape
func qmvRows2XB(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip, ldw int)

//go:noescape
func qmvRows2XLB(w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip, ldw int)
