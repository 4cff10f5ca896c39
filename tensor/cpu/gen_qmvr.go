//go:build ignore

// gen_qmvr writes qmvr_amd64.s, the quantized matvec kernels unrolled per
// x row count (1, 2, 4, 8) and variant (X, XL): run go generate.
package main

import (
	"fmt"
	"os"
	"strings"
)

var (
	acc0 = []int{8, 10, 12, 14, 16, 18, 20, 23}
	acc1 = []int{9, 11, 13, 15, 17, 19, 22, 24}
	rs   = []int{1, 2, 4, 8}
)

const args2 = args + ", ldw int"

const args = "w *byte, x *uint16, lo, ldx, nblk, tailw int, s *float32, ng, sblk int, sidx *int32, b, gx *float32, ldg int, out *float32, ldo, nrows, pfd, nx int, acc *float32, flags, wskip int"

// rowdot is one x row's block dot into Z5 (x at AX, residuals at AX+R10).
func rowdot(lo bool) string {
	s := "\tVPXORD Z5, Z5, Z5\n\tDPBFX(0, 0, 5)\n\tDPBFX(1, 1, 5)\n\tDPBFX(2, 2, 5)\n\tDPBFX(3, 3, 5)\n"
	if lo {
		s += "\tDPBFXL(0, 0, 5)\n\tDPBFXL(1, 1, 5)\n\tDPBFXL(2, 2, 5)\n\tDPBFXL(3, 3, 5)\n"
	}
	return s
}

// rows runs every x row of a pass against the decoded block.
func rows(r int, lo bool, fma func(i int) string) string {
	s := "\tMOVQ DX, AX\n"
	for i := range r {
		s += rowdot(lo) + fma(i)
		if i+1 < r {
			s += "\tADDQ ldx+24(FP), AX\n"
		}
	}
	return s
}

// bfScales selects the kernels being written: false reads float32 scales
// and biases (staged by the caller), true reads the weight's bfloat16 ones
// in place (the B kernels).
var bfScales bool

// lanes spreads the block's scales at addr over the lanes of Z(z): VPERMPS
// of the float32 scales by the lane→group index in Z30, or for bfloat16
// scales VPERMW by the word index in Z30 under K6 (odd words), which puts
// each lane's scale in its upper half and zeros below: the same float32.
func lanes(addr string, z int) string {
	if bfScales {
		return fmt.Sprintf("\tVPERMW.Z %s, Z30, K6, Z%d\n", addr, z)
	}
	return fmt.Sprintf("\tVPERMPS %s, Z30, Z%d\n", addr, z)
}

func block(lo bool, r int, accs []int) string {
	s := "\tVMOVDQU64 (SI), Z0\n\tCODES4X\n" + lanes("(R8)", 6)
	return s + rows(r, lo, func(i int) string { return fmt.Sprintf("\tVFMADD231PS Z6, Z5, Z%d\n", accs[i]) })
}

// The flags argument's bits (qmv.go's qmvAccLoad and qmvAccFinish).
const (
	qmvLoad   = 1 // start from the accumulators at acc instead of zeros
	qmvFinish = 2 // last chunk: tail, bias terms and outputs (else store to acc)
)

// accPtr sets AX to the accumulators of the current weight row: acc +
// j·r·128 bytes for row j of the call (DI has moved 4·j bytes from out).
func accPtr(r int) string {
	sh := map[int]int{1: 5, 2: 6, 4: 7, 8: 8}[r]
	return fmt.Sprintf("\tMOVQ DI, AX\n\tSUBQ out+104(FP), AX\n\tSHLQ $%d, AX\n\tADDQ acc+144(FP), AX\n", sh)
}

const step = "\tADDQ $64, SI\n\tADDQ $256, DX\n\tADDQ R9, R8\n"

func hsum(z int) string {
	return fmt.Sprintf("\tVEXTRACTF64X4 $1, Z%d, Y5\n\tVADDPS Y5, Y%d, Y5\n\tVEXTRACTF128 $1, Y5, X7\n"+
		"\tVADDPS X7, X5, X5\n\tVHADDPS X5, X5, X5\n\tVHADDPS X5, X5, X5\n\tVMOVSS X5, (AX)\n", z, z)
}

