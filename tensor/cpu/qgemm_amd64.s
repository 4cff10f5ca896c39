#include "textflag.h"

// Prefill (many x rows) quantized matmul on AVX512_BF16; see qgemm.go for
// the layouts and the precision argument.

// DPBF emits VDPBF16PS zmm(r), zmm(v), zmm(rm) (r += pairwise bfloat16
// products of v and rm), which the Go assembler has no mnemonic for:
// EVEX.512.F3.0F38.W0 52 /r from register numbers.
#define DPBF(rm, v, r) \
	BYTE $0x62 \
	BYTE $(0x02 | (1-((r>>3)&1))<<7 | (1-((rm>>4)&1))<<6 | (1-((rm>>3)&1))<<5 | (1-((r>>4)&1))<<4) \
	BYTE $(((15-(v&15))<<3) | 0x06) \
	BYTE $(0x40 | (1-((v>>4)&1))<<3) \
	BYTE $0x52 \
	BYTE $(0xC0 | (r&7)<<3 | (rm&7))

// KSTEP is one k pair of the 6×32 tile: the panel's two vectors of 16
// columns (Z24, Z25) against each x row's pair, broadcast (Z26..Z31), into
// the group accumulators Z12..Z23 (row r: Z12+2r, Z13+2r).
#define KSTEP \
	VMOVDQU32    (SI), Z24 \
	VMOVDQU32    64(SI), Z25 \
	VPBROADCASTD (DI), Z26 \
	VPBROADCASTD (DI)(R8*1), Z27 \
	VPBROADCASTD (DI)(R8*2), Z28 \
	VPBROADCASTD (R10), Z29 \
	VPBROADCASTD (R10)(R8*1), Z30 \
	VPBROADCASTD (R10)(R8*2), Z31 \
	DPBF(26, 24, 12) \
	DPBF(26, 25, 13) \
	DPBF(27, 24, 14) \
	DPBF(27, 25, 15) \
	DPBF(28, 24, 16) \
	DPBF(28, 25, 17) \
	DPBF(29, 24, 18) \
	DPBF(29, 25, 19) \
	DPBF(30, 24, 20) \
	DPBF(30, 25, 21) \
	DPBF(31, 24, 22) \
	DPBF(31, 25, 23) \
	ADDQ $128, SI \
	ADDQ $4, DI \
	ADDQ $4, R10

// KSTEP2 is two KSTEPs (the loop's unrolled body).
#define KSTEP2 \
	KSTEP \
	KSTEP

// EPIROW folds row r's group sums into its accumulators: acc += s·dot +
// b·Σx (scales Z26/Z27, biases Z28/Z29, Σx broadcast into Z30 from xsr).
#define EPIROW(a0, a1, t0, t1, xsr) \
	VFMADD231PS  Z26, t0, a0 \
	VFMADD231PS  Z27, t1, a1 \
	VBROADCASTSS xsr, Z30 \
	VFMADD231PS  Z28, Z30, a0 \
	VFMADD231PS  Z29, Z30, a1 \
	VPXORD       t0, t0, t0 \
	VPXORD       t1, t1, t1

