#include "textflag.h"

// Layout helpers of the quantized matvec (see qmv.go; the kernels are in
// qmvr_amd64.s).

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
