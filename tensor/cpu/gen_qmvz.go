//go:build ignore

// gen_qmvz writes qmvz_amd64.s, the AVX-512 quantized matmul kernels
// (qmvz.go) unrolled per x row count (1..8), code width (4, 8 bits) and
// group layout (one scale per 64-code block or per group of blocks, or
// two per block for groups of 32): run go generate.
package main

import (
	"fmt"
	"os"
	"strings"
)

const args = "w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int"

const maxRows = 8

// decode turns one block of 64 codes at SI into float32 vectors Z0..Z3
// holding s·q (tables or scales Z5, and Z7 for the second group of a
// 32-code pair).
func decode(bits int, pair bool) string {
	return decodeAt(bits, "SI", [4]int{0, 1, 2, 3}, true, scaleRegs(pair, 5, 7))
}

// scaleRegs is, per decoded vector, the register holding its group's
// scale (8-bit) or table (4-bit): a and, for the second group of a 32-code
// pair, b.
func scaleRegs(pair bool, a, b int) [4]int {
	if pair {
		return [4]int{a, a, b, b}
	}
	return [4]int{a, a, a, a}
}

// decodeAt is decode for the block at base (an address expression such as
// "SI" or "SI)(R14*1"), into vectors z, moving SI on when advance is set.
// For 4-bit codes byte j of the block holds codes 2j (low nibble) and
// 2j+1: z[0] lanes are codes 0,2,…,30, z[1] 1,3,…,31, z[2] 32,…,62, z[3]
// 33,…,63; each code is looked up (VPERMPS reads an index's low 4 bits
// only, so the high nibble needs only the shift) in its group's table
// t[v] = s·(0, 1, …, 15), which gives s·q exactly as s·float(q) would.
// 8-bit codes are four runs of 16 in order, widened, converted and
// multiplied by the scale in sc.
func decodeAt(bits int, base string, z [4]int, advance bool, sc [4]int) string {
	a := func(off int) string {
		if off == 0 {
			return "(" + base + ")"
		}
		return fmt.Sprintf("%d(%s)", off, base)
	}
	adv := func(n int) string {
		if advance {
			return fmt.Sprintf("\tADDQ $%d, SI\n", n)
		}
		return ""
	}
	if bits == 4 {
		s := fmt.Sprintf("\tVPMOVZXBD %s, Z%d\n\tVPMOVZXBD %s, Z%d\n\tVPSRLD $4, Z%d, Z%d\n\tVPSRLD $4, Z%d, Z%d\n", a(0), z[0], a(16), z[2], z[0], z[1], z[2], z[3])
		for v := range 4 {
			s += fmt.Sprintf("\tVPERMPS Z%d, Z%d, Z%d\n", sc[v], z[v], z[v])
		}
		return s + adv(32)
	}
	s := fmt.Sprintf("\tVPMOVZXBD %s, Z%d\n\tVPMOVZXBD %s, Z%d\n\tVPMOVZXBD %s, Z%d\n\tVPMOVZXBD %s, Z%d\n", a(0), z[0], a(16), z[1], a(32), z[2], a(48), z[3]) +
		fmt.Sprintf("\tVCVTDQ2PS Z%d, Z%d\n\tVCVTDQ2PS Z%d, Z%d\n\tVCVTDQ2PS Z%d, Z%d\n\tVCVTDQ2PS Z%d, Z%d\n", z[0], z[0], z[1], z[1], z[2], z[2], z[3], z[3])
	for v := range 4 {
		s += fmt.Sprintf("\tVMULPS Z%d, Z%d, Z%d\n", sc[v], z[v], z[v])
	}
	return s + adv(64)
}

// tables, for 4-bit codes, turns the broadcast scales in regs into lookup
// tables s·(0, 1, …, 15) (Z6 holds 0..15); 8-bit codes use the scales as
// they are.
func tables(bits int, regs ...int) string {
	if bits != 4 {
		return ""
	}
	s := ""
	for _, r := range regs {
		s += fmt.Sprintf("\tVMULPS Z6, Z%d, Z%d\n", r, r)
	}
	return s
}

