#include "textflag.h"

// func lrBT16(acc *float32, t *float32, ldt int, bt unsafe.Pointer, ldb int, r int, kind int, nx int, nv int)
//
// acc[i·16 + j] += Σ_{q<r} t[i·ldt/4 + q]·Bᵀ[q, j] for nx rows i and the
// nv (≤ 16) columns j of Bᵀ at bt (row q at bt + q·ldb bytes, kind 0
// float32, 1 bfloat16, 2 float16): each sum one FMA chain in q order
// starting from acc's value, as gemvT16 computes it.
TEXT ·lrBT16(SB), NOSPLIT, $0-72
	MOVQ acc+0(FP), DI
	MOVQ t+8(FP), SI
	MOVQ ldt+16(FP), R12
	MOVQ bt+24(FP), R9
	MOVQ ldb+32(FP), R10
	MOVQ r+40(FP), CX
	MOVQ kind+48(FP), AX
	MOVQ nx+56(FP), R13
	MOVQ nv+64(FP), BX
	MOVL $1, DX
	SHLXL BX, DX, DX
	DECL DX
	KMOVW DX, K1
lb_row:
	TESTQ R13, R13
	JZ   lb_done
	VMOVUPS.Z (DI), K1, Z16
	MOVQ R9, R8  // B row q
	MOVQ SI, DX  // t[i, q]
	MOVQ CX, R11
lb_q:
	TESTQ R11, R11
	JZ   lb_store
	CMPQ AX, $0
	JNE  lb_narrow
	VMOVUPS.Z (R8), K1, Z0
	JMP  lb_fma
lb_narrow:
	CMPQ AX, $1
	JNE  lb_half
	VMOVDQU16.Z (R8), K1, Y0
	VPMOVZXWD Y0, Z0
	VPSLLD $16, Z0, Z0
	JMP  lb_fma
lb_half:
	VMOVDQU16.Z (R8), K1, Y0
	VCVTPH2PS Y0, Z0
lb_fma:
	VFMADD231PS.BCST (DX), Z0, Z16
	ADDQ R10, R8
	ADDQ $4, DX
	DECQ R11
	JMP  lb_q
lb_store:
	VMOVUPS Z16, K1, (DI)
	ADDQ $64, DI
	ADDQ R12, SI
	DECQ R13
	JMP  lb_row
lb_done:
	VZEROUPPER
	RET
