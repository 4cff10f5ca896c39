#include "textflag.h"

// Decode-time 4-bit quantized matvec with AVX512_BF16 (see qmv.go for the
// data layouts, the 8-bit mapping and the precision argument).
//
// A block is 64 packed bytes = 32 words = 128 codes; word w holds codes
// 4w..4w+3 in its four nibbles. Bringing each nibble to the bottom of its
// word (CODES4) and masking it into the bfloat16 pattern 0x4300 (128.0,
// whose ulp is 1) gives four vectors of 32 bfloat16 values 128 + q, exact;
// VDPBF16PS multiplies them by the matching deinterleaved x vectors (an
// 8-bit by 8-bit mantissa product is exact in float32) and sums pairs into
// 16 float32 lanes. Lane l then covers codes 8l..8l+7 of the block, so one
// VPERMPS spreads the block's 1, 2 or 4 group scales over the lanes and
// one FMA scales the block into the row's accumulator. Per row, a short dot
// over groups then adds Σ_g b_g·Σx_g and removes the offset, Σ_g
// s_g·(−128·Σx_g).
//
// Rows are walked one after the other: the weights are read as a single
// sequential stream (prefetched pfd bytes ahead), which the memory system
// serves at full speed; x stays in L1.

// The Go assembler has no AVX512_BF16 mnemonics, so DPBF emits
// VDPBF16PS zmm(r), zmm(v), zmm(rm) (r += pairwise bf16 products of v and
// rm) from register numbers: EVEX.512.F3.0F38.W0 52 /r.
#define DPBF(rm, v, r) \
	BYTE $0x62 \
	BYTE $(0x02 | (1-((r>>3)&1))<<7 | (1-((rm>>4)&1))<<6 | (1-((rm>>3)&1))<<5 | (1-((r>>4)&1))<<4) \
	BYTE $(((15-(v&15))<<3) | 0x06) \
	BYTE $(0x40 | (1-((v>>4)&1))<<3) \
	BYTE $0x52 \
	BYTE $(0xC0 | (r&7)<<3 | (rm&7))

// DOTHI sums codes·x (codes in registers t0..t3, x in Z26..Z29) of one
// block into register d (Dz names it for the zeroing).
#define DOTHI(t0, t1, t2, t3, d, Dz) \
	VPXORD Dz, Dz, Dz \
	DPBF(26, t0, d) \
	DPBF(27, t1, d) \
	DPBF(28, t2, d) \
	DPBF(29, t3, d)

// DOTLO adds codes·xlo (xlo in Z22..Z25) into register d.
#define DOTLO(t0, t1, t2, t3, d) \
	DPBF(22, t0, d) \
	DPBF(23, t1, d) \
	DPBF(24, t2, d) \
	DPBF(25, t3, d)

// OUTROW reduces acc into X12 and stores it at off(DI).
#define OUTROW(Z, Y, off) \
	VEXTRACTF64X4 $1, Z, Y12 \
	VADDPS        Y12, Y, Y12 \
	VEXTRACTF128  $1, Y12, X13 \
	VADDPS        X13, X12, X12 \
	VHADDPS       X12, X12, X12 \
	VHADDPS       X12, X12, X12 \
	VMOVSS        X12, off(DI)

// CODES4 turns the block's words W (Z0) and the same bytes one further
// on, W' (Z2: word w = bytes 2w+1, 2w+2, so nibble 2 of W in its low
// nibble), into the bfloat16 values 128 + q of nibble j = 0..3 of every
// word, in Z0..Z3: (W, W >> 4, W', W' >> 4) & 0xF | 0x4300, with 0x000F
// in Z21 and 0x4300 in Z31. The byte-offset load saves two shifts.
#define CODES4 \
	VPSRLW     $4, Z0, Z1 \
	VPSRLW     $4, Z2, Z3 \
	VPTERNLOGD $0xEA, Z31, Z21, Z0 \
	VPTERNLOGD $0xEA, Z31, Z21, Z1 \
	VPTERNLOGD $0xEA, Z31, Z21, Z2 \
	VPTERNLOGD $0xEA, Z31, Z21, Z3

// BLOCKHI accumulates one full block at SI (x at DX, scales at R8) into
// acc; BLOCKLO also the xlo half (at R10). W' is loaded under K4 (63
// bytes), never past the block.
#define BLOCKHI(acc) \
	VMOVDQU64 (SI), Z0 \
	VMOVDQU8.Z 1(SI), K4, Z2 \
	VMOVDQU64 (DX), Z26 \
	VMOVDQU64 64(DX), Z27 \
	VMOVDQU64 128(DX), Z28 \
	VMOVDQU64 192(DX), Z29 \
	CODES4 \
	DOT2 \
	VPERMPS     (R8), Z30, Z6 \
	VFMADD231PS Z6, Z5, acc

