package cpu

// qmv4bf16 is the decode-time 4-bit kernel: for nrows consecutive weight
// rows from w (each nblk full 128-code blocks then a last block of tailw
// words; float32 scales and biases ng per row from s and b) it writes
// Σ_k x_k·(s·q_k + b) to out, with x laid out by prepQMV. It prefetches
// the weights pfd bytes ahead. See qmv_amd64.s.
//
//go:noescape
func qmv4bf16(w *byte, xhi, xlo *uint16, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx, gxo, out *float32, nrows, pfd int)

// qmv4bf16x is qmv4bf16 with exact codes (a table lookup) instead of the
// 128 + q offset, for x that is not bfloat16; gxo must be zeros.
//
//go:noescape
func qmv4bf16x(w *byte, xhi, xlo *uint16, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx, gxo, out *float32, nrows, pfd int)

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
