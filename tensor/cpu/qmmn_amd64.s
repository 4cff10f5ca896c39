#include "textflag.h"

// Non-transposed quantized matmul kernel (see qmmn.go for the layouts and
// the precision argument).
//
// One call runs nk packed rows of one 32-column block: per row k the 32
// codes are widened to float32 (4-bit: VPMOVZXBD of 16 bytes gives one
// byte per lane; its low nibble is the even column, its high nibble the
// odd one, so Z0 holds columns 0, 2, …, 30 and Z1 columns 1, 3, …, 31;
// 8-bit: two VPMOVZXBD, columns in order), dequantized in registers as
// s·q + b (one FMA, the block lies in one group), and added into the
// rows × 2 accumulators Z16..Z31 with x[m, k] broadcast from the
// transposed x chunk (8 floats per k). The accumulators live in acc
// (8 rows × 32 floats) before and after the call.

// DEQ4 and DEQ8 leave row k's dequantized block in Z0, Z1 (Z4 = 0xF).
#define DEQ4 \
	VPMOVZXBD    (SI), Z0 \
	VPSRLD       $4, Z0, Z1 \
	VPANDD       Z4, Z0, Z0 \
	VCVTDQ2PS    Z0, Z0 \
	VCVTDQ2PS    Z1, Z1 \
	VBROADCASTSS (R8), Z2 \
	VBROADCASTSS (R9), Z3 \
	VFMADD213PS  Z3, Z2, Z0 \
	VFMADD213PS  Z3, Z2, Z1

#define DEQ8 \
	VPMOVZXBD    (SI), Z0 \
	VPMOVZXBD    16(SI), Z1 \
	VCVTDQ2PS    Z0, Z0 \
	VCVTDQ2PS    Z1, Z1 \
	VBROADCASTSS (R8), Z2 \
	VBROADCASTSS (R9), Z3 \
	VFMADD213PS  Z3, Z2, Z0 \
	VFMADD213PS  Z3, Z2, Z1

// ROW adds the block times x[m, k] (at off(DX)) into accumulators a, b.
#define ROW(off, a, b) \
	VFMADD231PS.BCST off(DX), Z0, a \
	VFMADD231PS.BCST off(DX), Z1, b

// STEPK moves to the next packed row, scale, bias and x column.
#define STEPK \
	ADDQ R10, SI \
	ADDQ R11, R8 \
	ADDQ R11, R9 \
	ADDQ $32, DX

// func qmmNKern(w *byte, ldw int, xt, s, b *float32, lds, nk, rows int, acc *float32, bits int)
TEXT ·qmmNKern(SB), NOSPLIT, $0-80
	MOVQ w+0(FP), SI
	MOVQ ldw+8(FP), R10
	MOVQ xt+16(FP), DX
	MOVQ s+24(FP), R8
	MOVQ b+32(FP), R9
	MOVQ lds+40(FP), R11
	MOVQ nk+48(FP), CX
	MOVQ rows+56(FP), BX
	MOVQ acc+64(FP), DI
	MOVQ bits+72(FP), AX
	MOVL $15, R12
	VPBROADCASTD R12, Z4
	VMOVUPS 0(DI), Z16
	VMOVUPS 64(DI), Z17
	VMOVUPS 128(DI), Z18
	VMOVUPS 192(DI), Z19
	VMOVUPS 256(DI), Z20
	VMOVUPS 320(DI), Z21
	VMOVUPS 384(DI), Z22
	VMOVUPS 448(DI), Z23
	VMOVUPS 512(DI), Z24
	VMOVUPS 576(DI), Z25
	VMOVUPS 640(DI), Z26
	VMOVUPS 704(DI), Z27
	VMOVUPS 768(DI), Z28
	VMOVUPS 832(DI), Z29
	VMOVUPS 896(DI), Z30
	VMOVUPS 960(DI), Z31
	TESTQ CX, CX
	JZ    done
	CMPQ AX, $8
	JEQ  bits8
	CMPQ BX, $1
	JEQ  b4r1
	CMPQ BX, $2
	JEQ  b4r2
	CMPQ BX, $3
	JEQ  b4r3
	CMPQ BX, $4
	JEQ  b4r4
	CMPQ BX, $5
	JEQ  b4r5
	CMPQ BX, $6
	JEQ  b4r6
	CMPQ BX, $7
	JEQ  b4r7
	CMPQ BX, $8
	JEQ  b4r8
	JMP  done