// hsum8 sums the lanes of four x rows' accumulators for w0 (a) and w1
// (b) together and stores each row's pair of outputs (8 bytes at DI + i·ldo):
// shuffles gather the lanes so that each add serves several vectors, and
// every vector's lanes meet in hsum's order — lanes l and l+8, then l and
// l+4, then 0+1 and 2+3, then those two — so the bits are hsum's.
func hsum8(a, b []int) string {
	s := ""
	// halves: u = [lanes 0..7 + 8..15 of v0 | of v1], for the pairs
	// (a0,a1) → Z0, (a2,a3) → Z2, (b0,b1) → Z4, (b2,b3) → Z6
	for i, v := range [][2]int{{a[0], a[1]}, {a[2], a[3]}, {b[0], b[1]}, {b[2], b[3]}} {
		l, h := 2*i, 2*i+1
		s += fmt.Sprintf("\tVSHUFF64X2 $0x44, Z%d, Z%d, Z%d\n\tVSHUFF64X2 $0xEE, Z%d, Z%d, Z%d\n\tVADDPS Z%d, Z%d, Z%d\n",
			v[1], v[0], l, v[1], v[0], h, h, l, l)
	}
	// quarters: per 128-bit lane i, row i's lanes l + l+4 (a in Z1, b in Z5)
	for _, q := range [][4]int{{0, 2, 1, 3}, {4, 6, 5, 7}} {
		s += fmt.Sprintf("\tVSHUFF32X4 $0x88, Z%d, Z%d, Z%d\n\tVSHUFF32X4 $0xDD, Z%d, Z%d, Z%d\n\tVADDPS Z%d, Z%d, Z%d\n",
			q[1], q[0], q[2], q[1], q[0], q[3], q[3], q[2], q[2])
	}
	// pairs: [a0+a1, a2+a3, b0+b1, b2+b3] per lane, then their sums: w0's
	// output in element 0, w1's in element 1
	s += "\tVSHUFPS $0x88, Z5, Z1, Z0\n\tVSHUFPS $0xDD, Z5, Z1, Z2\n\tVADDPS Z2, Z0, Z0\n"
	s += "\tVSHUFPS $0x88, Z0, Z0, Z1\n\tVSHUFPS $0xDD, Z0, Z0, Z2\n\tVADDPS Z2, Z1, Z1\n"
	s += "\tMOVQ DI, AX\n\tVMOVQ X1, (AX)\n"
	for i := 1; i < 4; i++ {
		s += fmt.Sprintf("\tADDQ ldo+112(FP), AX\n\tVEXTRACTF32X4 $%d, Z1, X2\n\tVMOVQ X2, (AX)\n", i)
	}
	return s
}

func groups(r int, a0 []int, masked bool) string {
	m, mz := "", ""
	if masked {
		m, mz = ", K3", ".Z"
	}
	var s string
	if bfScales { // BX counts bfloat16 bytes: the biases widened, gx at twice BX
		s = fmt.Sprintf("\tVPMOVZXWD%s (R12)(BX*1)%s, Z2\n\tVPSLLD $16, Z2, Z2\n\tMOVQ gx+88(FP), AX\n\tLEAQ (AX)(BX*2), AX\n", mz, m)
	} else {
		s = fmt.Sprintf("\tVMOVUPS%s (R12)(BX*1)%s, Z2\n\tMOVQ gx+88(FP), AX\n\tADDQ BX, AX\n", mz, m)
	}
	for i := range r {
		s += fmt.Sprintf("\tVMOVUPS%s (AX)%s, Z0\n\tVFMADD231PS Z2, Z0%s, Z%d\n", mz, m, m, a0[i])
		if i+1 < r {
			s += "\tADDQ ldg+96(FP), AX\n"
		}
	}
	return s
}

