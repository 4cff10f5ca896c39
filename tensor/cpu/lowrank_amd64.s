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

// func lrBT4(acc *float32, accstep int, t *float32, ldt int, tstep int, bt unsafe.Pointer, ldb int, bstep int, r int, kind int, nx int, nv int, pf int)
//
// lrBT16's chains four at a time, interleaved so that each waits on
// another's latency rather than its own: chain c (0..3) of row i runs
// acc[c, i, j] += Σ_{q<r} t_c[i, q]·B_c[q, j] for the nv (≤ 16) columns
// j, where acc[c, i] is at acc + c·accstep + i·64 bytes, t_c[i, q] at t +
// c·tstep + i·ldt + 4q and B_c[q] at bt + c·bstep + q·ldb (kind as
// lrBT16's). Each sum is one FMA chain in q order starting from acc's
// value, exactly as lrBT16 computes it alone. Each step also prefetches
// what each chain's B row pointer will reach pf bytes on (the caller's
// guess at what it reads next; only hints).
TEXT ·lrBT4(SB), NOSPLIT, $0-104
	MOVQ acc+0(FP), DI
	MOVQ accstep+8(FP), R15
	MOVQ t+16(FP), SI
	MOVQ ldt+24(FP), R12
	MOVQ tstep+32(FP), BX
	MOVQ ldb+48(FP), R10
	MOVQ bstep+56(FP), R14
	MOVQ kind+72(FP), AX
	MOVQ nx+80(FP), R13
	MOVQ nv+88(FP), CX
	MOVL $1, DX
	SHLXL CX, DX, DX
	DECL DX
	KMOVW DX, K1
	LEAQ (BX)(BX*2), CX  // 3·tstep
	LEAQ (R14)(R14*2), R9 // 3·bstep
lq_row:
	TESTQ R13, R13
	JZ   lq_done
	MOVQ accstep+8(FP), R15
	VMOVUPS.Z (DI), K1, Z16
	VMOVUPS.Z (DI)(R15*1), K1, Z17
	VMOVUPS.Z (DI)(R15*2), K1, Z18
	LEAQ (DI)(R15*2), R11
	ADDQ R15, R11
	VMOVUPS.Z (R11), K1, Z19
	MOVQ bt+40(FP), R8 // B row q of chain 0
	MOVQ R8, R15
	ADDQ pf+96(FP), R15 // what the prefetches touch
	MOVQ SI, DX         // t[i, q] of chain 0
	MOVQ r+64(FP), R11
lq_q:
	TESTQ R11, R11
	JZ   lq_store
	CMPQ AX, $0
	JNE  lq_narrow
	VMOVUPS.Z (R8), K1, Z0
	VMOVUPS.Z (R8)(R14*1), K1, Z1
	VMOVUPS.Z (R8)(R14*2), K1, Z2
	VMOVUPS.Z (R8)(R9*1), K1, Z3
	JMP  lq_fma
lq_narrow:
	CMPQ AX, $1
	JNE  lq_half
	VMOVDQU16.Z (R8), K1, Y0
	VMOVDQU16.Z (R8)(R14*1), K1, Y1
	VMOVDQU16.Z (R8)(R14*2), K1, Y2
	VMOVDQU16.Z (R8)(R9*1), K1, Y3
	VPMOVZXWD Y0, Z0
	VPMOVZXWD Y1, Z1
	VPMOVZXWD Y2, Z2
	VPMOVZXWD Y3, Z3
	VPSLLD $16, Z0, Z0
	VPSLLD $16, Z1, Z1
	VPSLLD $16, Z2, Z2
	VPSLLD $16, Z3, Z3
	JMP  lq_fma
lq_half:
	VMOVDQU16.Z (R8), K1, Y0
	VMOVDQU16.Z (R8)(R14*1), K1, Y1
	VMOVDQU16.Z (R8)(R14*2), K1, Y2
	VMOVDQU16.Z (R8)(R9*1), K1, Y3
	VCVTPH2PS Y0, Z0
	VCVTPH2PS Y1, Z1
	VCVTPH2PS Y2, Z2
	VCVTPH2PS Y3, Z3
lq_fma:
	PREFETCHT0 (R15)
	PREFETCHT0 (R15)(R14*1)
	PREFETCHT0 (R15)(R14*2)
	PREFETCHT0 (R15)(R9*1)
	ADDQ R10, R15
	VFMADD231PS.BCST (DX), Z0, Z16
	VFMADD231PS.BCST (DX)(BX*1), Z1, Z17
	VFMADD231PS.BCST (DX)(BX*2), Z2, Z18
	VFMADD231PS.BCST (DX)(CX*1), Z3, Z19
	ADDQ R10, R8
	ADDQ $4, DX
	DECQ R11
	JMP  lq_q
lq_store:
	MOVQ accstep+8(FP), R15
	VMOVUPS Z16, K1, (DI)
	VMOVUPS Z17, K1, (DI)(R15*1)
	VMOVUPS Z18, K1, (DI)(R15*2)
	LEAQ (DI)(R15*2), R11
	ADDQ R15, R11
	VMOVUPS Z19, K1, (R11)
	ADDQ $64, DI
	ADDQ R12, SI
	DECQ R13
	JMP  lq_row
lq_done:
	VZEROUPPER
	RET
