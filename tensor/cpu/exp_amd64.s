#include "textflag.h"

// The exp kernels repeat ewExpInto's float64 arithmetic on 8 lanes per
// register, each step the same single IEEE operation as the Go code (no
// fused multiply-add), so every lane's result is bit for bit the scalar
// one (exp_test.go checks every float32 in [-110, 90]). Registers held for the whole loop (EXPSETUP):
//   Z31 32/ln2   Z30 shifter   Z29 ln2/32   Z28 1/6   Z27 0.5   Z26 1.0
//   Z25..Z22 the 32-entry table, 8 entries each
//   Z21 1023 (int64)   Z20 16 (int64, the table index's bit 4)
//   Z19 88.8f   Z18 -104f   Z16 +Inf (float32)   Z15 zero
#define EXPSETUP \
	VMOVUPD      0(AX), Z25 \
	VMOVUPD      64(AX), Z24 \
	VMOVUPD      128(AX), Z23 \
	VMOVUPD      192(AX), Z22 \
	VBROADCASTSD 256(AX), Z31 \
	VBROADCASTSD 264(AX), Z30 \
	VBROADCASTSD 272(AX), Z29 \
	VBROADCASTSD 280(AX), Z28 \
	VBROADCASTSD 288(AX), Z27 \
	VBROADCASTSD 296(AX), Z26 \
	VBROADCASTSS 304(AX), Z19 \
	VBROADCASTSS 308(AX), Z18 \
	MOVQ         $1023, BX \
	VPBROADCASTQ BX, Z21 \
	MOVQ         $16, BX \
	VPBROADCASTQ BX, Z20 \
	MOVL         $0x7f800000, BX \
	VPBROADCASTD BX, Z16 \
	VPXORD       Z15, Z15, Z15

// EXP8 computes e^X for the 8 float64 lanes of X into P (float64, before
// the rounding to float32) as ewExpInto does:
//   nf = (x·(32/ln2) + S) - S;  r = x - nf·(ln2/32)
//   p = 1 + r·(1 + r·(0.5 + r·(1/6)));  n = int64(nf)
//   P = (p · T[n&31]) · 2^(n>>5)
// T[n&31] is two two-register permutes (index bits 0..3) chosen by bit 4.
#define EXP8(X, N, R, P, I, A, B, KB) \
	VMULPD     Z31, X, N \
	VADDPD     Z30, N, N \
	VSUBPD     Z30, N, N \
	VMULPD     Z29, N, R \
	VSUBPD     R, X, R \
	VMULPD     Z28, R, P \
	VADDPD     Z27, P, P \
	VMULPD     R, P, P \
	VADDPD     Z26, P, P \
	VMULPD     R, P, P \
	VADDPD     Z26, P, P \
	VCVTTPD2QQ N, I \
	VMOVAPD    Z25, A \
	VPERMT2PD  Z24, I, A \
	VMOVAPD    Z23, B \
	VPERMT2PD  Z22, I, B \
	VPTESTMQ   Z20, I, KB \
	VBLENDMPD  B, A, KB, A \
	VPSRAQ     $5, I, I \
	VPADDQ     Z21, I, I \
	VPSLLQ     $52, I, I \
	VMULPD     A, P, P \
	VMULPD     I, P, P

// EXP16 takes the 16 float32 v = x - c in Z0 and leaves in Z3 the 16
// float32 fast-path results and in K2 the lanes in the fast range
// (-104 ≤ v < 88.8, false for NaN). Clobbers Z1, Z2, Z4..Z10, K4, K5.
#define EXP16 \
	VCMPPS        $0x11, Z19, Z0, K2 \
	VCMPPS        $0x1d, Z18, Z0, K2, K2 \
	VCVTPS2PD     Y0, Z1 \
	VEXTRACTF32X8 $1, Z0, Y2 \
	VCVTPS2PD     Y2, Z2 \
	EXP8(Z1, Z4, Z5, Z6, Z7, Z8, Z9, K4) \
	VCVTPD2PS     Z6, Y3 \
	EXP8(Z2, Z4, Z5, Z6, Z7, Z8, Z9, K5) \
	VCVTPD2PS     Z6, Y10 \
	VINSERTF32X8  $1, Y10, Z3, Z3

// SLOWFIX replaces Z3's lanes outside K2 with what ewExp returns there:
// v itself for NaN, +Inf above the range, 0 below. Clobbers Z11, K3.
#define SLOWFIX \
	VMOVAPS Z15, Z11 \
	VCMPPS  $0x1e, Z15, Z0, K3 \
	VMOVAPS Z16, K3, Z11 \
	VCMPPS  $3, Z0, Z0, K3 \
	VMOVAPS Z0, K3, Z11 \
	VMOVAPS Z3, K2, Z11 \
	VMOVAPS Z11, Z3

// func ewExpSumAVX512(o, x *float32, n int, c float32, k *ewExpConsts) float64
//
// o[i] = e^(x[i]-c) for i < n; returns s0 + s1 where s0 sums the fast-range
// results and s1 the others, each in element order in float64 as the Go
// loop does (X14 = s0, X13 = s1). A block of 16 with every lane in range
// adds its 16 widened results to s0 from the frame; any other block (and
// the tail) goes lane by lane through the K2 bits.
TEXT ·ewExpSumAVX512(SB), NOSPLIT, $128-48
	MOVQ         o+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVQ         k+32(FP), AX
	VBROADCASTSS c+24(FP), Z17
	EXPSETUP
	VXORPD       X14, X14, X14
	VXORPD       X13, X13, X13
	XORL         R9, R9

