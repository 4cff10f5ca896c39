package cpu

import (
	"fmt"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

//go:generate go run gen_amx.go

// AMX-INT8 for the int8-activation products (amx_amd64.s, gen_amx.go).
// Where the CPU has AMX tiles and the OS grants their state, a product of
// amxMinRows or more x rows sums each group's integer dots Σ q·x8 for 16
// x rows × 16 weight rows with one tile instruction (TDPBSUD: x's bytes
// signed, the codes unsigned) instead of 64 VPDPBUSD, then runs the
// float32 steps of the VNNI kernels (q8k) on those sums, in their order
// (amxFinish). An integer dot is exact whatever the instruction that sums
// it, so every output has the bits q8k gives it: a row's results still
// depend on that row alone, whichever kernel a product's row count picks.
//
// The tile part (amxDots) is a dozen instructions: it reads a weight
// block in the 8-bit pack layout — a 4-bit block is first widened into a
// per-worker copy (amxUnpack4), once for all of the product's x rows —
// and writes each group's 16×16 sums. Its tests run it where the
// hardware allows and otherwise an emulation of the tile instructions
// (amxDotsRef in the tests) in its place, so that the layout, the
// unpacking and the float32 steps are checked on every AVX-512 CPU. Each
// amxDots call loads the tile configuration and releases the tiles
// before it returns: assembly is never preempted asynchronously, so no
// goroutine switch falls inside a call and no tile state outlives it.

// amxDots{32,64,128} writes, for ng groups of the size its name gives,
// the int32 sums of 16 quantized x rows at x (ldx bytes apart, q8
// layout) against one weight block w in the 8-bit pack layout (groups
// gstride bytes apart): group g's sums at sums[256g:], x row r's 16 at
// [16r:]. cfg is the tile configuration for that group size (amxCfg).

//go:noescape
func amxDots32(w *byte, gstride int, x *byte, ldx, ng int, sums *int32, cfg *byte)

//go:noescape
func amxDots64(w *byte, gstride int, x *byte, ldx, ng int, sums *int32, cfg *byte)

//go:noescape
func amxDots128(w *byte, gstride int, x *byte, ldx, ng int, sums *int32, cfg *byte)

// amxFinish{32,64,128}[h] computes out[r, 0:16] (rows ldo bytes apart)
// for 16 x rows from amxDots' sums and the block's scales and biases at
// sc (the first group's; gstride bytes apart), bfloat16 when h, else
// float32.

//go:noescape
func amxFinish32(sums *int32, sc *byte, gstride int, x *byte, ldx, ng int, out *float32, ldo int)

//go:noescape
func amxFinish64(sums *int32, sc *byte, gstride int, x *byte, ldx, ng int, out *float32, ldo int)

//go:noescape
func amxFinish128(sums *int32, sc *byte, gstride int, x *byte, ldx, ng int, out *float32, ldo int)

//go:noescape
func amxFinish32h(sums *int32, sc *byte, gstride int, x *byte, ldx, ng int, out *float32, ldo int)

//go:noescape
func amxFinish64h(sums *int32, sc *byte, gstride int, x *byte, ldx, ng int, out *float32, ldo int)

//go:noescape
func amxFinish128h(sums *int32, sc *byte, gstride int, x *byte, ldx, ng int, out *float32, ldo int)

// amxUnpack4 widens ng groups of a 4-bit pack block at src (cpg chunks
// of 64 bytes, then trail bytes of scales and biases, per group) into
// the 8-bit layout at dst.
//
//go:noescape
func amxUnpack4(dst, src *byte, ng, cpg, trail int)

// amxCPU says what the CPU lacks for the AMX path ("" when it has AMX-TILE
// and AMX-INT8, CPUID leaf 7 EDX bits 24 and 25, with the VNNI kernels'
// AVX-512): a CPUID read at start-up, nothing asked of the OS.
var amxCPU = func() string {
	if !q8Kernels {
		return "no AVX512_VNNI"
	}
	if _, _, _, edx := cpuid(7, 0); edx&(1<<24) == 0 || edx&(1<<25) == 0 {
		return fmt.Sprintf("no AMX-TILE/AMX-INT8 (CPUID.7.0:EDX %#x)", edx)
	}
	return ""
}()

// amxTiles reports whether this process may run tile instructions,
// asking the OS for the tile state on first use (amxPermit) — only when
// the path is switched on or a test runs the tiles, never at start-up
// otherwise — and says why not when it may not.
var amxTiles = sync.OnceValues(func() (bool, string) {
	if amxCPU != "" {
		return false, amxCPU
	}
	if err := amxPermit(); err != nil {
		return false, err.Error()
	}
	return true, ""
})

// amxOn switches the AMX path. It is off unless MLXGO_AMX=1: the tile
// part has so far run only as its emulation (no machine at hand had the
// tile state enabled), and TestQ8AMX runs the tiles themselves wherever
// the hardware allows, whatever this switch says.
var amxOn atomic.Bool

// amxProducts counts the products the AMX path ran (tests read it).
var amxProducts atomic.Int64

func init() {
	if os.Getenv("MLXGO_AMX") == "1" {
		ok, _ := amxTiles()
		amxOn.Store(ok)
	}
}

// AMXInt8 reports whether int8-activation products of 16 or more x rows
// (a prefill's) run on AMX tiles in this process: MLXGO_AMX=1 on a CPU
// with AMX-INT8 whose OS grants the tile state.
func AMXInt8() bool { return amxOn.Load() }

// amxMinRows is the fewest x rows a product runs on the tiles with: a
// tile holds 16, and fewer (a batched decode step) waste it.
const amxMinRows = 16

// amxCfg is the 64-byte tile configuration per group size (index
// amxGroup): palette 1; tiles 0 and 3 x rows (16 × the group's columns, at
// most 64 bytes), 1 and 4 codes (columns/4 rows × 64 bytes), 2 and 5 the
// int32 sums (16 × 16).
var amxCfg = func() (c [3][64]byte) {
	for i, gs := range [3]int{32, 64, 128} {
		cols := min(gs, 64)
		c[i][0] = 1
		for _, t := range [2]int{0, 3} {
			c[i][16+2*t] = byte(cols)
			c[i][48+t] = 16
		}
		for _, t := range [2]int{1, 4} {
			c[i][16+2*t] = 64
			c[i][48+t] = byte(cols / 4)
		}
		for _, t := range [2]int{2, 5} {
			c[i][16+2*t] = 64
			c[i][48+t] = 16
		}
	}
	return c
}()

// amxGroup is the index of group size gs (32, 64, 128) in amxCfg,
// amxDotsFn and amxFinishFn.
func amxGroup(gs int) int { return bits.TrailingZeros(uint(gs)) - 5 }

// amxDotsFn is the tile part by group size 32, 64, 128 (the tests put
// an emulation in its place where the CPU has no tiles).
var amxDotsFn = [3]func(w *byte, gstride int, x *byte, ldx, ng int, sums *int32, cfg *byte){amxDots32, amxDots64, amxDots128}

// amxFinishFn are the float32 steps by [half][group size 32, 64, 128].
var amxFinishFn = [2][3]func(sums *int32, sc *byte, gstride int, x *byte, ldx, ng int, out *float32, ldo int){
	{amxFinish32, amxFinish64, amxFinish128},
	{amxFinish32h, amxFinish64h, amxFinish128h},
}

// amxUsable reports whether a product of rows x rows with group size gs
// runs on the tiles.
func amxUsable(rows, gs int) bool {
	return rows >= amxMinRows && (gs == 32 || gs == 64 || gs == 128) && amxOn.Load()
}

// amxStage is the per-call scratch of amxRun: a widened 4-bit block,
// the sums of every group, one 16×16 float32 tail block.
var amxStage sizedScratch

// amxRun is q8Run's product on the tiles: xq holds the quantized x rows
// (ldx bytes each) padded with zero rows to a multiple of 16.
func amxRun(out []float32, xq []byte, rows, ldx int, p *q8pack, n, k, gs int) {
	amxProducts.Add(1)
	ng, gi := k/gs, amxGroup(gs)
	h := 0
	if p.half {
		h = 1
	}
	dots, fin, cfg := amxDotsFn[gi], amxFinishFn[h][gi], &amxCfg[gi][0]
	codes, trail := gs*16, p.trail() // a group's codes in the 8-bit layout, then its scales
	gstride := codes + trail
	wide := 0 // float32 words of a widened 4-bit block
	if p.bits == 4 {
		wide = ng * gstride / 4
	}
	xb := (rows + 15) / 16
	parallelFor(p.nblk, 1, func(lo, hi int) {
		sp := amxStage.get(wide + 256*ng + 256)
		defer amxStage.put(sp)
		s := *sp
		sums := (*int32)(unsafe.Pointer(&s[wide]))
		tail := s[wide+256*ng:]
		for b := lo; b < hi; b++ {
			w := &p.buf.data[b*p.blk]
			if p.bits == 4 {
				wb := (*byte)(unsafe.Pointer(&s[0]))
				amxUnpack4(wb, w, ng, gs/8, trail)
				w = wb
			}
			sc := (*byte)(unsafe.Add(unsafe.Pointer(w), codes))
			n0 := b * 16
			for j := range xb {
				m0 := j * 16
				x := &xq[m0*ldx]
				dots(w, gstride, x, ldx, ng, sums, cfg)
				if n0+16 <= n && m0+16 <= rows {
					fin(sums, sc, gstride, x, ldx, ng, &out[m0*n+n0], n*4)
					continue
				}
				fin(sums, sc, gstride, x, ldx, ng, &tail[0], 64)
				cols := min(16, n-n0)
				for i := range min(16, rows-m0) {
					o := (m0+i)*n + n0
					copy(out[o:o+cols], tail[i*16:])
				}
			}
		}
	})
}

// AMXStatus says why the AMX path is off ("" when on).
func AMXStatus() string {
	switch {
	case amxOn.Load():
		return ""
	case amxCPU != "":
		return amxCPU
	case os.Getenv("MLXGO_AMX") == "1":
		_, why := amxTiles()
		return why
	}
	return "off unless MLXGO_AMX=1"
}
