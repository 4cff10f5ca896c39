//go:build ignore

// gen_amx writes amx_amd64.s, the AMX-INT8 kernels of the int8-activation
// products (see amx_amd64.go): run go generate. The Go assembler has no AMX
// mnemonics, so the tile instructions are emitted as bytes, each with its
// Intel-syntax form in a comment (checked against GNU as).
package main

import (
	"fmt"
	"os"
	"strings"
)

// Go's register numbers.
const (
	rAX, rCX, rDX, rBX, rSP, rBP, rSI, rDI = 0, 1, 2, 3, 4, 5, 6, 7
	r8, r9, r10, r11, r12                  = 8, 9, 10, 11, 12
)

var regName = []string{"rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12"}

// vex3 is a three-byte VEX prefix for map 0F38, W0, L0: pp selects
// none/66/F3/F2 (0..3), vvvv the extra register (0 when unused).
func vex3(rExt, xExt, bExt bool, vvvv, pp int) []byte {
	b1 := byte(0x02) // map 0F38
	if !rExt {
		b1 |= 0x80
	}
	if !xExt {
		b1 |= 0x40
	}
	if !bExt {
		b1 |= 0x20
	}
	return []byte{0xc4, b1, byte((^vvvv&0xf)<<3 | pp)}
}

// emit writes raw bytes as one BYTE line with a comment.
func emit(b *strings.Builder, bs []byte, comment string) {
	parts := make([]string, len(bs))
	for i, v := range bs {
		parts[i] = fmt.Sprintf("BYTE $0x%02x", v)
	}
	fmt.Fprintf(b, "\t%s // %s\n", strings.Join(parts, "; "), comment)
}

// tileMem encodes TILELOADD (pp 3) or TILESTORED (pp 2) of tile t at
// [base + index*1 + disp32]: rows are index bytes apart.
func tileMem(pp, t, base, index, disp int) []byte {
	if base == rBP || base == 13 || index == rSP {
		panic("register not encodable here")
	}
	bs := vex3(false, index >= 8, base >= 8, 0, pp)
	bs = append(bs, 0x4b, byte(0x80|t<<3|4), byte((index&7)<<3|base&7))
	return append(bs, byte(disp), byte(disp>>8), byte(disp>>16), byte(disp>>24))
}

func tileLoad(b *strings.Builder, t, base, index, disp int) {
	emit(b, tileMem(3, t, base, index, disp), fmt.Sprintf("tileloadd tmm%d, [%s+%s*1+%d]", t, regName[base], regName[index], disp))
}

func tileStore(b *strings.Builder, t, base, index, disp int) {
	emit(b, tileMem(2, t, base, index, disp), fmt.Sprintf("tilestored [%s+%s*1+%d], tmm%d", regName[base], regName[index], disp, t))
}

func tileZero(b *strings.Builder, t int) {
	emit(b, append(vex3(false, false, false, 0, 3), 0x49, byte(0xc0|t<<3)), fmt.Sprintf("tilezero tmm%d", t))
}

// tdpbsud: c += a·b, a's bytes signed, b's unsigned, int32 sums.
func tdpbsud(b *strings.Builder, c, a, bt int) {
	emit(b, append(vex3(false, false, false, bt, 2), 0x5e, byte(0xc0|c<<3|a)), fmt.Sprintf("tdpbsud tmm%d, tmm%d, tmm%d", c, a, bt))
}