// The two-row kernels (qmvRows2X, qmvRows2XL) run weight rows in pairs, w0
// at SI and w1 one row (ldw bytes) on: each x vector is loaded once into a
// register and dotted with both rows' codes, halving the x reads per
// product, which bound the one-row kernels at several x rows. Per weight
// row and x row the operations and their order are the one-row kernels'
// (the same chain into Z5 for w0 and Z4 for w1, the same even/odd
// accumulators, tail, bias terms and sum), so a row's bits do not depend
// on which kernel ran it. x rows per pass: 1, 2 or 4 (qmvT uses 4).
var (
	rs2 = []int{1, 2, 4}
	// per x row: w0's ACC0, ACC1, then w1's
	p0a0 = []int{8, 9, 10, 11}
	p0a1 = []int{12, 13, 14, 15}
	p1a0 = []int{16, 17, 18, 19}
	p1a1 = []int{20, 21, 22, 23}
)

// dpRR emits VDPBF16PS zmm(m), zmm(v), zmm(r), any registers.
func dpRR(r, v, m int) string { return fmt.Sprintf("\tDPBFRR(%d, %d, %d)\n", r, v, m) }

// rows2 runs every x row of a pass against both decoded blocks; fma(i)
// accumulates row i's dots (Z5 for w0, Z4 for w1).
func rows2(r int, lo bool, fma func(i int) string) string {
	s := "\tMOVQ DX, AX\n"
	for i := range r {
		s += "\tVPXORD Z5, Z5, Z5\n\tVPXORD Z4, Z4, Z4\n"
		for j := range 4 {
			x := 28 + j%2
			s += fmt.Sprintf("\tVMOVDQU64 %d(AX), Z%d\n", 64*j, x) + dpRR(5, j, x) + dpRR(4, 24+j, x)
		}
		if lo {
			for j := range 4 {
				x := 28 + j%2
				s += fmt.Sprintf("\tVMOVDQU64 %d(AX)(R10*1), Z%d\n", 64*j, x) + dpRR(5, j, x) + dpRR(4, 24+j, x)
			}
		}
		s += fma(i)
		if i+1 < r {
			s += "\tADDQ ldx+24(FP), AX\n"
		}
	}
	return s
}

func decode2() string { return "\tCODES4X\n\tCODES4XP\n" + lanes("(R8)", 6) + lanes("(R8)(R15*1)", 7) }

// groupStep is the bytes of biases per 16 groups.
func groupStep() int {
	if bfScales {
		return 32
	}
	return 64
}

func block2(lo bool, r int, a, b []int) string {
	s := "\tVMOVDQU64 (SI), Z0\n\tVMOVDQU64 (SI)(BX*1), Z24\n" + decode2()
	return s + rows2(r, lo, func(i int) string {
		return fmt.Sprintf("\tVFMADD231PS Z6, Z5, Z%d\n\tVFMADD231PS Z7, Z4, Z%d\n", a[i], b[i])
	})
}