bits8:
	CMPQ BX, $1
	JEQ  b8r1
	CMPQ BX, $2
	JEQ  b8r2
	CMPQ BX, $3
	JEQ  b8r3
	CMPQ BX, $4
	JEQ  b8r4
	CMPQ BX, $5
	JEQ  b8r5
	CMPQ BX, $6
	JEQ  b8r6
	CMPQ BX, $7
	JEQ  b8r7
	CMPQ BX, $8
	JEQ  b8r8
	JMP  done
b4r1:
	DEQ4
	ROW(0, Z16, Z17)
	STEPK
	DECQ CX
	JNZ  b4r1
	JMP  done
b4r2:
	DEQ4
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	STEPK
	DECQ CX
	JNZ  b4r2
	JMP  done
b4r3:
	DEQ4
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	STEPK
	DECQ CX
	JNZ  b4r3
	JMP  done
b4r4:
	DEQ4
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	STEPK
	DECQ CX
	JNZ  b4r4
	JMP  done
b4r5:
	DEQ4
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	ROW(16, Z24, Z25)
	STEPK
	DECQ CX
	JNZ  b4r5
	JMP  done
b4r6:
	DEQ4
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	ROW(16, Z24, Z25)
	ROW(20, Z26, Z27)
	STEPK
	DECQ CX
	JNZ  b4r6
	JMP  done
b4r7:
	DEQ4
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	ROW(16, Z24, Z25)
	ROW(20, Z26, Z27)
	ROW(24, Z28, Z29)
	STEPK
	DECQ CX
	JNZ  b4r7
	JMP  done
b4r8:
	DEQ4
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	ROW(16, Z24, Z25)
	ROW(20, Z26, Z27)
	ROW(24, Z28, Z29)
	ROW(28, Z30, Z31)
	STEPK
	DECQ CX
	JNZ  b4r8
	JMP  done
b8r1:
	DEQ8
	ROW(0, Z16, Z17)
	STEPK
	DECQ CX
	JNZ  b8r1
	JMP  done
b8r2:
	DEQ8
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	STEPK
	DECQ CX
	JNZ  b8r2
	JMP  done
b8r3:
	DEQ8
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	STEPK
	DECQ CX
	JNZ  b8r3
	JMP  done
b8r4:
	DEQ8
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	STEPK
	DECQ CX
	JNZ  b8r4
	JMP  done
b8r5:
	DEQ8
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	ROW(16, Z24, Z25)
	STEPK
	DECQ CX
	JNZ  b8r5
	JMP  done
b8r6:
	DEQ8
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	ROW(16, Z24, Z25)
	ROW(20, Z26, Z27)
	STEPK
	DECQ CX
	JNZ  b8r6
	JMP  done
b8r7:
	DEQ8
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	ROW(16, Z24, Z25)
	ROW(20, Z26, Z27)
	ROW(24, Z28, Z29)
	STEPK
	DECQ CX
	JNZ  b8r7
	JMP  done
b8r8:
	DEQ8
	ROW(0, Z16, Z17)
	ROW(4, Z18, Z19)
	ROW(8, Z20, Z21)
	ROW(12, Z22, Z23)
	ROW(16, Z24, Z25)
	ROW(20, Z26, Z27)
	ROW(24, Z28, Z29)
	ROW(28, Z30, Z31)
	STEPK
	DECQ CX
	JNZ  b8r8
	JMP  done
done:
	VMOVUPS Z16, 0(DI)
	VMOVUPS Z17, 64(DI)
	VMOVUPS Z18, 128(DI)
	VMOVUPS Z19, 192(DI)
	VMOVUPS Z20, 256(DI)
	VMOVUPS Z21, 320(DI)
	VMOVUPS Z22, 384(DI)
	VMOVUPS Z23, 448(DI)
	VMOVUPS Z24, 512(DI)
	VMOVUPS Z25, 576(DI)
	VMOVUPS Z26, 640(DI)
	VMOVUPS Z27, 704(DI)
	VMOVUPS Z28, 768(DI)
	VMOVUPS Z29, 832(DI)
	VMOVUPS Z30, 896(DI)
	VMOVUPS Z31, 960(DI)
	VZEROUPPER
	RET