// dots writes amxDots{gs}: the int32 sums Σ q·x8 of each group of 16 x
// rows against one weight block. General registers: SI the block's
// current group, DI the x rows' current group, BX ldx, R10 64 (the tiles'
// row pitch), DX the sums (1 KiB a group), CX group pairs left.
func dots(gs int) string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, "\t"+f+"\n", a...) }
	name := fmt.Sprintf("amxDots%d", gs)
	xg := gs + 8         // a group of an x row: codes, d, d·Σx8
	sub := max(1, gs/64) // tile products per group (64 columns each)
	subCols := min(gs, 64)
	fmt.Fprintf(&b, "// func %s(w *byte, gstride int, x *byte, ldx, ng int, sums *int32, cfg *byte)\n", name)
	fmt.Fprintf(&b, "TEXT ·%s(SB), NOSPLIT, $0-56\n", name)
	p("MOVQ cfg+48(FP), AX")
	emit(&b, []byte{0xc4, 0xe2, 0x78, 0x49, 0x00}, "ldtilecfg [rax]")
	p("MOVQ w+0(FP), SI")
	p("MOVQ gstride+8(FP), R8")
	p("MOVQ x+16(FP), DI")
	p("MOVQ ldx+24(FP), BX")
	p("MOVQ sums+40(FP), DX")
	p("MOVQ $64, R10")
	// group j of the current pair: tiles 3j (x), 3j+1 (codes), 3j+2 (sums);
	// the second group's codes are R8 bytes on (R9 = SI + R8)
	products := func(j int) {
		tileZero(&b, 3*j+2)
		base := rSI
		if j == 1 {
			base = r9
		}
		for s := range sub {
			tileLoad(&b, 3*j, rDI, rBX, j*xg+s*subCols)
			tileLoad(&b, 3*j+1, base, r10, s*1024)
			tdpbsud(&b, 3*j+2, 3*j, 3*j+1)
		}
	}
	p("MOVQ ng+32(FP), CX")
	p("SHRQ $1, CX")
	p("JZ %s_single", name)
	fmt.Fprintf(&b, "%s_pair:\n", name)
	p("LEAQ (SI)(R8*1), R9")
	products(0)
	products(1)
	tileStore(&b, 2, rDX, r10, 0)
	tileStore(&b, 5, rDX, r10, 1024)
	p("LEAQ (R9)(R8*1), SI")
	p("ADDQ $%d, DI", 2*xg)
	p("ADDQ $2048, DX")
	p("DECQ CX")
	p("JNZ %s_pair", name)
	fmt.Fprintf(&b, "%s_single:\n", name)
	p("MOVQ ng+32(FP), CX")
	p("ANDQ $1, CX")
	p("JZ %s_done", name)
	products(0)
	tileStore(&b, 2, rDX, r10, 0)
	fmt.Fprintf(&b, "%s_done:\n", name)
	emit(&b, []byte{0xc4, 0xe2, 0x78, 0x49, 0xc0}, "tilerelease")
	p("RET")
	return b.String()
}

// The float32 kernel addresses 16 rows (x rows, then output rows) from a
// first row's register and a stride in BX: rowBases sets R8/R9/R12 to
// rows 4, 8 and 12 and R11 to 3·stride, and rowAddr names row r plus off.
func rowBases(p func(string, ...any), first string) {
	p("LEAQ (BX)(BX*2), R11")
	p("LEAQ (%s)(BX*4), R8", first)
	p("LEAQ (R8)(BX*4), R9")
	p("LEAQ (R9)(BX*4), R12")
}

func rowAddr(first string, r, off int) string {
	base := []string{first, "R8", "R9", "R12"}[r/4]
	idx := []string{"", "(BX*1)", "(BX*2)", "(R11*1)"}[r%4]
	if off == 0 {
		return fmt.Sprintf("(%s)%s", base, idx)
	}
	return fmt.Sprintf("%d(%s)%s", off, base, idx)
}