es_loop:
	CMPQ        CX, $16
	JLT         es_tail
	VMOVUPS     (SI), Z0
	VSUBPS      Z17, Z0, Z0
	EXP16
	KORTESTW    K2, K2
	JCC         es_slow
	VMOVUPS     Z3, (DI)
	VCVTPS2PD   Y3, Z4
	VEXTRACTF32X8 $1, Z3, Y5
	VCVTPS2PD   Y5, Z5
	VMOVUPD     Z4, 0(SP)
	VMOVUPD     Z5, 64(SP)
	VADDSD      0(SP), X14, X14
	VADDSD      8(SP), X14, X14
	VADDSD      16(SP), X14, X14
	VADDSD      24(SP), X14, X14
	VADDSD      32(SP), X14, X14
	VADDSD      40(SP), X14, X14
	VADDSD      48(SP), X14, X14
	VADDSD      56(SP), X14, X14
	VADDSD      64(SP), X14, X14
	VADDSD      72(SP), X14, X14
	VADDSD      80(SP), X14, X14
	VADDSD      88(SP), X14, X14
	VADDSD      96(SP), X14, X14
	VADDSD      104(SP), X14, X14
	VADDSD      112(SP), X14, X14
	VADDSD      120(SP), X14, X14

es_next:
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  es_loop

es_slow:
	SLOWFIX
	VMOVUPS Z3, (DI)
	MOVL    $0xffff, BX
	JMP     es_lanes

es_tail:
	TESTQ     CX, CX
	JZ        es_done
	MOVL      $1, BX
	SHLL      CX, BX
	DECL      BX
	KMOVW     BX, K1
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS    Z17, Z0, Z0
	EXP16
	SLOWFIX
	VMOVUPS   Z3, K1, (DI)
	MOVL      $1, R9

// es_lanes adds lane j of Z3 (widened) for each set bit j of BX (bits
// 0..m-1) to s0 when K2 has it, else to s1, then goes back to the loop
// (R9 = 0) or ends (R9 = 1). s1 = lane + s1 with the lane as the first
// operand, as the compiled Go loop has it, so NaN payloads match too.
es_lanes:
	KMOVW         K2, DX
	VCVTPS2PD     Y3, Z4
	VEXTRACTF32X8 $1, Z3, Y5
	VCVTPS2PD     Y5, Z5
	VMOVUPD       Z4, 0(SP)
	VMOVUPD       Z5, 64(SP)
	XORL          R8, R8

es_lane:
	BTL    R8, BX
	JCC    es_lanes_end
	VMOVSD 0(SP)(R8*8), X12
	BTL    R8, DX
	JCS    es_lane_fast
	VADDSD X13, X12, X13
	JMP    es_lane_next

es_lane_fast:
	VADDSD X12, X14, X14

es_lane_next:
	INCL R8
	CMPL R8, $16
	JLT  es_lane

es_lanes_end:
	TESTL R9, R9
	JZ    es_next

es_done:
	VADDSD     X13, X14, X14
	VMOVSD     X14, ret+40(FP)
	VZEROUPPER
	RET

// func ewExpAVX512(o, x *float32, n int, c float32, k *ewExpConsts)
//
// o[i] = e^(x[i]-c) for i < n, the values ewExpSumAVX512 writes, without
// its sums (whose element-order float64 adds are most of its time).
TEXT ·ewExpAVX512(SB), NOSPLIT, $0-40
	MOVQ         o+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVQ         k+32(FP), AX
	VBROADCASTSS c+24(FP), Z17
	EXPSETUP

en_loop:
	CMPQ    CX, $16
	JLT     en_tail
	VMOVUPS (SI), Z0
	VSUBPS  Z17, Z0, Z0
	EXP16
	SLOWFIX
	VMOVUPS Z3, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     en_loop

en_tail:
	TESTQ     CX, CX
	JZ        en_done
	MOVL      $1, BX
	SHLL      CX, BX
	DECL      BX
	KMOVW     BX, K1
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS    Z17, Z0, Z0
	EXP16
	SLOWFIX
	VMOVUPS   Z3, K1, (DI)

en_done:
	VZEROUPPER
	RET

// func ewSigmoidAVX512(o, x *float32, n int, k *ewExpConsts)
//
// o[i] = sigmoid(x[i]) as ewSigmoidInto computes it: e = e^(-|x| - 0)
// through EXP16 (the "- 0" is ewExpInto's "v -= c", which quiets a
// signalling NaN), then 1/(1+e) where x ≥ 0 and e/(1+e) elsewhere, in
// float32. Z14 = 1.0f, Z13 = the sign bit, Z12 = x.
TEXT ·ewSigmoidAVX512(SB), NOSPLIT, $0-32
	MOVQ         o+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVQ         k+24(FP), AX
	EXPSETUP
	MOVL         $0x3f800000, BX
	VPBROADCASTD BX, Z14
	MOVL         $0x80000000, BX
	VPBROADCASTD BX, Z13
	MOVL         $0xffff, BX
	KMOVW        BX, K1

sg_loop:
	CMPQ      CX, $16
	JGE       sg_full
	TESTQ     CX, CX
	JZ        sg_done
	MOVL      $1, BX
	SHLL      CX, BX
	DECL      BX
	KMOVW     BX, K1
	MOVQ      $16, CX

sg_full:
	VMOVUPS.Z (SI), K1, Z12
	VPORD     Z13, Z12, Z0
	VSUBPS    Z15, Z0, Z0
	EXP16
	KORTESTW  K2, K2
	JCS       sg_fast
	SLOWFIX

sg_fast:
	VADDPS    Z14, Z3, Z4
	VCMPPS    $0x1d, Z15, Z12, K3
	VBLENDMPS Z14, Z3, K3, Z5
	VDIVPS    Z4, Z5, Z5
	VMOVUPS   Z5, K1, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       sg_loop

sg_done:
	VZEROUPPER
	RET