func genPair(w func(string), name string, lo bool) {
	fn := "qmvRows2" + name
	l := "p" + strings.ToLower(name)
	w(fmt.Sprintf("// func %s(%s)\nTEXT ·%s(SB), NOSPLIT, $0-176\n", fn, args2, fn))
	w(prologue())
	for _, r := range rs2 {
		w(fmt.Sprintf("\tCMPQ AX, $%d\n\tJEQ %s_r%d\n", r, l, r))
	}
	w(fmt.Sprintf("\tJMP %s_done\n", l))
	for _, r := range rs2 {
		p := fmt.Sprintf("%s%d", l, r)
		a0, a1, b0, b1 := p0a0[:r], p0a1[:r], p1a0[:r], p1a1[:r]
		all := [][]int{a0, a1, b0, b1}
		w(fmt.Sprintf("\n%s_r%d:\n%s_row:\n", l, r, p))
		w("\tMOVQ x+8(FP), DX\n\tMOVQ R11, R8\n\tMOVQ nblk+32(FP), CX\n\tMOVQ ldw+168(FP), BX\n")
		w(fmt.Sprintf("\tMOVQ flags+152(FP), AX\n\tTESTQ $%d, AX\n\tJNZ %s_load\n", qmvLoad, p))
		for _, set := range all {
			for _, z := range set {
				w(fmt.Sprintf("\tVPXORD Z%d, Z%d, Z%d\n", z, z, z))
			}
		}
		// accPtr is w0's accumulators; w1's follow r·128 bytes on
		w(fmt.Sprintf("\tJMP %s_pairs\n%s_load:\n", p, p) + accPtr(r))
		for i := range r {
			w(fmt.Sprintf("\tVMOVUPS %d(AX), Z%d\n\tVMOVUPS %d(AX), Z%d\n", 128*i, a0[i], 128*i+64, a1[i]))
			w(fmt.Sprintf("\tVMOVUPS %d(AX), Z%d\n\tVMOVUPS %d(AX), Z%d\n", 128*(r+i), b0[i], 128*(r+i)+64, b1[i]))
		}
		w(fmt.Sprintf("%s_pairs:\n\tCMPQ CX, $2\n\tJLT %s_one\n", p, p))
		pf := "\tPREFETCHT1 (SI)(R14*1)\n\tPREFETCHT1 64(SI)(R14*1)\n\tLEAQ (SI)(BX*1), AX\n\tPREFETCHT1 (AX)(R14*1)\n\tPREFETCHT1 64(AX)(R14*1)\n"
		w(pf)
		w(block2(lo, r, a0, b0) + step)
		w(block2(lo, r, a1, b1) + step)
		w(fmt.Sprintf("\tSUBQ $2, CX\n\tJMP %s_pairs\n%s_one:\n\tTESTQ CX, CX\n\tJZ %s_tail\n", p, p, p))
		w("\tPREFETCHT1 (SI)(R14*1)\n\tLEAQ (SI)(BX*1), AX\n\tPREFETCHT1 (AX)(R14*1)\n")
		w(block2(lo, r, a0, b0) + step)
		w(fmt.Sprintf("%s_tail:\n\tMOVQ flags+152(FP), AX\n\tTESTQ $%d, AX\n\tJNZ %s_fin\n", p, qmvFinish, p))
		w("\t// not the last chunk of the rows: keep the accumulators for the next chunk\n" + accPtr(r))
		for i := range r {
			w(fmt.Sprintf("\tVMOVUPS Z%d, %d(AX)\n\tVMOVUPS Z%d, %d(AX)\n", a0[i], 128*i, a1[i], 128*i+64))
			w(fmt.Sprintf("\tVMOVUPS Z%d, %d(AX)\n\tVMOVUPS Z%d, %d(AX)\n", b0[i], 128*(r+i), b1[i], 128*(r+i)+64))
		}
		w(fmt.Sprintf("\tJMP %s_next\n%s_fin:\n", p, p))
		w(fmt.Sprintf("\tMOVQ tailw+40(FP), CX\n\tTESTQ CX, CX\n\tJZ %s_groups\n", p))
		w("\tVMOVDQU16.Z (SI), K1, Z0\n\tVMOVDQU16.Z (SI)(BX*1), K1, Z24\n" + decode2())
		w(rows2(r, lo, func(i int) string {
			return fmt.Sprintf("\tVFMADD231PS Z6, Z5, K2, Z%d\n\tVFMADD231PS Z7, Z4, K2, Z%d\n", a1[i], b1[i])
		}))
		w("\tLEAQ (SI)(CX*2), SI\n")
		// bias terms and sums: w0, then w1 (its biases R15 bytes on, its
		// outputs 4 bytes on)
		for k, acc := range [][2][]int{{a0, a1}, {b0, b1}} {
			q := fmt.Sprintf("%s_w%d", p, k)
			if k == 1 {
				w("\tADDQ R15, R12\n")
			}
			w(fmt.Sprintf("%s_groups%s:\n", p, map[int]string{0: "", 1: "1"}[k]))
			w(fmt.Sprintf("\tXORQ BX, BX\n\tMOVQ ng+56(FP), CX\n%s_g:\n\tCMPQ CX, $16\n\tJLT %s_gtail\n", q, q))
			w(groups(r, acc[0], false))
			w(fmt.Sprintf("\tADDQ $%d, BX\n\tSUBQ $16, CX\n\tJMP %s_g\n%s_gtail:\n\tTESTQ CX, CX\n\tJZ %s_out\n", groupStep(), q, q, q))
			w(groups(r, acc[0], true))
			w(fmt.Sprintf("%s_out:\n", q))
			if k == 1 {
				w("\tSUBQ R15, R12\n")
			}
			if r == 4 { // summed below, all eight at once (hsum8)
				for i := range r {
					w(fmt.Sprintf("\tVADDPS Z%d, Z%d, Z%d\n", acc[1][i], acc[0][i], acc[0][i]))
				}
				continue
			}
			w("\tMOVQ DI, AX\n")
			if k == 1 {
				w("\tADDQ $4, AX\n")
			}
			for i := range r {
				w(fmt.Sprintf("\tVADDPS Z%d, Z%d, Z%d\n", acc[1][i], acc[0][i], acc[0][i]))
				w(hsum(acc[0][i]))
				if i+1 < r {
					w("\tADDQ ldo+112(FP), AX\n")
				}
			}
		}
		if r == 4 {
			w(hsum8(a0, b0))
		}
		w(fmt.Sprintf("%s_next:\n\tADDQ wskip+160(FP), SI\n\tADDQ ldw+168(FP), SI\n", p))
		w(fmt.Sprintf("\tADDQ $8, DI\n\tLEAQ (R11)(R15*2), R11\n\tLEAQ (R12)(R15*2), R12\n\tSUBQ $2, R13\n\tJNZ %s_row\n\tJMP %s_done\n", p, l))
	}
	w(fmt.Sprintf("\n%s_done:\n\tVZEROUPPER\n\tRET\n\n", l))
}