// chains is how many accumulators each (x row, weight row) chain keeps:
// vector v of a block goes into accumulator v mod chains, so that a lone
// x row keeps more FMAs in flight than one chain's latency allows; they
// are added (0 + 1) before the lanes are summed.
const chains = 2

// acc is x row i's accumulator a (for the first weight row of a pair).
func acc(i, a int) int { return 8 + chains*i + a }

// accB is x row i's accumulator a for the second weight row of a pair.
func accB(i, a int) int { return 16 + chains*i + a }

// pairRows is the most x rows a pass takes weight rows in pairs with
// (their accumulators fill Z8..Z23); larger passes go one weight row at a
// time.
const pairRows = 4

// accOff is the byte offset in acc of x row i's accumulator a for the
// weight row j of the pair (0 or 1) in a pass of nx rows.
func accOff(nx, j, i, a int) int { return 64 * (chains*(j*nx+i) + a) }

// sumChains adds a chain's accumulators into the first (z(0)).
func sumChains(z func(a int) int) string {
	s := ""
	for a := 1; a < chains; a++ {
		s += fmt.Sprintf("\tVADDPS Z%d, Z%d, Z%d\n", z(a), z(0), z(0))
	}
	return s
}

// pairBody emits the loop over pairs of weight rows for a pass of nx x
// rows (label prefix p): both rows' blocks are decoded, then each x vector
// is loaded once and fed to both rows' chains. Every (x row, weight row)
// chain is the single-row path's, operation for operation, so a row's
// result does not depend on whether it was computed in a pair. R14 holds
// ldw and DX lds inside the loop (the row count waits in nrows, x's base
// is reread from x).
func pairBody(w func(string, ...any), bits int, pair bool, p, l string, nx int) {
	w("%s_pchk:\n\tCMPQ R14, $2\n\tJLT %s_row\n", p, p)
	w("\tMOVQ R14, nrows+128(FP)\n\tMOVQ ldw+8(FP), R14\n\tMOVQ lds+56(FP), DX\n")
	w("\tMOVQ flags+144(FP), AX\n\tTESTQ $1, AX\n\tJZ %s_pload\n", p)
	for i := range nx {
		for a := range chains {
			w("\tVPXORD Z%d, Z%d, Z%d\n\tVPXORD Z%d, Z%d, Z%d\n", acc(i, a), acc(i, a), acc(i, a), accB(i, a), accB(i, a), accB(i, a))
		}
	}
	w("\tMOVQ b+64(FP), AX\n\tMOVQ gx+88(FP), CX\n\tMOVQ nbv+80(FP), R12\n\tMOVQ ldb+72(FP), R11\n")
	w("%s_pbias:\n\tVMOVUPS (AX), Z5\n\tVMOVUPS (AX)(R11*1), Z7\n\tMOVQ CX, R13\n", p)
	for i := range nx {
		w("\tVFMADD231PS (R13), Z5, Z%d\n\tVFMADD231PS (R13), Z7, Z%d\n", acc(i, 0), accB(i, 0))
		if i+1 < nx {
			w("\tADDQ ldg+96(FP), R13\n")
		}
	}
	w("\tADDQ $64, AX\n\tADDQ $64, CX\n\tDECQ R12\n\tJNZ %s_pbias\n\tJMP %s_pblocks\n", p, p)
	w("%s_pload:\n", p)
	for i := range nx {
		for a := range chains {
			w("\tVMOVUPS %d(R10), Z%d\n\tVMOVUPS %d(R10), Z%d\n", accOff(nx, 0, i, a), acc(i, a), accOff(nx, 1, i, a), accB(i, a))
		}
	}
	w("%s_pblocks:\n\tMOVQ pfd+136(FP), CX\n\tMOVQ x+16(FP), R11\n\tMOVQ R9, R8\n\tMOVQ R15, SI\n\tMOVQ nit+32(FP), R12\n", p)
	if pair {
		w("%s_pgrp:\n\tVBROADCASTSS (R8), Z5\n\tVBROADCASTSS 4(R8), Z7\n\tVBROADCASTSS (R8)(DX*1), Z29\n\tVBROADCASTSS 4(R8)(DX*1), Z30\n%s\tADDQ $8, R8\n\tMOVQ cpi+40(FP), R13\n", p, tables(bits, 5, 7, 29, 30))
	} else {
		w("%s_pgrp:\n\tVBROADCASTSS (R8), Z5\n\tVBROADCASTSS (R8)(DX*1), Z29\n%s\tADDQ $4, R8\n\tMOVQ cpi+40(FP), R13\n", p, tables(bits, 5, 29))
	}
	w("%s_pblk:\n\tPREFETCHT0 (SI)(CX*1)\n\tLEAQ (SI)(R14*1), AX\n\tPREFETCHT0 (AX)(CX*1)\n", p)
	w("%s", decodeAt(bits, "SI)(R14*1", [4]int{24, 25, 26, 27}, false, scaleRegs(pair, 29, 30)))
	w("%s", decode(bits, pair))
	w("\tMOVQ R11, AX\n")
	for i := range nx {
		for v := range 4 {
			w("\tVMOVUPS %d(AX), Z31\n\tVFMADD231PS Z31, Z%d, Z%d\n\tVFMADD231PS Z31, Z%d, Z%d\n", 64*v, v, acc(i, v%chains), 24+v, accB(i, v%chains))
		}
		if i+1 < nx {
			w("\tADDQ BX, AX\n")
		}
	}
	w("\tADDQ $256, R11\n\tDECQ R13\n\tJNZ %s_pblk\n\tDECQ R12\n\tJNZ %s_pgrp\n", p, p)
	w("\tMOVQ flags+144(FP), AX\n\tTESTQ $2, AX\n\tJZ %s_pstore\n\tMOVQ DI, AX\n", p)
	for i := range nx {
		w("%s%s", sumChains(func(a int) int { return acc(i, a) }), hsum(acc(i, 0), "(AX)"))
		w("%s%s", sumChains(func(a int) int { return accB(i, a) }), hsum(accB(i, 0), "4(AX)"))
		if i+1 < nx {
			w("\tADDQ ldo+120(FP), AX\n")
		}
	}
	w("\tJMP %s_pnext\n%s_pstore:\n", p, p)
	for i := range nx {
		for a := range chains {
			w("\tVMOVUPS Z%d, %d(R10)\n\tVMOVUPS Z%d, %d(R10)\n", acc(i, a), accOff(nx, 0, i, a), accB(i, a), accOff(nx, 1, i, a))
		}
	}
	w("%s_pnext:\n\tADDQ $8, DI\n\tADDQ $%d, R10\n\tADDQ R14, R15\n\tADDQ R14, R15\n\tADDQ DX, R9\n\tADDQ DX, R9\n", p, accOff(nx, 2, 0, 0))
	w("\tMOVQ b+64(FP), AX\n\tADDQ ldb+72(FP), AX\n\tADDQ ldb+72(FP), AX\n\tMOVQ AX, b+64(FP)\n")
	w("\tMOVQ nrows+128(FP), R14\n\tMOVQ x+16(FP), DX\n\tSUBQ $2, R14\n\tJMP %s_pchk\n", p)
}