#define BLOCKLO(acc) \
	VMOVDQU64 (SI), Z0 \
	VMOVDQU8.Z 1(SI), K4, Z2 \
	VMOVDQU64 (DX), Z26 \
	VMOVDQU64 64(DX), Z27 \
	VMOVDQU64 128(DX), Z28 \
	VMOVDQU64 192(DX), Z29 \
	VMOVDQU64 (R10), Z22 \
	VMOVDQU64 64(R10), Z23 \
	VMOVDQU64 128(R10), Z24 \
	VMOVDQU64 192(R10), Z25 \
	CODES4 \
	DOTHI(0, 1, 2, 3, 5, Z5) \
	DOTLO(0, 1, 2, 3, 5) \
	VPERMPS     (R8), Z30, Z6 \
	VFMADD231PS Z6, Z5, acc

// DOT2 is DOTHI for Z0..Z3 into Z5 as two chains of two (Z5, Z7).
#define DOT2 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z7, Z7, Z7 \
	DPBF(26, 0, 5) \
	DPBF(28, 2, 7) \
	DPBF(27, 1, 5) \
	DPBF(29, 3, 7) \
	VADDPS Z7, Z5, Z5

// BLOCKHIX and BLOCKLOX are BLOCKHI and BLOCKLO on exact codes (CODES4X).
#define BLOCKHIX(acc) \
	VMOVDQU64 (SI), Z0 \
	VMOVDQU8.Z 1(SI), K4, Z2 \
	VMOVDQU64 (DX), Z26 \
	VMOVDQU64 64(DX), Z27 \
	VMOVDQU64 128(DX), Z28 \
	VMOVDQU64 192(DX), Z29 \
	CODES4X \
	DOT2 \
	VPERMPS     (R8), Z30, Z6 \
	VFMADD231PS Z6, Z5, acc

#define BLOCKLOX(acc) \
	VMOVDQU64 (SI), Z0 \
	VMOVDQU8.Z 1(SI), K4, Z2 \
	VMOVDQU64 (DX), Z26 \
	VMOVDQU64 64(DX), Z27 \
	VMOVDQU64 128(DX), Z28 \
	VMOVDQU64 192(DX), Z29 \
	VMOVDQU64 (R10), Z22 \
	VMOVDQU64 64(R10), Z23 \
	VMOVDQU64 128(R10), Z24 \
	VMOVDQU64 192(R10), Z25 \
	CODES4X \
	DOTHI(0, 1, 2, 3, 5, Z5) \
	DOTLO(0, 1, 2, 3, 5) \
	VPERMPS     (R8), Z30, Z6 \
	VFMADD231PS Z6, Z5, acc

// CODES4X is CODES4 with exact codes: VPERMW looks the low nibble up in
// the bfloat16 table of 0..15 in Z31 (it reads only the low 5 index bits,
// and the table repeats after 16), giving q itself.
#define CODES4X \
	VPSRLW $4, Z0, Z1 \
	VPSRLW $4, Z2, Z3 \
	VPERMW Z31, Z0, Z0 \
	VPERMW Z31, Z1, Z1 \
	VPERMW Z31, Z2, Z2 \
	VPERMW Z31, Z3, Z3

// STEP advances to the next block.
#define STEP \
	ADDQ $64, SI \
	ADDQ $256, DX \
	ADDQ $256, R10 \
	ADDQ R9, R8

// func qmv4bf16(w *byte, xhi, xlo *uint16, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx, gxo, out *float32, nrows, pfd int)
TEXT ·qmv4bf16(SB), NOSPLIT, $0-120
	MOVQ w+0(FP), SI
	MOVQ s+40(FP), R11
	MOVQ b+72(FP), R12
	MOVQ out+96(FP), DI
	MOVQ nrows+104(FP), R13
	MOVQ pfd+112(FP), R14
	MOVQ ng+48(FP), R15
	SHLQ $2, R15 // bytes of scales (and biases) per row
	MOVQ sblk+56(FP), R9
	MOVQ sidx+64(FP), AX
	VMOVDQU64 (AX), Z30
	MOVL $0x43004300, AX
	VPBROADCASTD AX, Z31
	MOVL $0x000F000F, AX
	VPBROADCASTD AX, Z21
	// tail masks: K1 the tail's words, K2 its float32 lanes
	MOVQ tailw+32(FP), CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVD AX, K1
	SHRQ $1, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K2
	MOVQ $0x7FFFFFFFFFFFFFFF, AX
	KMOVQ AX, K4
	// W' of the tail: its 2·tailw − 1 bytes (K5)
	MOVQ tailw+32(FP), CX
	LEAQ -1(CX)(CX*1), CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVQ AX, K5
	// group-dot tail mask K3 (ng mod 16 groups)
	MOVQ ng+48(FP), CX
	ANDQ $15, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K3

