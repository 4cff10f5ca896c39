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
