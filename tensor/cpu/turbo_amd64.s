#include "textflag.h"

// AVX2 pieces of SDPATurbo (turbo.go).

DATA turboShift3<>+0(SB)/4, $0
DATA turboShift3<>+4(SB)/4, $3
DATA turboShift3<>+8(SB)/4, $6
DATA turboShift3<>+12(SB)/4, $9
DATA turboShift3<>+16(SB)/4, $12
DATA turboShift3<>+20(SB)/4, $15
DATA turboShift3<>+24(SB)/4, $18
DATA turboShift3<>+28(SB)/4, $21
GLOBL turboShift3<>(SB), RODATA|NOPTR, $32

DATA turboSeven<>+0(SB)/4, $7
GLOBL turboSeven<>(SB), RODATA|NOPTR, $4

// func turboValues3Y(dst *float32, src *byte, tab *float32, n int)
//
// dst[i] = tab[code i] for n (a multiple of 8, > 0) 3-bit codes packed
// little-endian at src: each run of 8 codes is the 24 bits of 3 bytes,
// read as one 4-byte word (the caller guarantees a byte after the codes),
// shifted per lane and looked up in the 8-entry table with VPERMPS.
TEXT ·turboValues3Y(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ tab+16(FP), DX
	MOVQ n+24(FP), CX
	VMOVUPS (DX), Y0
	VMOVDQU turboShift3<>(SB), Y1
	VPBROADCASTD turboSeven<>(SB), Y2
loop:
	VPBROADCASTD (SI), Y3
	VPSRLVD Y1, Y3, Y3
	VPAND Y2, Y3, Y3
	VPERMPS Y0, Y3, Y4
	VMOVUPS Y4, (DI)
	ADDQ $3, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ loop
	VZEROUPPER
	RET

// func turboKeys8Y(pan *float32, k0 *byte, stride int, sm *float32, dk int)
//
// Dequantizes 8 keys of 8-bit codes (key i's row at k0 + i·stride, dk a
// multiple of 32) into a Kᵀ panel: pan[t·32 + i] = float32(code)·s + m,
// the multiply and the add rounded apart (turbo.go's portable loop), s and
// m of key i and group g at sm[16g + i] and sm[16g + 8 + i]. Each run of 8
// dims of the 8 keys is widened, transposed 8×8 in registers, scaled and
// stored as 8 panel rows.
TEXT ·turboKeys8Y(SB), NOSPLIT, $0-40
	MOVQ pan+0(FP), DI
	MOVQ k0+8(FP), AX
	MOVQ stride+16(FP), CX
	MOVQ sm+24(FP), R12
	MOVQ dk+32(FP), DX
	LEAQ (AX)(CX*1), BX
	LEAQ (BX)(CX*1), SI
	LEAQ (SI)(CX*1), R8
	LEAQ (R8)(CX*1), R9
	LEAQ (R9)(CX*1), R10
	LEAQ (R10)(CX*1), R11
	LEAQ (R11)(CX*1), R13
	SHRQ $3, DX
	XORQ CX, CX
chunk:
	VPMOVSXBD (AX), Y0
	VPMOVSXBD (BX), Y1
	VPMOVSXBD (SI), Y2
	VPMOVSXBD (R8), Y3
	VPMOVSXBD (R9), Y4
	VPMOVSXBD (R10), Y5
	VPMOVSXBD (R11), Y6
	VPMOVSXBD (R13), Y7
	VCVTDQ2PS Y0, Y0
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y2, Y2
	VCVTDQ2PS Y3, Y3
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VCVTDQ2PS Y6, Y6
	VCVTDQ2PS Y7, Y7
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	VMOVUPS (R12), Y0
	VMOVUPS 32(R12), Y1
	VMULPS Y0, Y8, Y8
	VMULPS Y0, Y9, Y9
	VMULPS Y0, Y10, Y10
	VMULPS Y0, Y11, Y11
	VMULPS Y0, Y12, Y12
	VMULPS Y0, Y13, Y13
	VMULPS Y0, Y14, Y14
	VMULPS Y0, Y15, Y15
	VADDPS Y1, Y8, Y8
	VADDPS Y1, Y9, Y9
	VADDPS Y1, Y10, Y10
	VADDPS Y1, Y11, Y11
	VADDPS Y1, Y12, Y12
	VADDPS Y1, Y13, Y13
	VADDPS Y1, Y14, Y14
	VADDPS Y1, Y15, Y15
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, 128(DI)
	VMOVUPS Y10, 256(DI)
	VMOVUPS Y11, 384(DI)
	VMOVUPS Y12, 512(DI)
	VMOVUPS Y13, 640(DI)
	VMOVUPS Y14, 768(DI)
	VMOVUPS Y15, 896(DI)
	ADDQ $1024, DI
	ADDQ $8, AX
	ADDQ $8, BX
	ADDQ $8, SI
	ADDQ $8, R8
	ADDQ $8, R9
	ADDQ $8, R10
	ADDQ $8, R11
	ADDQ $8, R13
	INCQ CX
	TESTQ $3, CX
	JNZ next
	ADDQ $64, R12 // a new group of 32 dims: its scales and biases
next:
	CMPQ CX, DX
	JLT chunk
	VZEROUPPER
	RET