row:
	MOVQ xhi+8(FP), DX
	MOVQ xlo+16(FP), R10
	MOVQ R11, R8
	MOVQ nblk+24(FP), CX
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	TESTQ R10, R10
	JNZ   lo_pairs
hi_pairs:
	CMPQ CX, $2
	JLT  hi_one
	PREFETCHT1 (SI)(R14*1)
	PREFETCHT1 64(SI)(R14*1)
	BLOCKHI(Z16)
	STEP
	BLOCKHI(Z17)
	STEP
	SUBQ $2, CX
	JMP  hi_pairs
hi_one:
	TESTQ CX, CX
	JZ    tail
	PREFETCHT1 (SI)(R14*1)
	BLOCKHI(Z16)
	STEP
	JMP  tail

lo_pairs:
	CMPQ CX, $2
	JLT  lo_one
	PREFETCHT1 (SI)(R14*1)
	PREFETCHT1 64(SI)(R14*1)
	BLOCKLO(Z16)
	STEP
	BLOCKLO(Z17)
	STEP
	SUBQ $2, CX
	JMP  lo_pairs
lo_one:
	TESTQ CX, CX
	JZ    tail
	PREFETCHT1 (SI)(R14*1)
	BLOCKLO(Z16)
	STEP

tail:
	// a last block of tailw (< 32) words: zero-masked weight load (x is
	// zero-padded), lane-masked accumulation; SI then reaches the next row
	MOVQ tailw+32(FP), CX
	TESTQ CX, CX
	JZ    groups
	VMOVDQU16.Z (SI), K1, Z0
	VMOVDQU8.Z 1(SI), K5, Z2
	VMOVDQU64 (DX), Z26
	VMOVDQU64 64(DX), Z27
	VMOVDQU64 128(DX), Z28
	VMOVDQU64 192(DX), Z29
	CODES4
	DOTHI(0, 1, 2, 3, 5, Z5)
	MOVQ  xlo+16(FP), AX // (STEP moved R10 even when xlo is nil)
	TESTQ AX, AX
	JZ    tail_scale
	VMOVDQU64 (R10), Z22
	VMOVDQU64 64(R10), Z23
	VMOVDQU64 128(R10), Z24
	VMOVDQU64 192(R10), Z25
	DOTLO(0, 1, 2, 3, 5)
tail_scale:
	VPERMPS     (R8), Z30, Z6
	VFMADD231PS Z6, Z5, K2, Z17
	LEAQ (SI)(CX*2), SI

groups:
	// acc += Σ_g b[g]·gx[g] + s[g]·gxo[g], 16 groups at a time, the last
	// ones masked
	MOVQ gx+80(FP), DX
	MOVQ gxo+88(FP), R10
	MOVQ R11, R8
	MOVQ R12, BX
	MOVQ ng+48(FP), CX
g_loop:
	CMPQ CX, $16
	JLT  g_tail
	VMOVUPS     (DX), Z0
	VMOVUPS     (R10), Z1
	VFMADD231PS (BX), Z0, Z16
	VFMADD231PS (R8), Z1, Z17
	ADDQ $64, DX
	ADDQ $64, R10
	ADDQ $64, BX
	ADDQ $64, R8
	SUBQ $16, CX
	JMP  g_loop
g_tail:
	TESTQ CX, CX
	JZ    g_done
	VMOVUPS.Z   (DX), K3, Z0
	VMOVUPS.Z   (R10), K3, Z1
	VFMADD231PS (BX), Z0, K3, Z16
	VFMADD231PS (R8), Z1, K3, Z17
g_done:
	VADDPS Z17, Z16, Z16
	OUTROW(Z16, Y16, 0)
	ADDQ $4, DI
	ADDQ R15, R11
	ADDQ R15, R12
	DECQ R13
	JNZ  row
	VZEROUPPER
	RET

// qmvNibbles is the bfloat16 of 0..15, twice (qmv4bf16x's VPERMW table).
DATA qmvNibbles<>+0(SB)/8, $0x404040003f800000
DATA qmvNibbles<>+8(SB)/8, $0x40e040c040a04080
DATA qmvNibbles<>+16(SB)/8, $0x4130412041104100
DATA qmvNibbles<>+24(SB)/8, $0x4170416041504140
DATA qmvNibbles<>+32(SB)/8, $0x404040003f800000
DATA qmvNibbles<>+40(SB)/8, $0x40e040c040a04080
DATA qmvNibbles<>+48(SB)/8, $0x4130412041104100
DATA qmvNibbles<>+56(SB)/8, $0x4170416041504140
GLOBL qmvNibbles<>(SB), RODATA|NOPTR, $64

