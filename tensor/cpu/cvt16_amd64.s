#include "textflag.h"

// ONE16 widens the 16 values at SI into DI, NaN lanes rebuilt as
// sign | 0x7f800000 | man<<13 (Z6 = 0x3ff, Z7 = 0x7f800000, Z8 = 0x80000000).
#define ONE16 \
	VCVTPH2PS (SI), Z0 \
	VCMPPS    $3, Z0, Z0, K1 \
	VPMOVZXWD (SI), Z1 \
	VPSLLD    $16, Z1, Z3 \
	VPANDD    Z8, Z3, Z3 \
	VPANDD    Z6, Z1, Z2 \
	VPSLLD    $13, Z2, Z2 \
	VPORD     Z7, Z2, Z2 \
	VPORD     Z3, Z2, Z2 \
	VMOVDQA32 Z2, K1, Z0 \
	VMOVUPS   Z0, (DI) \
	ADDQ      $32, SI \
	ADDQ      $64, DI

// func cvtF16ToF32N(dst *float32, src *uint16, n int)
//
// Widens n half-precision values (n a multiple of 16) bit for bit as
// tensor.F16ToF32 does. VCVTPH2PS quiets signalling NaNs (it sets the
// float32 quiet bit); tensor.F16ToF32 keeps the payload as it is
// (sign | 0x7f800000 | man<<13), so NaN lanes are rebuilt that way. 64
// values at a time take the plain conversion when none is NaN (one mask
// test), else go through ONE16.
TEXT ·cvtF16ToF32N(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVL         $0x3ff, AX
	VPBROADCASTD AX, Z6
	MOVL         $0x7f800000, AX
	VPBROADCASTD AX, Z7
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z8

h64_loop:
	CMPQ      CX, $64
	JLT       h16_loop
	VCVTPH2PS (SI), Z0
	VCVTPH2PS 32(SI), Z1
	VCVTPH2PS 64(SI), Z2
	VCVTPH2PS 96(SI), Z3
	VCMPPS    $3, Z0, Z0, K1
	VCMPPS    $3, Z1, Z1, K2
	VCMPPS    $3, Z2, Z2, K3
	VCMPPS    $3, Z3, Z3, K4
	KORW      K1, K2, K1
	KORW      K3, K4, K3
	KORTESTW  K1, K3
	JNZ       h64_nan
	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, 64(DI)
	VMOVUPS   Z2, 128(DI)
	VMOVUPS   Z3, 192(DI)
	ADDQ      $128, SI
	ADDQ      $256, DI
	SUBQ      $64, CX
	JMP       h64_loop

h64_nan:
	ONE16
	ONE16
	ONE16
	ONE16
	SUBQ $64, CX
	JMP  h64_loop

h16_loop:
	TESTQ CX, CX
	JZ    h16_done
	ONE16
	SUBQ  $16, CX
	JMP   h16_loop

h16_done:
	VZEROUPPER
	RET
