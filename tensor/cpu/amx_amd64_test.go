package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// amxDotsRef is amxDots for group size gs done as the tile instructions
// are specified (LDTILECFG's shapes, TILELOADD rows, TDPBSUD's signed ×
// unsigned byte quads summed into int32), in Go: the tests run it where
// the CPU has no tiles, and check amxDots against it where it has.
func amxDotsRef(gs int) func(w *byte, gstride int, x *byte, ldx, ng int, sums *int32, cfg *byte) {
	return func(w *byte, gstride int, x *byte, ldx, ng int, sums *int32, cfg *byte) {
		c := unsafe.Slice(cfg, 64)
		colsb := func(t int) int { return int(c[16+2*t]) | int(c[17+2*t])<<8 }
		rows := func(t int) int { return int(c[48+t]) }
		if c[0] != 1 || rows(0) != 16 || rows(2) != 16 || colsb(2) != 64 || colsb(1) != 64 || colsb(0) != 4*rows(1) {
			panic(fmt.Sprintf("tile configuration %v does not describe a 16×16 int8 product", c[:56]))
		}
		for t := range 3 {
			if rows(t) != rows(t+3) || colsb(t) != colsb(t+3) {
				panic("tiles 3-5 are shaped unlike 0-2")
			}
		}
		sub := gs / colsb(0)
		ws := unsafe.Slice(w, ng*gstride)
		xs := unsafe.Slice(x, 15*ldx+ng*(gs+8))
		out := unsafe.Slice(sums, 256*ng)
		for g := range ng {
			var acc [16][16]int32
			for s := range sub {
				for r := range 16 {
					a := xs[r*ldx+g*(gs+8)+s*colsb(0):]
					for k := range rows(1) {
						b := ws[g*gstride+s*1024+k*64:]
						for n := range 16 {
							for j := range 4 {
								acc[r][n] += int32(int8(a[4*k+j])) * int32(b[4*n+j])
							}
						}
					}
				}
			}
			for r := range 16 {
				copy(out[256*g+16*r:], acc[r][:])
			}
		}
	}
}

// TestQ8AMX checks the int8-activation products taken by the AMX path
// against q8Ref bit for bit (the VNNI kernels' arithmetic) and each row
// against itself alone (M = 1, the VNNI kernel), over both code widths,
// every group size the tiles take, each scale dtype, row counts that
// fill the tiles and ones that pad them, and weight rows that end
// mid-block: with the tile part emulated on every AVX-512 CPU (the
// layout, the 4-bit widening and the float32 steps in assembly), and on
// the tiles themselves where the CPU and OS allow.
func TestQ8AMX(t *testing.T) {
	if !q8Kernels {
		t.Skip("no AVX512_VNNI: the int8 kernels are not built for this CPU")
	}
	defer SetInt8Activations(Int8Activations())
	SetInt8Activations(true)
	defer amxOn.Store(amxOn.Load())
	live := tensor.LiveArrays()
	modes := []string{"emulated"}
	tiles, why := amxTiles()
	if tiles {
		modes = append(modes, "tiles")
	} else {
		t.Logf("the tiles themselves are not run: %s", why)
	}
	real := amxDotsFn
	defer func() { amxDotsFn = real }()
	for _, mode := range modes {
		amxDotsFn = real
		if mode == "emulated" {
			amxDotsFn = [3]func(w *byte, gstride int, x *byte, ldx, ng int, sums *int32, cfg *byte){amxDotsRef(32), amxDotsRef(64), amxDotsRef(128)}
		}
		amxOn.Store(true)
		before := amxProducts.Load()
		r := rand.New(rand.NewPCG(7, 9))
		for _, dt := range []tensor.DType{tensor.BFloat16, tensor.Float32} {
			for _, bits := range []int{4, 8} {
				for _, gs := range []int{32, 64, 128} {
					for _, c := range []struct{ k, n int }{{gs * (512/gs + 3), 40}, {1024, 16}} {
						for _, m := range []int{16, 17, 45} {
							checkQ8(t, r, dt, bits, gs, c.k, c.n, m)
						}
					}
				}
			}
		}
		if got := amxProducts.Load() - before; got == 0 {
			t.Fatalf("%s: no product took the AMX path", mode)
		}
		// the same product with the path off (the VNNI kernels)
		s := tensor.NewScope()
		const m, n, k, gs = 37, 72, 2048, 64
		w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16)
		wq, sc, bi := tensor.Quantize(w, gs, 4)
		x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, tensor.BFloat16)
		on := tensor.QuantizedMatmul(x, wq, sc, bi, true, gs, 4).Float32s()
		amxOn.Store(false)
		off := tensor.QuantizedMatmul(x, wq, sc, bi, true, gs, 4).Float32s()
		for i := range on {
			if math.Float32bits(on[i]) != math.Float32bits(off[i]) {
				t.Fatalf("%s: [%d] = %g on the AMX path, %g on VNNI", mode, i, on[i], off[i])
			}
		}
		s.Close()
	}
	if tiles { // the tile part against its emulation, sums for sums
		r := rand.New(rand.NewPCG(1, 2))
		for _, gs := range []int{32, 64, 128} {
			gi := amxGroup(gs)
			const ng = 5
			gstride, ldx := gs*16+128, q8RowBytes(ng*gs, gs)+24
			w := make([]byte, ng*gstride)
			x := make([]byte, 16*ldx)
			for i := range w {
				w[i] = byte(r.Uint32())
			}
			for i := range x {
				x[i] = byte(r.Uint32())
			}
			got, want := make([]int32, 256*ng), make([]int32, 256*ng)
			real[gi](&w[0], gstride, &x[0], ldx, ng, &got[0], &amxCfg[gi][0])
			amxDotsRef(gs)(&w[0], gstride, &x[0], ldx, ng, &want[0], &amxCfg[gi][0])
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("amxDots%d: sum %d (group %d, x row %d, weight row %d) = %d, want %d", gs, i, i/256, i%256/16, i%16, got[i], want[i])
				}
			}
		}
	}
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
}

// BenchmarkQ8AMX times int8-activation products of a 1B-shaped Llama's
// sizes on the tiles and on the VNNI kernels, alternated in one run
// (GFLOP/s of wall time at the run's GOMAXPROCS).
func BenchmarkQ8AMX(b *testing.B) {
	if ok, why := amxTiles(); !ok {
		b.Skipf("AMX-INT8 kernels not run: %s", why)
	}
	defer SetInt8Activations(Int8Activations())
	SetInt8Activations(true)
	defer amxOn.Store(amxOn.Load())
	r := rand.New(rand.NewPCG(3, 3))
	for _, bits := range []int{4, 8} {
		for _, s := range [][2]int{{2048, 2048}, {8192, 2048}, {2048, 8192}} {
			n, k := s[0], s[1]
			w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16)
			wq, sc, bi := tensor.Quantize(w, 64, bits)
			for _, m := range []int{16, 64, 256} {
				x := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, tensor.BFloat16)
				for _, kern := range []string{"vnni", "amx"} {
					b.Run(fmt.Sprintf("b%d_N%d_K%d_M%d_%s", bits, n, k, m, kern), func(b *testing.B) {
						amxOn.Store(kern == "amx")
						tensor.QuantizedMatmul(x, wq, sc, bi, true, 64, bits).Free() // the pack
						for b.Loop() {
							tensor.QuantizedMatmul(x, wq, sc, bi, true, 64, bits).Free()
						}
						b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
				x.Free()
			}
			tensor.Free(w, wq, sc, bi)
		}
	}
}