// qmv4bf16x is qmv4bf16 with exact codes q (CODES4X) instead of 128 + q:
// for float32 and float16 x, whose results keep float32 precision, it
// avoids the offset's larger accumulation error. gxo must be zeros.
// func qmv4bf16x(w *byte, xhi, xlo *uint16, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx, gxo, out *float32, nrows, pfd int)
TEXT ·qmv4bf16x(SB), NOSPLIT, $0-120
	MOVQ w+0(FP), SI
	MOVQ s+40(FP), R11
	MOVQ b+72(FP), R12
	MOVQ out+96(FP), DI
	MOVQ nrows+104(FP), R13
	MOVQ pfd+112(FP), R14
	MOVQ ng+48(FP), R15
	SHLQ $2, R15 // bytes of scales (and biases) per row_x
	MOVQ sblk+56(FP), R9
	MOVQ sidx+64(FP), AX
	VMOVDQU64 (AX), Z30
	VMOVDQU64 qmvNibbles<>(SB), Z31
	// tail_x masks: K1 the tail_x's words, K2 its float32 lanes
	MOVQ tailw+32(FP), CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVD AX, K1
	SHRQ $1, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K2
	MOVQ $0x7FFFFFFFFFFFFFFF, AX
	KMOVQ AX, K4
	// W' of the tail_x: its 2·tailw − 1 bytes (K5)
	MOVQ tailw+32(FP), CX
	LEAQ -1(CX)(CX*1), CX
	MOVQ $1, AX
	SHLQ CX, AX
	DECQ AX
	KMOVQ AX, K5
	// group-dot tail_x mask K3 (ng mod 16 groups_x)
	MOVQ ng+48(FP), CX
	ANDQ $15, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K3

row_x:
	MOVQ xhi+8(FP), DX
	MOVQ xlo+16(FP), R10
	MOVQ R11, R8
	MOVQ nblk+24(FP), CX
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	TESTQ R10, R10
	JNZ   lo_pairs_x
hi_pairs_x:
	CMPQ CX, $2
	JLT  hi_one_x
	PREFETCHT1 (SI)(R14*1)
	PREFETCHT1 64(SI)(R14*1)
	BLOCKHIX(Z16)
	STEP
	BLOCKHIX(Z17)
	STEP
	SUBQ $2, CX
	JMP  hi_pairs_x
hi_one_x:
	TESTQ CX, CX
	JZ    tail_x
	PREFETCHT1 (SI)(R14*1)
	BLOCKHIX(Z16)
	STEP
	JMP  tail_x

lo_pairs_x:
	CMPQ CX, $2
	JLT  lo_one_x
	PREFETCHT1 (SI)(R14*1)
	PREFETCHT1 64(SI)(R14*1)
	BLOCKLOX(Z16)
	STEP
	BLOCKLOX(Z17)
	STEP
	SUBQ $2, CX
	JMP  lo_pairs_x
lo_one_x:
	TESTQ CX, CX
	JZ    tail_x
	PREFETCHT1 (SI)(R14*1)
	BLOCKLOX(Z16)
	STEP

tail_x:
	// a last block of tailw (< 32) words: zero-masked weight load (x is
	// zero-padded), lane-masked accumulation; SI then reaches the next row_x
	MOVQ tailw+32(FP), CX
	TESTQ CX, CX
	JZ    groups_x
	VMOVDQU16.Z (SI), K1, Z0
	VMOVDQU8.Z 1(SI), K5, Z2
	VMOVDQU64 (DX), Z26
	VMOVDQU64 64(DX), Z27
	VMOVDQU64 128(DX), Z28
	VMOVDQU64 192(DX), Z29
	CODES4X
	DOTHI(0, 1, 2, 3, 5, Z5)
	MOVQ  xlo+16(FP), AX // (STEP moved R10 even when xlo is nil)
	TESTQ AX, AX
	JZ    tail_scale_x
	VMOVDQU64 (R10), Z22
	VMOVDQU64 64(R10), Z23
	VMOVDQU64 128(R10), Z24
	VMOVDQU64 192(R10), Z25
	DOTLO(0, 1, 2, 3, 5)
tail_scale_x:
	VPERMPS     (R8), Z30, Z6
	VFMADD231PS Z6, Z5, K2, Z17
	LEAQ (SI)(CX*2), SI