// finish writes amxFinish{gs}[h]: out[r, 0:16] for 16 x rows from their
// groups' int32 sums, in the VNNI kernels' (q8k's) float32 steps and
// order: acc += (s·d)·Σ, then acc += b·(d·Σx8), group by group.
// Registers: Z0..Z15 the accumulators (one per x row, lanes the 16
// weight rows), Z16..Z23 temps, Z30 scales, Z26 biases; SI the block's
// scales of the current group, DX its sums, CX groups left.
func finish(gs int, half bool) string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, "\t"+f+"\n", a...) }
	name := fmt.Sprintf("amxFinish%d", gs)
	if half {
		name += "h"
	}
	xg := gs + 8
	fmt.Fprintf(&b, "// func %s(sums *int32, sc *byte, gstride int, x *byte, ldx, ng int, out *float32, ldo int)\n", name)
	fmt.Fprintf(&b, "TEXT ·%s(SB), NOSPLIT, $0-64\n", name)
	p("MOVQ sums+0(FP), DX")
	p("MOVQ sc+8(FP), SI")
	p("MOVQ gstride+16(FP), R10")
	p("MOVQ x+24(FP), DI")
	p("MOVQ ldx+32(FP), BX")
	rowBases(p, "DI")
	p("MOVQ ng+40(FP), CX")
	for i := range 16 {
		p("VPXORD Z%d, Z%d, Z%d", i, i, i)
	}
	fmt.Fprintf(&b, "%s_group:\n", name)
	if half {
		p("VPMOVZXWD (SI), Z30")
		p("VPSLLD $16, Z30, Z30")
		p("VPMOVZXWD 32(SI), Z26")
		p("VPSLLD $16, Z26, Z26")
	} else {
		p("VMOVUPS (SI), Z30")
		p("VMOVUPS 64(SI), Z26")
	}
	for i := range 16 {
		t, u := 16+(i%4)*2, 17+(i%4)*2
		p("VCVTDQ2PS %d(DX), Z%d", 64*i, t)
		p("VMULPS.BCST %s, Z30, Z%d", rowAddr("DI", i, gs), u)
		p("VFMADD231PS Z%d, Z%d, Z%d", u, t, i)
		p("VFMADD231PS.BCST %s, Z26, Z%d", rowAddr("DI", i, gs+4), i)
	}
	p("ADDQ R10, SI")
	p("ADDQ $1024, DX")
	for _, r := range []string{"DI", "R8", "R9", "R12"} {
		p("ADDQ $%d, %s", xg, r)
	}
	p("DECQ CX")
	p("JNZ %s_group", name)
	p("MOVQ out+48(FP), AX")
	p("MOVQ ldo+56(FP), BX")
	rowBases(p, "AX")
	for i := range 16 {
		p("VMOVUPS Z%d, %s", i, rowAddr("AX", i, 0))
	}
	p("VZEROUPPER")
	p("RET")
	return b.String()
}

// unpack writes amxUnpack4: a 4-bit q8pack block widened to the 8-bit
// layout (each chunk's low nibbles, then its high ones, one byte a code;
// the groups' scales and biases copied after their codes).
func unpack() string {
	var b strings.Builder
	p := func(f string, a ...any) { fmt.Fprintf(&b, "\t"+f+"\n", a...) }
	b.WriteString("// func amxUnpack4(dst, src *byte, ng, cpg, trail int)\n")
	b.WriteString("TEXT ·amxUnpack4(SB), NOSPLIT, $0-40\n")
	p("MOVQ dst+0(FP), DI")
	p("MOVQ src+8(FP), SI")
	p("MOVQ ng+16(FP), CX")
	p("MOVL $0x0f0f0f0f, AX")
	p("VPBROADCASTD AX, Z31")
	b.WriteString("amxUnpack4_group:\n")
	p("MOVQ cpg+24(FP), DX")
	b.WriteString("amxUnpack4_chunk:\n")
	p("VMOVDQU64 (SI), Z0")
	p("VPSRLW $4, Z0, Z1")
	p("VPANDD Z31, Z0, Z0")
	p("VPANDD Z31, Z1, Z1")
	p("VMOVDQU64 Z0, (DI)")
	p("VMOVDQU64 Z1, 64(DI)")
	p("ADDQ $64, SI")
	p("ADDQ $128, DI")
	p("DECQ DX")
	p("JNZ amxUnpack4_chunk")
	p("MOVQ trail+32(FP), DX")
	b.WriteString("amxUnpack4_trail:\n")
	p("VMOVDQU64 (SI), Z0")
	p("VMOVDQU64 Z0, (DI)")
	p("ADDQ $64, SI")
	p("ADDQ $64, DI")
	p("SUBQ $64, DX")
	p("JNZ amxUnpack4_trail")
	p("DECQ CX")
	p("JNZ amxUnpack4_group")
	p("VZEROUPPER")
	p("RET")
	return b.String()
}

func main() {
	var b strings.Builder
	b.WriteString("// Code generated by gen_amx.go; DO NOT EDIT.\n\n#include \"textflag.h\"\n\n")
	for _, gs := range []int{32, 64, 128} {
		b.WriteString(dots(gs) + "\n")
		for _, half := range []bool{false, true} {
			b.WriteString(finish(gs, half) + "\n")
		}
	}
	b.WriteString(unpack())
	if err := os.WriteFile("amx_amd64.s", []byte(b.String()), 0o644); err != nil {
		panic(err)
	}
}
