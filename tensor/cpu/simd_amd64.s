#include "textflag.h"
#include "bf16_amd64.h"

// AVX-512 kernels for matmul and quantized matmul. Go callers check
// hasAVX512 first; see simd_amd64.go for the contracts.

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// func cvtBF16ToF32(dst []float32, src []uint16)
// Converts len(dst) values (src must be at least as long).
TEXT ·cvtBF16ToF32(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
bf_loop16:
	CMPQ CX, $16
	JLT  bf_tail
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       bf_loop16
bf_tail:
	TESTQ CX, CX
	JZ    bf_done
	MOVWLZX (SI), AX
	SHLL    $16, AX
	MOVL    AX, (DI)
	ADDQ    $2, SI
	ADDQ    $4, DI
	DECQ    CX
	JMP     bf_tail
bf_done:
	VZEROUPPER
	RET

// func cvtF16ToF32(dst []float32, src []uint16)
TEXT ·cvtF16ToF32(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
hf_loop16:
	CMPQ CX, $16
	JLT  hf_tail
	VCVTPH2PS (SI), Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       hf_loop16
hf_tail:
	TESTQ CX, CX
	JZ    hf_done
	MOVWLZX   (SI), AX
	VMOVD     AX, X0
	VCVTPH2PS X0, X0
	VMOVSS    X0, (DI)
	ADDQ      $2, SI
	ADDQ      $4, DI
	DECQ      CX
	JMP       hf_tail
hf_done:
	VZEROUPPER
	RET

// HSUM reduces the 16 lanes of zmm Z (whose low halves are Y and X) into X12.
#define HSUM(Z, Y) \
	VEXTRACTF64X4 $1, Z, Y12 \
	VADDPS        Y12, Y, Y12 \
	VEXTRACTF128  $1, Y12, X13 \
	VADDPS        X13, X12, X12 \
	VHADDPS       X12, X12, X12 \
	VHADDPS       X12, X12, X12

// func qdot4(w *byte, x *float32, s, b, iota *float32, ng, cpg int) float32
//
// One row of 4-bit codes against one permuted x row: ng groups of cpg
// chunks; a chunk is 16 bytes (32 codes) and 32 x values stored as the 16
// even-indexed ones then the 16 odd-indexed ones, matching low and high
// nibbles. Each group's 16 possible dequantized values s·i + b form a
// table, and VPERMPS (which reads only the low 4 bits of each index) turns
// codes straight into weights: no masking and no integer conversion.
TEXT ·qdot4(SB), NOSPLIT, $0-60
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DX
	MOVQ s+16(FP), R8
	MOVQ b+24(FP), R9
	MOVQ iota+32(FP), R10
	MOVQ ng+40(FP), CX
	MOVQ cpg+48(FP), R11
	VMOVUPS (R10), Z14
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
qd_group:
	VBROADCASTSS (R8), Z4
	VBROADCASTSS (R9), Z5
	VFMADD231PS  Z14, Z4, Z5 // table: s·i + b
	MOVQ R11, BX
qd_chunk:
	VPMOVZXBD   (SI), Z0
	VPSRLD      $4, Z0, Z1
	VPERMPS     Z5, Z0, Z0
	VPERMPS     Z5, Z1, Z1
	VFMADD231PS (DX), Z0, Z2
	VFMADD231PS 64(DX), Z1, Z3
	ADDQ        $16, SI
	ADDQ        $128, DX
	DECQ        BX
	JNZ         qd_chunk
	ADDQ         $4, R8
	ADDQ         $4, R9
	DECQ         CX
	JNZ          qd_group
	VADDPS Z2, Z3, Z2
	HSUM(Z2, Y2)
	VMOVSS X12, ret+56(FP)
	VZEROUPPER
	RET

// ROW8 accumulates the dequantized chunk (Z8 even, Z9 odd codes) against
// row m of an 8-row interleaved x block, into the row's even and odd
// accumulators (as qdot4 does for one row).
#define ROW8(off, ae, ao) \
	VFMADD231PS off(DX), Z8, ae \
	VFMADD231PS (off+64)(DX), Z9, ao

// STORE8 reduces a row's accumulators as qdot4 does and stores the sum at
// DI, then steps DI by R12.
#define STORE8(ae, ao, Y) \
	VADDPS ao, ae, ae \
	HSUM(ae, Y) \
	VMOVSS X12, (DI) \
	ADDQ   R12, DI

// func qgemm4x8(w *byte, x *float32, s, b *float32, ng, cpg int, out *float32, ldo int)
//
// One row of 4-bit codes against 8 x rows at once. x holds, per chunk, the
// 8 rows' permuted 32 values (1 KiB per chunk); s and b hold a scale and
// a bias per group. The chunk is dequantized once (s·q + b) and reused by the 8
// rows. out[m·ldo] = the dot product of x row m (ldo in elements), each
// computed in exactly qdot4's order (even and odd codes in two
// accumulators, added, then the same horizontal sum), so a row gives the
// same bits whichever kernel takes it.
TEXT ·qgemm4x8(SB), NOSPLIT, $0-64
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DX
	MOVQ s+16(FP), R8
	MOVQ b+24(FP), R9
	MOVQ ng+32(FP), CX
	MOVQ cpg+40(FP), R11
	MOVQ out+48(FP), DI
	MOVQ ldo+56(FP), R12
	SHLQ $2, R12
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z24, Z24, Z24
	VPXORD Z25, Z25, Z25
	VPXORD Z26, Z26, Z26
	VPXORD Z27, Z27, Z27
	VPXORD Z28, Z28, Z28
	VPXORD Z29, Z29, Z29
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31
	MOVL   $0x0F, AX
	VPBROADCASTD AX, Z15
q8_group:
	VBROADCASTSS (R8), Z10
	VBROADCASTSS (R9), Z11
	MOVQ R11, BX
q8_chunk:
	VPMOVZXBD   (SI), Z8
	VPSRLD      $4, Z8, Z9
	VPANDD      Z15, Z8, Z8
	VCVTDQ2PS   Z8, Z8
	VCVTDQ2PS   Z9, Z9
	VFMADD132PS Z10, Z11, Z8
	VFMADD132PS Z10, Z11, Z9
	ROW8(0, Z16, Z17)
	ROW8(128, Z18, Z19)
	ROW8(256, Z20, Z21)
	ROW8(384, Z22, Z23)
	ROW8(512, Z24, Z25)
	ROW8(640, Z26, Z27)
	ROW8(768, Z28, Z29)
	ROW8(896, Z30, Z31)
	ADDQ $16, SI
	ADDQ $1024, DX
	DECQ BX
	JNZ  q8_chunk
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ  q8_group
	STORE8(Z16, Z17, Y16)
	STORE8(Z18, Z19, Y18)
	STORE8(Z20, Z21, Y20)
	STORE8(Z22, Z23, Y22)
	STORE8(Z24, Z25, Y24)
	STORE8(Z26, Z27, Y26)
	STORE8(Z28, Z29, Y28)
	STORE8(Z30, Z31, Y30)
	VZEROUPPER
	RET

// ROWK multiplies broadcast A value off(SI) by the two B vectors into
// the accumulators of one row.
#define ROWK(off, t, c0, c1) \
	VBROADCASTSS off(SI), t \
	VFMADD231PS  t, Z16, c0 \
	VFMADD231PS  t, Z17, c1

// CROW adds one row of accumulators into C at DI and steps DI by R8.
#define CROW(c0, c1) \
	VADDPS  (DI), c0, c0 \
	VMOVUPS c0, (DI) \
	VADDPS  64(DI), c1, c1 \
	VMOVUPS c1, 64(DI) \
	ADDQ    R8, DI

// func sgemm8x32(kc int, a, b, c *float32, ldc int)
//
// C[0:8][0:32] += A·B for a packed 8×kc panel of A (8 values per k) and a
// packed kc×32 panel of B (32 values per k); C rows are ldc floats apart.
TEXT ·sgemm8x32(SB), NOSPLIT, $0-40
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	TESTQ CX, CX
	JZ    sg_store
sg_loop:
	VMOVUPS (DX), Z16
	VMOVUPS 64(DX), Z17
	ROWK(0, Z18, Z0, Z1)
	ROWK(4, Z19, Z2, Z3)
	ROWK(8, Z20, Z4, Z5)
	ROWK(12, Z21, Z6, Z7)
	ROWK(16, Z22, Z8, Z9)
	ROWK(20, Z23, Z10, Z11)
	ROWK(24, Z24, Z12, Z13)
	ROWK(28, Z25, Z14, Z15)
	ADDQ $32, SI
	ADDQ $128, DX
	DECQ CX
	JNZ  sg_loop
sg_store:
	CROW(Z0, Z1)
	CROW(Z2, Z3)
	CROW(Z4, Z5)
	CROW(Z6, Z7)
	CROW(Z8, Z9)
	CROW(Z10, Z11)
	CROW(Z12, Z13)
	CROW(Z14, Z15)
	VZEROUPPER
	RET

// func sgemm8x32B(kc int, a, b *float32, ldb int, c *float32, ldc int)
//
// sgemm8x32 with B's rows ldb floats apart (a row-major kc×32 window of a
// wider matrix instead of a packed panel): the same products and sums in
// the same order, so the same bits.
TEXT ·sgemm8x32B(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ ldb+24(FP), R9
	SHLQ $2, R9
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	TESTQ CX, CX
	JZ    sgb_store
sgb_loop:
	VMOVUPS (DX), Z16
	VMOVUPS 64(DX), Z17
	ROWK(0, Z18, Z0, Z1)
	ROWK(4, Z19, Z2, Z3)
	ROWK(8, Z20, Z4, Z5)
	ROWK(12, Z21, Z6, Z7)
	ROWK(16, Z22, Z8, Z9)
	ROWK(20, Z23, Z10, Z11)
	ROWK(24, Z24, Z12, Z13)
	ROWK(28, Z25, Z14, Z15)
	ADDQ $32, SI
	ADDQ R9, DX
	DECQ CX
	JNZ  sgb_loop
sgb_store:
	CROW(Z0, Z1)
	CROW(Z2, Z3)
	CROW(Z4, Z5)
	CROW(Z6, Z7)
	CROW(Z8, Z9)
	CROW(Z10, Z11)
	CROW(Z12, Z13)
	CROW(Z14, Z15)
	VZEROUPPER
	RET

// func sgemm4x32B(kc int, a, b *float32, ldb int, c *float32, ldc int)
//
// sgemm8x32B for the first 4 rows of the 8-row A panel only (A keeps its
// 8 values per k; C rows 4..7 are not touched): each of those rows gets
// the bits sgemm8x32B gives it.
TEXT ·sgemm4x32B(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ ldb+24(FP), R9
	SHLQ $2, R9
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	TESTQ CX, CX
	JZ    sg4_store
sg4_loop:
	VMOVUPS (DX), Z16
	VMOVUPS 64(DX), Z17
	ROWK(0, Z18, Z0, Z1)
	ROWK(4, Z19, Z2, Z3)
	ROWK(8, Z20, Z4, Z5)
	ROWK(12, Z21, Z6, Z7)
	ADDQ $32, SI
	ADDQ R9, DX
	DECQ CX
	JNZ  sg4_loop
sg4_store:
	CROW(Z0, Z1)
	CROW(Z2, Z3)
	CROW(Z4, Z5)
	CROW(Z6, Z7)
	VZEROUPPER
	RET

// BHLOAD widens the 32 bfloat16 values of B's row at DX into Z16, Z17
// (exactly: bfloat16 is float32's top half).
#define BHLOAD \
	VPMOVZXWD (DX), Z16 \
	VPSLLD    $16, Z16, Z16 \
	VPMOVZXWD 32(DX), Z17 \
	VPSLLD    $16, Z17, Z17

// func sgemm8x32BH(kc int, a *float32, b *uint16, ldb int, c *float32, ldc int)
//
// sgemm8x32B with B in bfloat16 (rows ldb elements apart), each element
// widened as it is loaded: the products and sums of sgemm8x32B on the
// widened B, so the same bits.
TEXT ·sgemm8x32BH(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ ldb+24(FP), R9
	SHLQ $1, R9
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	TESTQ CX, CX
	JZ    sgh_store
sgh_loop:
	BHLOAD
	ROWK(0, Z18, Z0, Z1)
	ROWK(4, Z19, Z2, Z3)
	ROWK(8, Z20, Z4, Z5)
	ROWK(12, Z21, Z6, Z7)
	ROWK(16, Z22, Z8, Z9)
	ROWK(20, Z23, Z10, Z11)
	ROWK(24, Z24, Z12, Z13)
	ROWK(28, Z25, Z14, Z15)
	ADDQ $32, SI
	ADDQ R9, DX
	DECQ CX
	JNZ  sgh_loop
sgh_store:
	CROW(Z0, Z1)
	CROW(Z2, Z3)
	CROW(Z4, Z5)
	CROW(Z6, Z7)
	CROW(Z8, Z9)
	CROW(Z10, Z11)
	CROW(Z12, Z13)
	CROW(Z14, Z15)
	VZEROUPPER
	RET

// func sgemm4x32BH(kc int, a *float32, b *uint16, ldb int, c *float32, ldc int)
//
// sgemm4x32B with B in bfloat16, as sgemm8x32BH is to sgemm8x32B.
TEXT ·sgemm4x32BH(SB), NOSPLIT, $0-48
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ ldb+24(FP), R9
	SHLQ $1, R9
	MOVQ c+32(FP), DI
	MOVQ ldc+40(FP), R8
	SHLQ $2, R8
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	TESTQ CX, CX
	JZ    sg4h_store
sg4h_loop:
	BHLOAD
	ROWK(0, Z18, Z0, Z1)
	ROWK(4, Z19, Z2, Z3)
	ROWK(8, Z20, Z4, Z5)
	ROWK(12, Z21, Z6, Z7)
	ADDQ $32, SI
	ADDQ R9, DX
	DECQ CX
	JNZ  sg4h_loop
sg4h_store:
	CROW(Z0, Z1)
	CROW(Z2, Z3)
	CROW(Z4, Z5)
	CROW(Z6, Z7)
	VZEROUPPER
	RET

// TAB builds row r's group table (s·i + b) into t from scale/bias addresses.
#define TAB(saddr, baddr, t) \
	VBROADCASTSS saddr, Z26 \
	VBROADCASTSS baddr, t \
	VFMADD231PS  Z14, Z26, t

// ROW4 accumulates one row's chunk (codes at addr, table t) into a0/a1.
#define ROW4(addr, t, a0, a1) \
	VPMOVZXBD   addr, Z0 \
	VPSRLD      $4, Z0, Z1 \
	VPERMPS     t, Z0, Z0 \
	VPERMPS     t, Z1, Z1 \
	VFMADD231PS Z24, Z0, a0 \
	VFMADD231PS Z25, Z1, a1

// OUT4 reduces a row's accumulators and stores the float at off(DI).
#define OUT4(a0, a1, y0, off) \
	VADDPS a1, a0, a0 \
	HSUM(a0, y0) \
	VMOVSS X12, off(DI)

// func qdot4x4(w *byte, bpr int, x *float32, s, b *float32, iota *float32, ng, cpg int, out *float32)
//
// qdot4 for 4 consecutive rows (bpr bytes apart; scales and biases ng
// apart) sharing each x load; out receives the 4 results.
TEXT ·qdot4x4(SB), NOSPLIT, $0-72
	MOVQ w+0(FP), SI
	MOVQ bpr+8(FP), R13
	MOVQ x+16(FP), DX
	MOVQ s+24(FP), R8
	MOVQ b+32(FP), R9
	MOVQ iota+40(FP), R10
	MOVQ ng+48(FP), CX
	MOVQ cpg+56(FP), R11
	MOVQ out+64(FP), DI
	LEAQ (R13)(R13*2), R14
	MOVQ CX, R15
	SHLQ $2, R15
	LEAQ (R15)(R15*2), R12
	VMOVUPS (R10), Z14
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
q44_group:
	TAB((R8), (R9), Z4)
	TAB((R8)(R15*1), (R9)(R15*1), Z5)
	TAB((R8)(R15*2), (R9)(R15*2), Z6)
	TAB((R8)(R12*1), (R9)(R12*1), Z7)
	MOVQ R11, BX
q44_chunk:
	VMOVUPS (DX), Z24
	VMOVUPS 64(DX), Z25
	ROW4((SI), Z4, Z16, Z17)
	ROW4((SI)(R13*1), Z5, Z18, Z19)
	ROW4((SI)(R13*2), Z6, Z20, Z21)
	ROW4((SI)(R14*1), Z7, Z22, Z23)
	ADDQ $16, SI
	ADDQ $128, DX
	DECQ BX
	JNZ  q44_chunk
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ  q44_group
	OUT4(Z16, Z17, Y16, 0)
	OUT4(Z18, Z19, Y18, 4)
	OUT4(Z20, Z21, Y20, 8)
	OUT4(Z22, Z23, Y22, 12)
	VZEROUPPER
	RET

// func cvtF32ToBF16(dst *uint16, src *float32, n int)
//
// Rounds n (a multiple of 16) floats to bfloat16 exactly as
// tensor.F32ToBF16: to nearest even, NaNs kept quiet (| 0x40).
TEXT ·cvtF32ToBF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   cb_done
	BF16CONSTS
cb_loop:
	VMOVDQU32 (SI), Z0
	BF16ROUND
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  cb_loop
	VZEROUPPER
cb_done:
	RET

// func cvtF32ToF16(dst *uint16, src *float32, n int)
// Rounds n floats (a multiple of 16) to half precision as tensor.F32ToF16
// does: VCVTPS2PH with round-to-nearest-even (imm8 0, the MXCSR not
// consulted), after every NaN is made the canonical quiet NaN of its sign
// (tensor.F32ToF16 writes sign|0x7e00 for any NaN; the instruction would
// keep the payload's top bits).
TEXT ·cvtF32ToF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   ch_done
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z29
	MOVL $0x7fc00000, AX
	VPBROADCASTD AX, Z28
ch_loop:
	VMOVUPS   (SI), Z0
	VCMPPS    $3, Z0, Z0, K1        // unordered: NaN lanes
	VPANDD    Z29, Z0, Z1           // the sign
	VPORD     Z28, Z1, K1, Z0       // NaN lanes: sign | quiet NaN, no payload
	VCVTPS2PH $0, Z0, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  ch_loop
	VZEROUPPER
ch_done:
	RET

// func prefetchL2(p *byte, n int)
// PREFETCHT1 of every 64-byte line of the n bytes at p (n > 0).
TEXT ·prefetchL2(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	LEAQ (AX)(CX*1), CX
pf_loop:
	PREFETCHT1 (AX)
	ADDQ $64, AX
	CMPQ AX, CX
	JLT pf_loop
	RET
