#include "textflag.h"

// AVX2 kernels for machines without AVX-512 (the AVX-512 versions are in
// simd_amd64.s): the dense matmul micro-kernel and the widening of 16-bit
// floats.

// func sgemm8x32Y(kc int, a, b, c *float32, ldc int)
//
// sgemm8x32 on AVX2: C[0:8][0:32] += A·B for a packed 8×kc panel of A and
// a packed kc×32 panel of B, with the same arithmetic per element (an FMA
// chain over k from zero, then one add into C). The tile runs as four
// 4×16 quarters (8 accumulators each): rows 0..3 and 4..7, columns 0..15
// and 16..31.
TEXT ·sgemm8x32Y(SB), NOSPLIT, $0-40
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	XORQ R9, R9 // quarter: bit 0 the column half, bit 1 the row half
sy_quarter:
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ c+24(FP), DI
	TESTQ $1, R9
	JZ    sy_rows
	ADDQ  $64, DX // columns 16..31
	ADDQ  $64, DI
sy_rows:
	TESTQ $2, R9
	JZ    sy_zero
	ADDQ  $16, SI // rows 4..7
	MOVQ  R8, AX
	SHLQ  $2, AX
	ADDQ  AX, DI
sy_zero:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	TESTQ CX, CX
	JZ    sy_store
sy_loop:
	VMOVUPS      (DX), Y8
	VMOVUPS      32(DX), Y9
	VBROADCASTSS (SI), Y10
	VFMADD231PS  Y8, Y10, Y0
	VFMADD231PS  Y9, Y10, Y1
	VBROADCASTSS 4(SI), Y11
	VFMADD231PS  Y8, Y11, Y2
	VFMADD231PS  Y9, Y11, Y3
	VBROADCASTSS 8(SI), Y12
	VFMADD231PS  Y8, Y12, Y4
	VFMADD231PS  Y9, Y12, Y5
	VBROADCASTSS 12(SI), Y13
	VFMADD231PS  Y8, Y13, Y6
	VFMADD231PS  Y9, Y13, Y7
	ADDQ $32, SI
	ADDQ $128, DX
	DECQ CX
	JNZ  sy_loop
sy_store:
	VADDPS  (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	VADDPS  32(DI), Y1, Y1
	VMOVUPS Y1, 32(DI)
	ADDQ    R8, DI
	VADDPS  (DI), Y2, Y2
	VMOVUPS Y2, (DI)
	VADDPS  32(DI), Y3, Y3
	VMOVUPS Y3, 32(DI)
	ADDQ    R8, DI
	VADDPS  (DI), Y4, Y4
	VMOVUPS Y4, (DI)
	VADDPS  32(DI), Y5, Y5
	VMOVUPS Y5, 32(DI)
	ADDQ    R8, DI
	VADDPS  (DI), Y6, Y6
	VMOVUPS Y6, (DI)
	VADDPS  32(DI), Y7, Y7
	VMOVUPS Y7, 32(DI)
	INCQ R9
	CMPQ R9, $4
	JLT  sy_quarter
	VZEROUPPER
	RET

// Widening of 16-bit floats: 8 values per step, the last len mod 8 one at
// a time.

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