groups_x:
	// acc += Σ_g b[g]·gx[g] + s[g]·gxo[g], 16 groups_x at a time, the last
	// ones masked
	MOVQ gx+80(FP), DX
	MOVQ gxo+88(FP), R10
	MOVQ R11, R8
	MOVQ R12, BX
	MOVQ ng+48(FP), CX
g_loop_x:
	CMPQ CX, $16
	JLT  g_tail_x
	VMOVUPS     (DX), Z0
	VMOVUPS     (R10), Z1
	VFMADD231PS (BX), Z0, Z16
	VFMADD231PS (R8), Z1, Z17
	ADDQ $64, DX
	ADDQ $64, R10
	ADDQ $64, BX
	ADDQ $64, R8
	SUBQ $16, CX
	JMP  g_loop_x
g_tail_x:
	TESTQ CX, CX
	JZ    g_done_x
	VMOVUPS.Z   (DX), K3, Z0
	VMOVUPS.Z   (R10), K3, Z1
	VFMADD231PS (BX), Z0, K3, Z16
	VFMADD231PS (R8), Z1, K3, Z17
g_done_x:
	VADDPS Z17, Z16, Z16
	OUTROW(Z16, Y16, 0)
	ADDQ $4, DI
	ADDQ R15, R11
	ADDQ R15, R12
	DECQ R13
	JNZ  row_x
	VZEROUPPER
	RET

// func qmvDeinterleave(dst, src *uint16, nb int, idx *uint16)
//
// For each of nb blocks of 128 bfloat16 values: dst run j (j = 0..3, 32
// words) gets src words 4w+j, w = 0..31. idx holds the 4 index vectors
// (4w+j) mod 64: VPERMI2W gathers the first 16 words from src words 0..63
// and, merged under K1, the last 16 from words 64..127.
TEXT ·qmvDeinterleave(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ nb+16(FP), CX
	MOVQ idx+24(FP), AX
	VMOVDQU64 (AX), Z4
	VMOVDQU64 64(AX), Z5
	VMOVDQU64 128(AX), Z6
	VMOVDQU64 192(AX), Z7
	MOVL $0xFFFF0000, AX
	KMOVD AX, K1
	TESTQ CX, CX
	JZ    di_done
di_loop:
	VMOVDQU64 (SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVDQA64 Z4, Z8
	VPERMI2W  Z1, Z0, Z8
	VMOVDQA64 Z4, Z9
	VPERMI2W  Z3, Z2, Z9
	VMOVDQU16 Z9, K1, Z8
	VMOVDQU64 Z8, (DI)
	VMOVDQA64 Z5, Z10
	VPERMI2W  Z1, Z0, Z10
	VMOVDQA64 Z5, Z11
	VPERMI2W  Z3, Z2, Z11
	VMOVDQU16 Z11, K1, Z10
	VMOVDQU64 Z10, 64(DI)
	VMOVDQA64 Z6, Z12
	VPERMI2W  Z1, Z0, Z12
	VMOVDQA64 Z6, Z13
	VPERMI2W  Z3, Z2, Z13
	VMOVDQU16 Z13, K1, Z12
	VMOVDQU64 Z12, 128(DI)
	VMOVDQA64 Z7, Z14
	VPERMI2W  Z1, Z0, Z14
	VMOVDQA64 Z7, Z15
	VPERMI2W  Z3, Z2, Z15
	VMOVDQU16 Z15, K1, Z14
	VMOVDQU64 Z14, 192(DI)
	ADDQ $256, SI
	ADDQ $256, DI
	DECQ CX
	JNZ  di_loop
di_done:
	VZEROUPPER
	RET

// func qmvGroupSums(dst, x *float32, ng, vpg int)
// dst[g] = Σ of the vpg 16-float vectors of group g (vpg = 2, 4 or 8).
TEXT ·qmvGroupSums(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ ng+16(FP), CX
	MOVQ vpg+24(FP), DX
gs_group:
	VMOVUPS (SI), Z0
	ADDQ    $64, SI
	MOVQ    DX, BX
	DECQ    BX
gs_vec:
	VADDPS (SI), Z0, Z0
	ADDQ   $64, SI
	DECQ   BX
	JNZ    gs_vec
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y1
	VEXTRACTF128  $1, Y1, X2
	VADDPS        X2, X1, X1
	VHADDPS       X1, X1, X1
	VHADDPS       X1, X1, X1
	VMOVSS        X1, (DI)
	ADDQ $4, DI
	DECQ CX
	JNZ  gs_group
	VZEROUPPER
	RET