// func qgemmKern(p *uint32, x *uint16, ldx, xlo int, sb, xs *float32, ldxs, ng, gkp int, out *float32, ldo, acc int)
//
// out (6 rows, ldo bytes apart, 32 floats each) = (out if acc ≠ 0) + Σ_g s_g·(Σ_{k∈g} x·q) +
// b_g·Σ_{k∈g} x for 6 x rows (bfloat16, ldx bytes apart; when xlo ≠ 0 a
// second copy xlo bytes on is added to the group dots too) against a
// 32-column panel p (per k pair 32 dwords of two bfloat16 codes). sb holds
// per group 32 scales then 32 biases; xs the x rows' group sums (ldxs
// bytes apart). gkp is k pairs per group, ng the groups.
TEXT ·qgemmKern(SB), NOSPLIT, $0-96
	MOVQ out+72(FP), DI
	MOVQ ldo+80(FP), R8
	LEAQ (R8)(R8*2), R9
	LEAQ (DI)(R9*1), R10
	MOVQ acc+88(FP), AX
	TESTQ AX, AX
	JZ    zero_acc
	VMOVUPS (DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS (DI)(R8*1), Z2
	VMOVUPS 64(DI)(R8*1), Z3
	VMOVUPS (DI)(R8*2), Z4
	VMOVUPS 64(DI)(R8*2), Z5
	VMOVUPS (R10), Z6
	VMOVUPS 64(R10), Z7
	VMOVUPS (R10)(R8*1), Z8
	VMOVUPS 64(R10)(R8*1), Z9
	VMOVUPS (R10)(R8*2), Z10
	VMOVUPS 64(R10)(R8*2), Z11
	JMP   start
zero_acc:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
start:
	MOVQ p+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ ldx+16(FP), R8
	MOVQ xlo+24(FP), R15
	MOVQ sb+32(FP), BX
	MOVQ xs+40(FP), R11
	MOVQ ldxs+48(FP), R12
	MOVQ ng+56(FP), R14
	LEAQ (R8)(R8*2), R9
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

grp:
	MOVQ DI, DX // the group's x
	MOVQ SI, AX // the group's panel
	LEAQ (DI)(R9*1), R10
	MOVQ gkp+64(FP), CX
	SHRQ $1, CX
hi_loop:
	KSTEP2
	DECQ CX
	JNZ  hi_loop
	TESTQ R15, R15
	JZ    epi
	// the same group again against the x residuals
	MOVQ AX, SI
	LEAQ (DX)(R15*1), DI
	LEAQ (DI)(R9*1), R10
	MOVQ gkp+64(FP), CX
	SHRQ $1, CX
lo_loop:
	KSTEP2
	DECQ CX
	JNZ  lo_loop
	SUBQ R15, DI

epi:
	VMOVUPS (BX), Z26
	VMOVUPS 64(BX), Z27
	VMOVUPS 128(BX), Z28
	VMOVUPS 192(BX), Z29
	LEAQ    (R11)(R12*2), R13
	ADDQ    R12, R13
	EPIROW(Z0, Z1, Z12, Z13, (R11))
	EPIROW(Z2, Z3, Z14, Z15, (R11)(R12*1))
	EPIROW(Z4, Z5, Z16, Z17, (R11)(R12*2))
	EPIROW(Z6, Z7, Z18, Z19, (R13))
	EPIROW(Z8, Z9, Z20, Z21, (R13)(R12*1))
	EPIROW(Z10, Z11, Z22, Z23, (R13)(R12*2))
	ADDQ $256, BX
	ADDQ $4, R11
	DECQ R14
	JNZ  grp

	MOVQ out+72(FP), DI
	MOVQ ldo+80(FP), R8
	LEAQ (R8)(R8*2), R9
	LEAQ (DI)(R9*1), R10
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, (DI)(R8*1)
	VMOVUPS Z3, 64(DI)(R8*1)
	VMOVUPS Z4, (DI)(R8*2)
	VMOVUPS Z5, 64(DI)(R8*2)
	VMOVUPS Z6, (R10)
	VMOVUPS Z7, 64(R10)
	VMOVUPS Z8, (R10)(R8*1)
	VMOVUPS Z9, 64(R10)(R8*1)
	VMOVUPS Z10, (R10)(R8*2)
	VMOVUPS Z11, 64(R10)(R8*2)
	VZEROUPPER
	RET

// qgNibbles is the bfloat16 of 0..15, twice (a VPERMW table that ignores
// index bit 4).
DATA qgNibbles<>+0(SB)/8, $0x404040003f800000
DATA qgNibbles<>+8(SB)/8, $0x40e040c040a04080
DATA qgNibbles<>+16(SB)/8, $0x4130412041104100
DATA qgNibbles<>+24(SB)/8, $0x4170416041504140
DATA qgNibbles<>+32(SB)/8, $0x404040003f800000
DATA qgNibbles<>+40(SB)/8, $0x40e040c040a04080
DATA qgNibbles<>+48(SB)/8, $0x4130412041104100
DATA qgNibbles<>+56(SB)/8, $0x4170416041504140
GLOBL qgNibbles<>(SB), RODATA|NOPTR, $64

// NIB4(sh, off) makes the k pair in byte sh/8 of each gathered dword (Z0)
// into two bfloat16 codes and stores them at off(DI): the low nibble stays
// in the low word, the high one is moved to bit 16 (the words' other
// bits are ignored by the VPERMW lookup up to bit 4, which the table
// repeats over).
#define NIB4(sh, off) \
	VPSRLD    $sh, Z0, Z1 \
	VPSLLD    $12, Z1, Z2 \
	VPBLENDMW Z2, Z1, K2, Z3 \
	VPERMW    Z31, Z3, Z3 \
	VMOVDQU32 Z3, off(DI)

// BYTE8(sh, off) is NIB4 for 8-bit codes: bytes sh/8 and sh/8+1 of each
// dword, converted through float32 (exact: at most 8 significant bits).
#define BYTE8(sh, off) \
	VPSRLD    $sh, Z0, Z1 \
	VPSRLD    $8, Z1, Z2 \
	VPANDD    Z30, Z1, Z1 \
	VPANDD    Z30, Z2, Z2 \
	VCVTDQ2PS Z1, Z1 \
	VCVTDQ2PS Z2, Z2 \
	VPSRLD    $16, Z1, Z1 \
	VPORD     Z2, Z1, Z3 \
	VMOVDQU32 Z3, off(DI)

// func qgemmUnpack(dst *uint32, w *byte, nd int, idx *int32, mask, bits int)
//
// Writes nd dwords of each of 16 weight rows (at w + idx[i]; lanes outside
// mask are zero) as a panel half: per k pair, 16 dwords (row i in dword
// i) of two bfloat16 codes, 128 bytes apart (the other half interleaved
// by the caller at dst+64). bits is 4 or 8.
TEXT ·qgemmUnpack(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ nd+16(FP), CX
	MOVQ idx+24(FP), AX
	VMOVDQU32 (AX), Z20
	MOVQ mask+32(FP), R8
	MOVL $0xAAAAAAAA, AX
	KMOVD AX, K2
	VMOVDQU64 qgNibbles<>(SB), Z31
	MOVL $0xFF, AX
	VPBROADCASTD AX, Z30
	MOVQ bits+40(FP), AX
	CMPQ AX, $8
	JEQ  u8

u4:
	VPXORD     Z0, Z0, Z0
	KMOVW      R8, K1
	VPGATHERDD (SI)(Z20*1), K1, Z0
	NIB4(0, 0)
	NIB4(8, 128)
	NIB4(16, 256)
	NIB4(24, 384)
	ADDQ $4, SI
	ADDQ $512, DI
	DECQ CX
	JNZ  u4
	VZEROUPPER
	RET

u8:
	VPXORD     Z0, Z0, Z0
	KMOVW      R8, K1
	VPGATHERDD (SI)(Z20*1), K1, Z0
	BYTE8(0, 0)
	BYTE8(16, 128)
	ADDQ $4, SI
	ADDQ $256, DI
	DECQ CX
	JNZ  u8
	VZEROUPPER
	RET

// func cvtF32ToBF16(dst *uint16, src *float32, n int)
//
// Rounds n (a multiple of 16) floats to bfloat16 exactly as
// tensor.F32ToBF16: to nearest even, NaNs kept quiet (| 0x40).
TEXT ·cvtF32ToBF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   cb_done
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z29
	MOVL $1, AX
	VPBROADCASTD AX, Z28
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z27
	MOVL $0x7f800000, AX
	VPBROADCASTD AX, Z26
	MOVL $0x40, AX
	VPBROADCASTD AX, Z25
cb_loop:
	VMOVDQU32 (SI), Z0
	VPSRLD    $16, Z0, Z1     // b >> 16
	VPANDD    Z28, Z1, Z2     // (b >> 16) & 1
	VPADDD    Z29, Z2, Z2
	VPADDD    Z0, Z2, Z2      // b + 0x7fff + lsb
	VPSRLD    $16, Z2, Z2
	VPANDD    Z27, Z0, Z3     // |b|
	VPCMPUD   $6, Z26, Z3, K1 // NaN: |b| > 0x7f800000
	VPORD     Z25, Z1, K1, Z2
	VPMOVDW   Z2, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  cb_loop
	VZEROUPPER
cb_done:
	RET
