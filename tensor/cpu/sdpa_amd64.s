#include "textflag.h"

// Attention helpers (AVX-512); Go callers check hasAVX512, see
// sdpa_amd64.go.

// func sdpaMaxAVX512(sc *float32, n int) (m float32, ok bool)
//
// The largest of n (≥ 1) floats, −Inf-padded in a masked tail; ok is
// false when a NaN was seen or the max is zero (the caller then takes the
// Go loop, whose NaN and ±0 rules the instruction does not follow).
TEXT ·sdpaMaxAVX512(SB), NOSPLIT, $0-21
	MOVQ sc+0(FP), SI
	MOVQ n+8(FP), CX
	MOVL $0xff800000, AX
	VPBROADCASTD AX, Z1  // running max
	VMOVAPS Z1, Z2       // −Inf, the tail's fill
	KXORW K2, K2, K2     // NaN lanes seen
sm_loop:
	CMPQ    CX, $16
	JLT     sm_tail
	VMOVUPS (SI), Z0
	VCMPPS  $3, Z0, Z0, K1
	KORW    K1, K2, K2
	VMAXPS  Z0, Z1, Z1
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     sm_loop
sm_tail:
	TESTQ CX, CX
	JZ    sm_reduce
	MOVL  $1, BX
	SHLL  CX, BX
	DECL  BX
	KMOVW BX, K3
	VMOVAPS Z2, Z0
	VMOVUPS (SI), K3, Z0
	VCMPPS  $3, Z0, Z0, K1
	KORW    K1, K2, K2
	VMAXPS  Z0, Z1, Z1
sm_reduce:
	VEXTRACTF32X8 $1, Z1, Y3
	VMAXPS        Y3, Y1, Y1
	VEXTRACTF128  $1, Y1, X3
	VMAXPS        X3, X1, X1
	VPERMILPS     $0x4e, X1, X3
	VMAXPS        X3, X1, X1
	VPERMILPS     $0xb1, X1, X3
	VMAXPS        X3, X1, X1
	VMOVSS        X1, m+16(FP)
	MOVB          $1, ok+20(FP)
	KORTESTW      K2, K2
	JNZ           sm_bad
	VXORPS        X3, X3, X3
	VUCOMISS      X3, X1
	JNE           sm_done
sm_bad:
	MOVB $0, ok+20(FP)
sm_done:
	VZEROUPPER
	RET

// func sdpaPanelSums(pan *float32, nk int, sums *[8]float32)
//
// sums[r] = Σ_j pan[8j+r] for j < nk, each lane from +0 in j order (the
// order a row's own loop adds its probabilities in).
TEXT ·sdpaPanelSums(SB), NOSPLIT, $0-24
	MOVQ pan+0(FP), SI
	MOVQ nk+8(FP), CX
	MOVQ sums+16(FP), DI
	VXORPS Y0, Y0, Y0
	TESTQ  CX, CX
	JZ     ps_done
ps_loop:
	VADDPS (SI), Y0, Y0
	ADDQ   $32, SI
	DECQ   CX
	JNZ    ps_loop
ps_done:
	VMOVUPS Y0, (DI)
	VZEROUPPER
	RET