// hsum sums accumulator z's 16 lanes, (i, i+8), (i, i+4), then pairwise,
// and stores the sum at dst.
func hsum(z int, dst string) string {
	return fmt.Sprintf("\tVEXTRACTF64X4 $1, Z%d, Y4\n\tVADDPS Y4, Y%d, Y4\n\tVEXTRACTF128 $1, Y4, X5\n\tVADDPS X5, X4, X4\n"+
		"\tVHADDPS X4, X4, X4\n\tVHADDPS X4, X4, X4\n\tVMOVSS X4, %s\n", z, z, dst)
}

// bfScales rewrites a kernel written for float32 scales and biases into
// its B variant, which reads the weight's bfloat16 ones in place: a
// group's scale broadcast as a word and widened (VPBROADCASTW, VPSLLD 16:
// the same float32), the scale pointer stepping 2 bytes a group, the
// biases widened 16 at a time (so a row's groups must be whole vectors of
// 16). name and l are the f32 kernel's function name and label prefix.
func bfScales(text, name, l string) string {
	r := strings.NewReplacer(
		"·"+name+"(SB)", "·"+name+"B(SB)",
		"func "+name+"(", "func "+name+"B(",
		l+"_", l+"b_",
		"VBROADCASTSS (R8), Z5\n", "VPBROADCASTW (R8), Z5\n\tVPSLLD $16, Z5, Z5\n",
		"VBROADCASTSS 4(R8), Z7\n", "VPBROADCASTW 2(R8), Z7\n\tVPSLLD $16, Z7, Z7\n",
		"VBROADCASTSS (R8)(DX*1), Z29\n", "VPBROADCASTW (R8)(DX*1), Z29\n\tVPSLLD $16, Z29, Z29\n",
		"VBROADCASTSS 4(R8)(DX*1), Z30\n", "VPBROADCASTW 2(R8)(DX*1), Z30\n\tVPSLLD $16, Z30, Z30\n",
		"ADDQ $8, R8\n", "ADDQ $4, R8\n",
		"ADDQ $4, R8\n", "ADDQ $2, R8\n",
		"VMOVUPS (AX), Z5\n", "VPMOVZXWD (AX), Z5\n\tVPSLLD $16, Z5, Z5\n",
		"VMOVUPS (AX)(R11*1), Z7\n", "VPMOVZXWD (AX)(R11*1), Z7\n\tVPSLLD $16, Z7, Z7\n",
		"ADDQ $64, AX\n\tADDQ $64, CX\n", "ADDQ $32, AX\n\tADDQ $64, CX\n",
	)
	out := r.Replace(text)
	for _, left := range []string{"VBROADCASTSS", "VMOVUPS (AX), Z5", "VMOVUPS (AX)(R11*1), Z7"} {
		if strings.Contains(out, left) { // a float32 scale or bias read the rewrite missed
			panic("gen_qmvz: " + name + "B still has " + left)
		}
	}
	return out
}