func main() {
	var o strings.Builder
	w := func(s string) { o.WriteString(s) }
	w(header)
	for _, v := range []struct {
		name string
		lo   bool
		bf   bool
	}{{"X", false, false}, {"XL", true, false}, {"XB", false, true}, {"XLB", true, true}} {
		bfScales = v.bf
		fn := "qmvRows" + v.name
		l := strings.ToLower(v.name)
		w(fmt.Sprintf("// func %s(%s)\nTEXT ·%s(SB), NOSPLIT, $0-168\n", fn, args, fn))
		w(prologue())
		for _, r := range rs {
			w(fmt.Sprintf("\tCMPQ AX, $%d\n\tJEQ %s_r%d\n", r, l, r))
		}
		w(fmt.Sprintf("\tJMP %s_done\n", l))
		for _, r := range rs {
			p := fmt.Sprintf("%s%d", l, r)
			a0, a1 := acc0[:r], acc1[:r]
			w(fmt.Sprintf("\n%s_r%d:\n%s_row:\n", l, r, p))
			w("\tMOVQ x+8(FP), DX\n\tMOVQ R11, R8\n\tMOVQ nblk+32(FP), CX\n")
			w(fmt.Sprintf("\tMOVQ flags+152(FP), AX\n\tTESTQ $%d, AX\n\tJNZ %s_load\n", qmvLoad, p))
			for i := range r {
				w(fmt.Sprintf("\tVPXORD Z%d, Z%d, Z%d\n\tVPXORD Z%d, Z%d, Z%d\n", a0[i], a0[i], a0[i], a1[i], a1[i], a1[i]))
			}
			w(fmt.Sprintf("\tJMP %s_pairs\n%s_load:\n", p, p) + accPtr(r))
			for i := range r {
				w(fmt.Sprintf("\tVMOVUPS %d(AX), Z%d\n\tVMOVUPS %d(AX), Z%d\n", 128*i, a0[i], 128*i+64, a1[i]))
			}
			w(fmt.Sprintf("%s_pairs:\n\tCMPQ CX, $2\n\tJLT %s_one\n", p, p))
			w("\tPREFETCHT1 (SI)(R14*1)\n\tPREFETCHT1 64(SI)(R14*1)\n")
			w(block(v.lo, r, a0) + step)
			w(block(v.lo, r, a1) + step)
			w(fmt.Sprintf("\tSUBQ $2, CX\n\tJMP %s_pairs\n%s_one:\n\tTESTQ CX, CX\n\tJZ %s_tail\n", p, p, p))
			w("\tPREFETCHT1 (SI)(R14*1)\n")
			w(block(v.lo, r, a0) + step)
			w(fmt.Sprintf("%s_tail:\n\tMOVQ flags+152(FP), AX\n\tTESTQ $%d, AX\n\tJNZ %s_fin\n", p, qmvFinish, p))
			w("\t// not the last chunk of the rows: keep the accumulators for the next chunk\n" + accPtr(r))
			for i := range r {
				w(fmt.Sprintf("\tVMOVUPS Z%d, %d(AX)\n\tVMOVUPS Z%d, %d(AX)\n", a0[i], 128*i, a1[i], 128*i+64))
			}
			w(fmt.Sprintf("\tJMP %s_next\n%s_fin:\n", p, p))
			w("\t// a last block of tailw (< 32) words: zero-masked weight load (x is\n\t// zero-padded), lane-masked accumulation\n")
			w(fmt.Sprintf("\tMOVQ tailw+40(FP), CX\n\tTESTQ CX, CX\n\tJZ %s_groups\n", p))
			w("\tVMOVDQU16.Z (SI), K1, Z0\n\tCODES4X\n" + lanes("(R8)", 6))
			w(rows(r, v.lo, func(i int) string { return fmt.Sprintf("\tVFMADD231PS Z6, Z5, K2, Z%d\n", a1[i]) }))
			w("\tLEAQ (SI)(CX*2), SI\n")
			w(fmt.Sprintf("%s_groups:\n\t// acc0 += Σ_g b[g]·gx[g], 16 groups at a time, the last ones masked\n", p))
			w(fmt.Sprintf("\tXORQ BX, BX\n\tMOVQ ng+56(FP), CX\n%s_g:\n\tCMPQ CX, $16\n\tJLT %s_gtail\n", p, p))
			w(groups(r, a0, false))
			w(fmt.Sprintf("\tADDQ $%d, BX\n\tSUBQ $16, CX\n\tJMP %s_g\n%s_gtail:\n\tTESTQ CX, CX\n\tJZ %s_out\n", groupStep(), p, p, p))
			w(groups(r, a0, true))
			w(fmt.Sprintf("%s_out:\n\tMOVQ DI, AX\n", p))
			for i := range r {
				w(fmt.Sprintf("\tVADDPS Z%d, Z%d, Z%d\n", a1[i], a0[i], a0[i]))
				w(hsum(a0[i]))
				if i+1 < r {
					w("\tADDQ ldo+112(FP), AX\n")
				}
			}
			w(fmt.Sprintf("%s_next:\n\tADDQ wskip+160(FP), SI\n", p))
			w(fmt.Sprintf("\tADDQ $4, DI\n\tADDQ R15, R11\n\tADDQ R15, R12\n\tDECQ R13\n\tJNZ %s_row\n\tJMP %s_done\n", p, l))
		}
		w(fmt.Sprintf("\n%s_done:\n\tVZEROUPPER\n\tRET\n\n", l))
	}
	bfScales = false
	genPair(w, "X", false)
	genPair(w, "XL", true)
	bfScales = true
	genPair(w, "XB", false)
	genPair(w, "XLB", true)
	out := strings.TrimRight(o.String(), "\n") + "\n"
	if err := os.WriteFile("qmvr_amd64.s", []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const header = `// Code generated by gen_qmvr.go; DO NOT EDIT.

#include "textflag.h"

// Quantized matvec with AVX512_BF16 for 1, 2, 4 or 8 x rows per pass (see
// qmv.go for the layouts, the 8-bit mapping and the precision argument).
//
// A block is 64 packed bytes = 32 words = 128 codes; word w holds codes
// 4w..4w+3 in its four nibbles. Bringing each nibble to the bottom of its
// word (VPSRLW by 0, 4, 8 and 12 bits) and looking it up in
// the bfloat16 table of 0..15 (VPERMW) gives four vectors of 32 exact
// codes. Each block is loaded, decoded and given its lane scales (VPERMPS
// spreads the block's 1, 2 or 4 group scales over the lanes) once, then
// dotted with every x row of the pass in turn: per row one chain of
// VDPBF16PS over the four runs (x read from memory by the instruction), so
// that lane l holds codes 8l..8l+7, then one FMA of the lane scales into
// the row's accumulator — even blocks into ACC0, odd ones into ACC1, a
// last partial block (tail) into ACC1 under a lane mask. Per row, the bias
// terms Σ_g b_g·Σx_g are added into ACC0, 16 groups at a time; then ACC0 +
// ACC1 is summed across lanes. A row's operations and their order are the
// same whatever the pass size, so its result does not depend on the rows
// it is computed with. XL adds a second chain link per run for the x
// residuals (float16 x), lo bytes after each row's main layout.
//
// The weights are read as one sequential stream (prefetched pfd bytes
// ahead); x rows stay in cache. Long rows may be run in chunks of an even
// number of blocks (x, w and s at the chunk's start, nblk its blocks,
// wskip the bytes from a chunk's end to the next row's chunk): a chunk
// with flag 1 starts from the accumulators stored at acc (r·128 bytes per
// weight row, ACC0 then ACC1 of each x row) instead of zeros, and one
// without flag 2 stores them there and stops before the tail; the chain
// of operations per lane is the one an unchunked call runs, so chunking
// does not change a bit.
//
// Registers: Z0..Z3 codes, Z5 a row's block dot (Y5/X7 the final sum's
// temporaries), Z6 the lane scales, Z30 the lane→group index, Z31 the code
// table; row r accumulates in ACC0[r] and ACC1[r].

// DPBFX(n, v, r) emits VDPBF16PS (64·n)(AX), zmm(v), zmm(r) (r += pairwise
// bfloat16 products of zmm(v) and the 64 bytes at AX + 64·n), and DPBFXL
// the same at AX + R10 + 64·n; the Go assembler has no mnemonic for it:
// EVEX.512.F3.0F38.W0 52 /r with a disp8·64 memory operand.
#define DPBFX(n, v, r) \
	BYTE $0x62 \
	BYTE $(0x62 | (1-((r>>3)&1))<<7 | (1-((r>>4)&1))<<4) \
	BYTE $(((15-(v&15))<<3) | 0x06) \
	BYTE $(0x40 | (1-((v>>4)&1))<<3) \
	BYTE $0x52 \
	BYTE $(0x40 | (r&7)<<3) \
	BYTE $(n)

#define DPBFXL(n, v, r) \
	BYTE $0x62 \
	BYTE $(0x22 | (1-((r>>3)&1))<<7 | (1-((r>>4)&1))<<4) \
	BYTE $(((15-(v&15))<<3) | 0x06) \
	BYTE $(0x40 | (1-((v>>4)&1))<<3) \
	BYTE $0x52 \
	BYTE $(0x44 | (r&7)<<3) \
	BYTE $0x10 \
	BYTE $(n)

// DPBFRR(r, v, m) emits VDPBF16PS zmm(m), zmm(v), zmm(r) (r += pairwise
// products of zmm(v) and zmm(m)), any of the 32 registers.
#define DPBFRR(r, v, m) \
	BYTE $0x62 \
	BYTE $(0x02 | (1-((r>>3)&1))<<7 | (1-((m>>4)&1))<<6 | (1-((m>>3)&1))<<5 | (1-((r>>4)&1))<<4) \
	BYTE $(((15-(v&15))<<3) | 0x06) \
	BYTE $(0x40 | (1-((v>>4)&1))<<3) \
	BYTE $0x52 \
	BYTE $(0xC0 | (r&7)<<3 | (m&7))

// CODES4XP is CODES4X for the second row's block: W in Z24, codes into
// Z24..Z27.
#define CODES4XP \
	VPSRLW $4, Z24, Z25 \
	VPSRLW $8, Z24, Z26 \
	VPSRLW $12, Z24, Z27 \
	VPERMW Z31, Z24, Z24 \
	VPERMW Z31, Z25, Z25 \
	VPERMW Z31, Z26, Z26 \
	VPERMW Z31, Z27, Z27

// CODES4X turns the block's words W (Z0) into the bfloat16 codes of
// nibbles 0..3 in Z0..Z3: W shifted right by 0, 4, 8 and 12 bits brings
// nibble j to the bottom of each word, and VPERMW reads the low 5 bits of
// each word as its index into the table in Z31, which repeats after 16 (so
// the bit above the nibble does not matter).
#define CODES4X \
	VPSRLW $4, Z0, Z1 \
	VPSRLW $8, Z0, Z2 \
	VPSRLW $12, Z0, Z3 \
	VPERMW Z31, Z0, Z0 \
	VPERMW Z31, Z1, Z1 \
	VPERMW Z31, Z2, Z2 \
	VPERMW Z31, Z3, Z3

// qmvNibbles is the bfloat16 of 0..15, twice.
DATA qmvNibbles<>+0(SB)/8, $0x404040003f800000
DATA qmvNibbles<>+8(SB)/8, $0x40e040c040a04080
DATA qmvNibbles<>+16(SB)/8, $0x4130412041104100
DATA qmvNibbles<>+24(SB)/8, $0x4170416041504140
DATA qmvNibbles<>+32(SB)/8, $0x404040003f800000
DATA qmvNibbles<>+40(SB)/8, $0x40e040c040a04080
DATA qmvNibbles<>+48(SB)/8, $0x4130412041104100
DATA qmvNibbles<>+56(SB)/8, $0x4170416041504140
GLOBL qmvNibbles<>(SB), RODATA|NOPTR, $64

`

// prologue loads the arguments every kernel keeps in registers; the B
// kernels count their scale and bias rows in bfloat16 bytes and mask
// VPERMW to odd words (K6).
func prologue() string {
	if !bfScales {
		return prologueF32
	}
	s := prologueF32
	for _, r := range [][2]string{
		{"SHLQ $2, R15 // bytes of scales (and biases) per row", "SHLQ $1, R15 // bytes of scales (and biases) per row"},
		{"\tMOVQ nx+136(FP), AX\n", "\tMOVL $0xAAAAAAAA, AX\n\tKMOVD AX, K6\n\tMOVQ nx+136(FP), AX\n"},
	} {
		if strings.Count(s, r[0]) != 1 {
			panic("gen_qmvr: prologue lacks " + r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

const prologueF32 = `	MOVQ w+0(FP), SI
	MOVQ s+48(FP), R11
	MOVQ b+80(FP), R12
	MOVQ out+104(FP), DI
	MOVQ nrows+120(FP), R13
	MOVQ pfd+128(FP), R14
	MOVQ ng+56(FP), R15
	SHLQ $2, R15 // bytes of scales (and biases) per row
	MOVQ sblk+64(FP), R9
	MOVQ lo+16(FP), R10
	MOVQ sidx+72(FP), AX
	VMOVDQU64 (AX), Z30
	VMOVDQU64 qmvNibbles<>(SB), Z31
	// tail masks: K1 the tail's words, K2 its float32 lanes
	MOVQ tailw+40(FP), CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVD AX, K1
	SHRQ $1, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K2
	// group-dot tail mask K3 (ng mod 16 groups)
	MOVQ ng+56(FP), CX
	ANDQ $15, CX
	MOVL $1, AX
	SHLL CX, AX
	DECL AX
	KMOVW AX, K3
	MOVQ nx+136(FP), AX
`
