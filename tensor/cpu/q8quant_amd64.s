#include "textflag.h"

// func q8QuantAVX512(dst *byte, x *float32, ng, gs int)
//
// q8QuantizeRef's operations, sixteen lanes at a time: per group of gs
// (a multiple of 16) floats, amax = max|x|; d = amax/127; id = 1/d (0 when
// d is 0); x8 = clamp(round-half-even(x·id), ±127); then d and d·Σx8. A
// group holding NaN or ±Inf (x·0 is then NaN somewhere) gets zero codes,
// d = NaN and d·Σx8 = NaN.
TEXT ·q8QuantAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ ng+16(FP), CX
	MOVQ gs+24(FP), R8
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z30 // |·| mask
	MOVL $127, AX
	VPBROADCASTD AX, Z29 // 127 (int32)
	MOVL $-127, AX
	VPBROADCASTD AX, Z28 // -127
	MOVL $0x42fe0000, AX // 127.0f
	VMOVD AX, X27
	MOVL $0x3f800000, AX // 1.0f
	VMOVD AX, X26
	VPXORD Z31, Z31, Z31 // zero
group:
	MOVQ SI, R9
	MOVQ R8, DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
amax:
	VMOVUPS (R9), Z2
	VPANDD Z30, Z2, Z3
	VMAXPS Z3, Z0, Z0
	VMULPS Z31, Z2, Z4
	VADDPS Z4, Z1, Z1
	ADDQ $64, R9
	SUBQ $16, DX
	JNZ amax
	// the lanes' max and the NaN probe's sum
	VEXTRACTF32X8 $1, Z0, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF32X8 $1, Z1, Y3
	VADDPS Y3, Y1, Y1
	VEXTRACTF128 $1, Y0, X2
	VMAXPS X2, X0, X0
	VEXTRACTF128 $1, Y1, X3
	VADDPS X3, X1, X1
	VMOVHLPS X0, X0, X2
	VMAXPS X2, X0, X0
	VMOVHLPS X1, X1, X3
	VADDPS X3, X1, X1
	VPSHUFD $1, X0, X2
	VMAXSS X2, X0, X0
	VPSHUFD $1, X1, X3
	VADDSS X3, X1, X1
	VUCOMISS X1, X1
	JPS bad
	VDIVSS X27, X0, X6 // d = amax/127
	VXORPS X7, X7, X7
	VUCOMISS X31, X6
	JEQ scaled
	VDIVSS X6, X26, X7 // id = 1/d
scaled:
	VBROADCASTSS X7, Z7
	VPXORD Z8, Z8, Z8 // Σx8
	MOVQ SI, R9
	MOVQ DI, R10
	MOVQ R8, DX
quant:
	VMULPS (R9), Z7, Z2
	VCVTPS2DQ Z2, Z2
	VPMINSD Z29, Z2, Z2
	VPMAXSD Z28, Z2, Z2
	VPADDD Z2, Z8, Z8
	VPMOVSDB Z2, (R10)
	ADDQ $64, R9
	ADDQ $16, R10
	SUBQ $16, DX
	JNZ quant
	VEXTRACTI32X8 $1, Z8, Y9
	VPADDD Y9, Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPADDD X9, X8, X8
	VPSHUFD $0x4e, X8, X9
	VPADDD X9, X8, X8
	VPSHUFD $1, X8, X9
	VPADDD X9, X8, X8
	VMOVD X8, AX
	VCVTSI2SSL AX, X9, X9
	VMULSS X9, X6, X9 // d·Σx8
	VMOVSS X6, (R10)
	VMOVSS X9, 4(R10)
	JMP next
bad:
	MOVQ DI, R10
	MOVQ R8, DX
zero:
	VMOVDQU8 X31, (R10)
	ADDQ $16, R10
	SUBQ $16, DX
	JNZ zero
	MOVL $0x7fc00000, (R10)
	MOVL $0x7fc00000, 4(R10)
next:
	LEAQ 8(R10), DI
	LEAQ (SI)(R8*4), SI
	DECQ CX
	JNZ group
	VZEROUPPER
	RET
