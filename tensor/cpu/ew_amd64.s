#include "textflag.h"
#include "bf16_amd64.h"

// Element-wise binary kernels (AVX-512 F/BW): Go callers check hasAVX512
// and pass n a multiple of 16; see ew_amd64.go.

// BF16LOAD widens the 16 bfloat16 values at p into Z.
#define BF16LOAD(p, Z) \
	VPMOVZXWD p, Z \
	VPSLLD    $16, Z, Z

#define BF16LOOP(label, OP) \
label: \
	BF16LOAD((SI), Z4) \
	BF16LOAD((DX), Z5) \
	OP        Z5, Z4, Z0 \
	BF16ROUND \
	ADDQ $32, SI \
	ADDQ $32, DX \
	ADDQ $32, DI \
	DECQ CX \
	JNZ  label \
	JMP  bb_end

// func ewBinBF16(op int, o, x, y *uint16, n int)
//
// o = x op y over n bfloat16 values (op 0 add, 1 sub, 2 mul), each
// computed in float32 and rounded as tensor.F32ToBF16.
TEXT ·ewBinBF16(SB), NOSPLIT, $0-40
	MOVQ op+0(FP), AX
	MOVQ o+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ y+24(FP), DX
	MOVQ n+32(FP), CX
	SHRQ $4, CX
	JZ   bb_done
	BF16CONSTS
	CMPQ AX, $1
	JEQ  bb_sub
	JGT  bb_mul
	BF16LOOP(bb_add, VADDPS)
	BF16LOOP(bb_sub, VSUBPS)
	BF16LOOP(bb_mul, VMULPS)
bb_end:
	VZEROUPPER
bb_done:
	RET

#define F32LOOP(label, OP) \
label: \
	VMOVUPS (SI), Z4 \
	OP      (DX), Z4, Z0 \
	VMOVUPS Z0, (DI) \
	ADDQ $64, SI \
	ADDQ $64, DX \
	ADDQ $64, DI \
	DECQ CX \
	JNZ  label \
	JMP  fb_end

// func ewBinF32(op int, o, x, y *float32, n int)
//
// o = x op y over n float32 values (op 0 add, 1 sub, 2 mul, 3 div).
TEXT ·ewBinF32(SB), NOSPLIT, $0-40
	MOVQ op+0(FP), AX
	MOVQ o+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ y+24(FP), DX
	MOVQ n+32(FP), CX
	SHRQ $4, CX
	JZ   fb_done
	CMPQ AX, $1
	JEQ  fb_sub
	CMPQ AX, $2
	JEQ  fb_mul
	JGT  fb_div
	F32LOOP(fb_add, VADDPS)
	F32LOOP(fb_sub, VSUBPS)
	F32LOOP(fb_mul, VMULPS)
	F32LOOP(fb_div, VDIVPS)
fb_end:
	VZEROUPPER
fb_done:
	RET

// func ewSumSq8(acc *[8]float32, v *float32, n int)
//
// acc[l] += v[i+l]·v[i+l] (each product rounded, then added) for i = 0,
// 8, … < n (n a multiple of 8): normSumSq's eight lanes in one register.
TEXT ·ewSumSq8(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   sq_done
	VMOVUPS (DI), Y0
sq_loop:
	VMOVUPS (SI), Y1
	VMULPS  Y1, Y1, Y1
	VADDPS  Y1, Y0, Y0
	ADDQ    $32, SI
	DECQ    CX
	JNZ     sq_loop
	VMOVUPS Y0, (DI)
	VZEROUPPER
sq_done:
	RET

// func ewScaleF32(o, x *float32, a float32, n int)
//
// o = x·a over n float32 values (n a multiple of 16).
TEXT ·ewScaleF32(SB), NOSPLIT, $0-32
	MOVQ o+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $4, CX
	JZ   sc_done
	VBROADCASTSS a+16(FP), Z1
sc_loop:
	VMULPS  (SI), Z1, Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     sc_loop
	VZEROUPPER
sc_done:
	RET