func main() {
	var o strings.Builder
	w := func(f string, a ...any) { fmt.Fprintf(&o, f, a...) }
	w("%s", header)
	for _, bits := range []int{4, 8} {
		for _, pair := range []bool{false, true} {
			fn := fmt.Sprintf("qmvZ%d", bits)
			l := fmt.Sprintf("z%d", bits)
			if pair {
				fn += "p"
				l += "p"
			}
			start := o.Len()
			w("// func %s(%s)\nTEXT ·%s(SB), NOSPLIT, $0-160\n", fn, args, fn)
			w("%s", strings.ReplaceAll(prologue, "done", l+"_done"))
			for nx := 1; nx <= maxRows; nx++ {
				w("\tCMPQ AX, $%d\n\tJEQ %s_r%d\n", nx, l, nx)
			}
			w("\tJMP %s_done\n", l)
			for nx := 1; nx <= maxRows; nx++ {
				p := fmt.Sprintf("%s_%d", l, nx)
				w("\n%s_r%d:\n", l, nx)
				if nx <= pairRows {
					pairBody(w, bits, pair, p, l, nx)
				}
				w("%s_row:\n\tTESTQ R14, R14\n\tJZ %s_done\n", p, l)
				w("\tMOVQ flags+144(FP), AX\n\tTESTQ $1, AX\n\tJZ %s_load\n", p)
				w("\t// first chunk: acc = Σ_j b[16j..16j+15]·gx[16j..16j+15] (the bias terms)\n")
				for i := range nx {
					for a := range chains {
						w("\tVPXORD Z%d, Z%d, Z%d\n", acc(i, a), acc(i, a), acc(i, a))
					}
				}
				w("\tMOVQ b+64(FP), AX\n\tMOVQ gx+88(FP), CX\n\tMOVQ nbv+80(FP), R12\n")
				w("%s_bias:\n\tVMOVUPS (AX), Z5\n\tMOVQ CX, R13\n", p)
				for i := range nx {
					w("\tVFMADD231PS (R13), Z5, Z%d\n", acc(i, 0))
					if i+1 < nx {
						w("\tADDQ ldg+96(FP), R13\n")
					}
				}
				w("\tADDQ $64, AX\n\tADDQ $64, CX\n\tDECQ R12\n\tJNZ %s_bias\n\tJMP %s_blocks\n", p, p)
				w("%s_load:\n", p)
				for i := range nx {
					for a := range chains {
						w("\tVMOVUPS %d(R10), Z%d\n", accOff(nx, 0, i, a), acc(i, a))
					}
				}
				w("%s_blocks:\n\tMOVQ pfd+136(FP), CX\n\tMOVQ DX, R11\n\tMOVQ R9, R8\n\tMOVQ R15, SI\n\tMOVQ nit+32(FP), R12\n", p)
				if pair {
					// one block per iteration, the scales of its two groups
					w("%s_grp:\n\tVBROADCASTSS (R8), Z5\n\tVBROADCASTSS 4(R8), Z7\n%s\tADDQ $8, R8\n\tMOVQ cpi+40(FP), R13\n", p, tables(bits, 5, 7))
				} else {
					w("%s_grp:\n\tVBROADCASTSS (R8), Z5\n%s\tADDQ $4, R8\n\tMOVQ cpi+40(FP), R13\n", p, tables(bits, 5))
				}
				w("%s_blk:\n\tPREFETCHT0 (SI)(CX*1)\n", p)
				w("%s", decode(bits, pair))
				w("\tMOVQ R11, AX\n")
				for i := range nx {
					for v := range 4 {
						w("\tVFMADD231PS %d(AX), Z%d, Z%d\n", 64*v, v, acc(i, v%chains))
					}
					if i+1 < nx {
						w("\tADDQ BX, AX\n")
					}
				}
				w("\tADDQ $256, R11\n\tDECQ R13\n\tJNZ %s_blk\n\tDECQ R12\n\tJNZ %s_grp\n", p, p)
				w("\tMOVQ flags+144(FP), AX\n\tTESTQ $2, AX\n\tJZ %s_store\n", p)
				w("\t// last chunk: each row's lanes summed, (i, i+8), (i, i+4), then pairwise\n\tMOVQ DI, AX\n")
				for i := range nx {
					w("%s%s", sumChains(func(a int) int { return acc(i, a) }), hsum(acc(i, 0), "(AX)"))
					if i+1 < nx {
						w("\tADDQ ldo+120(FP), AX\n")
					}
				}
				w("\tJMP %s_next\n%s_store:\n", p, p)
				for i := range nx {
					for a := range chains {
						w("\tVMOVUPS Z%d, %d(R10)\n", acc(i, a), accOff(nx, 0, i, a))
					}
				}
				w("%s_next:\n\tADDQ $4, DI\n\tADDQ $%d, R10\n\tADDQ ldw+8(FP), R15\n\tADDQ lds+56(FP), R9\n", p, accOff(nx, 1, 0, 0))
				w("\tMOVQ b+64(FP), AX\n\tADDQ ldb+72(FP), AX\n\tMOVQ AX, b+64(FP)\n")
				w("\tDECQ R14\n\tJNZ %s_row\n\tJMP %s_done\n", p, l)
			}
			w("\n%s_done:\n\tVZEROUPPER\n\tRET\n\n", l)
			if bits == 8 { // 8-bit weights keep qmvZ for bfloat16 x too (qmvTFirst)
				w("%s", bfScales(o.String()[start:], fn, l))
			}
		}
	}
	out := strings.TrimRight(o.String(), "\n") + "\n"
	if err := os.WriteFile("qmvz_amd64.s", []byte(out), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const header = `// Code generated by gen_qmvz.go; DO NOT EDIT.

#include "textflag.h"

// Quantized matmul x·Wᵀ with AVX-512 (F, VL) for 1..8 x rows per pass:
// the AVX2 kernels' scheme (qmva_amd64.s) on 16 float32 lanes and blocks
// of 64 codes (see qmvz.go for the layouts).
//
// For each of nrows weight rows (ldw bytes apart), this chunk's nit
// iterations of cpi blocks each are walked; an iteration broadcasts its
// group scale (qmvZ4, qmvZ8: one group per iteration) or its two groups'
// scales (qmvZ4p, qmvZ8p: groups of 32, one block per iteration, codes
// 0..31 of the block in one group and 32..63 in the next; for 4-bit codes
// each scale becomes the table s·(0..15)). Every block is loaded and
// turned into four float32 vectors of s·q once (Z0..Z3: 4-bit codes looked
// up in the tables, 8-bit codes widened and multiplied by the scale; exact
// for bfloat16 and float16 scales, and the same product either way), then dotted
// with every x row of the pass in turn: per row four FMAs straight into
// its two accumulators, a0 += Z0·x0, a1 += Z1·x1, a0 += Z2·x2,
// a1 += Z3·x3 (x read from memory by the instruction; no separate block
// sum, so four FMA-port operations per 64 codes and row; two chains keep
// a lone row's FMAs from waiting on each other). On a row's first chunk
// a0 starts from the bias terms Σ_g b_g·X_g (16 groups per lane step) and
// a1 from zero; on a later chunk both are reloaded from acc, where a
// non-last chunk leaves them; after the last, a0 + a1's 16 lanes are
// summed and written out. A row's operations and their order are the same
// whatever the pass size or the chunking.
//
// In passes of up to four x rows weight rows go two at a time while two
// are left (larger passes take them one at a time): both blocks are
// decoded (the second into Z24..Z27, scaled by Z29/Z30), and each 64-byte
// x vector is loaded once into Z31 and fed to both rows' chains
// (accumulators Z8+i and Z16+i), which halves the x loads per product;
// each chain is the single row's, operation for operation.
//
// Registers: Z0..Z3 codes, Z4/X5 the final sums' temporaries, Z5 and Z7 the scales or tables (Z5
// the bias vector in the first step), Z6 the values 0..15; x row i
// accumulates in Z8+2i and Z9+2i (Z16+2i, Z17+2i for a pair's second
// weight row). SI walks the weights, R15 is the row's first
// weight byte, R8/R9 the scales, R10 acc, R11 x, DI out, BX ldx, CX the
// prefetch distance, R12/R13/R14 counters.

DATA qmvzIota<>+0(SB)/8, $0x3f80000000000000
DATA qmvzIota<>+8(SB)/8, $0x4040000040000000
DATA qmvzIota<>+16(SB)/8, $0x40a0000040800000
DATA qmvzIota<>+24(SB)/8, $0x40e0000040c00000
DATA qmvzIota<>+32(SB)/8, $0x4110000041000000
DATA qmvzIota<>+40(SB)/8, $0x4130000041200000
DATA qmvzIota<>+48(SB)/8, $0x4150000041400000
DATA qmvzIota<>+56(SB)/8, $0x4170000041600000
GLOBL qmvzIota<>(SB), RODATA|NOPTR, $64

`

const prologue = `	MOVQ w+0(FP), R15
	MOVQ x+16(FP), DX
	MOVQ ldx+24(FP), BX
	MOVQ s+48(FP), R9
	MOVQ acc+104(FP), R10
	MOVQ out+112(FP), DI
	MOVQ nrows+128(FP), R14
	VMOVUPS qmvzIota<>(SB), Z6
	TESTQ R14, R14
	JZ done
	MOVQ nx+152(FP), AX
`
