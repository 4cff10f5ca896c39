#include "textflag.h"

// func cvtF16ToF32N(dst *float32, src *uint16, n int)
//
// Widens n half-precision values (n a multiple of 16) bit for bit as
// tensor.F16ToF32 does. VCVTPH2PS quiets signalling NaNs (it sets the
// float32 quiet bit); tensor.F16ToF32 keeps the payload as it is
// (sign | 0x7f800000 | man<<13), so NaN lanes are rebuilt that way.
TEXT ·cvtF16ToF32N(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	MOVL         $0x7fff, AX
	VPBROADCASTD AX, Z4
	MOVL         $0x7c00, AX
	VPBROADCASTD AX, Z5
	MOVL         $0x3ff, AX
	VPBROADCASTD AX, Z6
	MOVL         $0x7f800000, AX
	VPBROADCASTD AX, Z7
	MOVL         $0x80000000, AX
	VPBROADCASTD AX, Z8

h16_loop:
	TESTQ     CX, CX
	JZ        h16_done
	VCVTPH2PS (SI), Z0
	VPMOVZXWD (SI), Z1
	VPANDD    Z4, Z1, Z2
	VPCMPUD   $6, Z5, Z2, K1 // |h| > 0x7c00: NaN
	KORTESTW  K1, K1
	JZ        h16_store
	VPSLLD    $16, Z1, Z3
	VPANDD    Z8, Z3, Z3     // sign
	VPANDD    Z6, Z1, Z2
	VPSLLD    $13, Z2, Z2    // payload
	VPORD     Z7, Z2, Z2
	VPORD     Z3, Z2, Z2
	VMOVDQA32 Z2, K1, Z0

h16_store:
	VMOVUPS Z0, (DI)
	ADDQ    $32, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     h16_loop

h16_done:
	VZEROUPPER
	RET
