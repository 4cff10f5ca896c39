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

// BF16R rounds the 16 floats of Z to bfloat16 in place, leaving them as
// float32 (the value tensor.RoundTo gives): b + 0x7fff + lsb with the low
// half cleared, a NaN its top half | 0x40. Needs Z25-Z29 from BF16CONSTS
// and Z24 = 0xffff0000 (RopeRow's prologue); clobbers Z1-Z3 and K1.
#define BF16R(Z) \
	VPSRLD    $16, Z, Z1 \
	VPANDD    Z28, Z1, Z2 \
	VPADDD    Z29, Z2, Z2 \
	VPADDD    Z, Z2, Z2 \
	VPANDD    Z27, Z, Z3 \
	VPCMPUD   $6, Z26, Z3, K1 \
	VPSLLD    $16, Z25, Z3 \
	VPORD     Z3, Z, K1, Z2 \
	VPANDD    Z24, Z2, Z

// func ropeHalves(row, cos, sin *float32, half, bf16 int)
//
// Rotates the pairs (row[i], row[i+half]) for i < half (a multiple of
// 16): with each product rounded to bfloat16 when bf16 is set,
// row[i] = x1·c − x2·s and row[i+half] = x1·s + x2·c, as RoPE's loops.
TEXT ·ropeHalves(SB), NOSPLIT, $0-40
	MOVQ row+0(FP), DI
	MOVQ cos+8(FP), SI
	MOVQ sin+16(FP), DX
	MOVQ half+24(FP), CX
	MOVQ bf16+32(FP), R8
	LEAQ (DI)(CX*4), R9
	SHRQ $4, CX
	JZ   rh_done
	BF16CONSTS
	MOVL $0xffff0000, BX
	VPBROADCASTD BX, Z24
rh_loop:
	VMOVUPS (DI), Z4  // x1
	VMOVUPS (R9), Z5  // x2
	VMOVUPS (SI), Z6  // c
	VMOVUPS (DX), Z7  // s
	VMULPS  Z6, Z4, Z8  // x1·c
	VMULPS  Z7, Z5, Z9  // x2·s
	VMULPS  Z7, Z4, Z10 // x1·s
	VMULPS  Z6, Z5, Z11 // x2·c
	TESTQ   R8, R8
	JZ      rh_sums
	BF16R(Z8)
	BF16R(Z9)
	BF16R(Z10)
	BF16R(Z11)
rh_sums:
	VSUBPS  Z9, Z8, Z8
	VADDPS  Z11, Z10, Z10
	VMOVUPS Z8, (DI)
	VMOVUPS Z10, (R9)
	ADDQ    $64, DI
	ADDQ    $64, R9
	ADDQ    $64, SI
	ADDQ    $64, DX
	DECQ    CX
	JNZ     rh_loop
	VZEROUPPER
rh_done:
	RET

// func ewMaxAVX512(x *float32, n int) (m float32, clean bool)
//
// m is the largest of x[0..n) (n a positive multiple of 16) by VMAXPS
// lanes; clean reports that no element was NaN (m is meaningless then).
TEXT ·ewMaxAVX512(SB), NOSPLIT, $0-21
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Z0
	KXORW   K1, K1, K1
em_loop:
	VMOVUPS (SI), Z2
	VCMPPS  $3, Z2, Z2, K2 // unordered: NaN lanes
	KORW    K2, K1, K1
	VMAXPS  Z2, Z0, Z0
	ADDQ    $64, SI
	SUBQ    $16, CX
	JNZ     em_loop
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS  Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS  X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS  X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS  X1, X0, X0
	MOVSS   X0, m+16(FP)
	KORTESTW K1, K1
	SETEQ   clean+20(FP)
	VZEROUPPER
	RET
