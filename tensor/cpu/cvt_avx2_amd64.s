#include "textflag.h"

// AVX2 widening of 16-bit floats (the AVX-512 versions are in
// simd_amd64.s): 8 values per step, the last len mod 8 one at a time.

// func cvtBF16ToF32Y(dst []float32, src []uint16)
TEXT ·cvtBF16ToF32Y(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
by_loop8:
	CMPQ CX, $8
	JLT  by_tail
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       by_loop8
by_tail:
	TESTQ CX, CX
	JZ    by_done
	MOVWLZX (SI), AX
	SHLL    $16, AX
	MOVL    AX, (DI)
	ADDQ    $2, SI
	ADDQ    $4, DI
	DECQ    CX
	JMP     by_tail
by_done:
	VZEROUPPER
	RET

// func cvtF16ToF32Y(dst []float32, src []uint16)
TEXT ·cvtF16ToF32Y(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
hy_loop8:
	CMPQ CX, $8
	JLT  hy_tail
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JMP       hy_loop8
hy_tail:
	TESTQ CX, CX
	JZ    hy_done
	MOVWLZX   (SI), AX
	VMOVD     AX, X0
	VCVTPH2PS X0, X0
	VMOVSS    X0, (DI)
	ADDQ      $2, SI
	ADDQ      $4, DI
	DECQ      CX
	JMP       hy_tail
hy_done:
	VZEROUPPER
	RET
