package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// qmvzModel is a Go model of the AVX-512 kernels (qmvz_amd64.s), lane by
// lane, so that qmvZ's driver (layouts, chunk and pass pointers, flags)
// can be tested on machines without AVX-512. FMA is modelled in float64
// (exact for these operands, then rounded once more: close to, not
// always, the hardware's bits; the tests here compare with a tolerance).
// bf models the B kernels: scales and biases read as bfloat16.
func qmvzModel(bits int, pair, bf bool) qmvzKern {
	return func(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
		f32 := func(p *float32, off int) float32 {
			return *(*float32)(unsafe.Add(unsafe.Pointer(p), off))
		}
		// sb reads the scale or bias at float32 offset off of the row at
		// byte offset row
		sb := func(p *float32, row, off int) float32 {
			if bf {
				h := *(*uint16)(unsafe.Add(unsafe.Pointer(p), row+off/2))
				return math.Float32frombits(uint32(h) << 16)
			}
			return f32(p, row+off)
		}
		fma := func(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }
		for r := range nrows {
			var z [16][qmvzChains][16]float32
			for i := range nx {
				if flags&1 != 0 {
					for j := range nbv {
						for l := range 16 {
							z[i][0][l] = fma(sb(b, r*ldb, 64*j+4*l), f32(gx, i*ldg+64*j+4*l), z[i][0][l])
						}
					}
				} else {
					for a := range qmvzChains {
						for l := range 16 {
							z[i][a][l] = f32(acc, ((r*nx+i)*qmvzChains+a)*64+4*l)
						}
					}
				}
			}
			wp := unsafe.Add(unsafe.Pointer(w), r*ldw)
			blk := 0
			for it := range nit {
				sa := sb(s, r*lds, 4*it*map[bool]int{false: 1, true: 2}[pair])
				sc := sa
				if pair {
					sc = sb(s, r*lds, 8*it+4)
				}
				for range cpi {
					var c [4][16]float32
					for l := range 16 {
						if bits == 4 {
							b0 := *(*byte)(unsafe.Add(wp, 32*blk+l))
							b1 := *(*byte)(unsafe.Add(wp, 32*blk+16+l))
							c[0][l], c[1][l], c[2][l], c[3][l] = float32(b0&15), float32(b0>>4), float32(b1&15), float32(b1>>4)
						} else {
							for v := range 4 {
								c[v][l] = float32(*(*byte)(unsafe.Add(wp, 64*blk+16*v+l)))
							}
						}
						c[0][l] *= sa
						c[1][l] *= sa
						c[2][l] *= sc
						c[3][l] *= sc
					}
					for i := range nx {
						for l := range 16 {
							xo := i*ldx + 256*blk + 4*l
							for v := range 4 {
								z[i][v%qmvzChains][l] = fma(c[v][l], f32(x, xo+64*v), z[i][v%qmvzChains][l])
							}
						}
					}
					blk++
				}
			}
			for i := range nx {
				if flags&2 != 0 {
					t := z[i][0]
					for a := 1; a < qmvzChains; a++ {
						for l := range 16 {
							t[l] += z[i][a][l]
						}
					}
					var h [8]float32
					for l := range 8 {
						h[l] = t[l] + t[l+8]
					}
					var q [4]float32
					for l := range 4 {
						q[l] = h[l] + h[l+4]
					}
					*(*float32)(unsafe.Add(unsafe.Pointer(out), i*ldo+4*r)) = (q[0] + q[1]) + (q[2] + q[3])
				} else {
					for a := range qmvzChains {
						for l := range 16 {
							*(*float32)(unsafe.Add(unsafe.Pointer(acc), ((r*nx+i)*qmvzChains+a)*64+4*l)) = z[i][a][l]
						}
					}
				}
			}
		}
	}
}

// TestQMVZDriver runs qmvZ with the Go model of its kernels in place of
// the assembly (on any machine): held to the float64 reference, and each
// row to the bits of the row computed alone, so that the driver's layouts,
// K chunks, passes and worker split are checked where AVX-512 is absent.
func TestQMVZDriver(t *testing.T) {
	saved, savedB := qmvzKernels, qmvzKernelsB
	defer func() { qmvzKernels, qmvzKernelsB = saved, savedB }()
	qmvzKernels = [2][2]qmvzKern{{qmvzModel(4, false, false), qmvzModel(4, true, false)}, {qmvzModel(8, false, false), qmvzModel(8, true, false)}}
	qmvzKernelsB = [2]qmvzKern{qmvzModel(8, false, true), qmvzModel(8, true, true)}
	r := rand.New(rand.NewPCG(41, 42))
	c := 0
	for _, bits := range []int{4, 8} {
		for _, gs := range []int{32, 64, 128} {
			for _, kmul := range []int{2, 4, 22} {
				for _, m := range []int{1, 3, 17} {
					dt := invDTypes[c%3]
					c++
					k := gs * kmul
					checkQMVA(t, r, qmvZ, func(qmat, tensor.DType) bool { return false }, bits, gs, k, 7, m, dt)
				}
			}
		}
	}
	checkQMVARows(t, qmvZ)
}

// TestQMVZScalesInPlace holds the 8-bit kernels that read bfloat16 scales
// and biases in place (qmvZ8B, qmvZ8pB) to the bits of the same products
// with the scales widened to float32 first, for every group size, row
// counts across pass sizes, K chunks (long rows) and float32, bfloat16 and
// float16 x; K whose groups are not whole vectors of 16 take the staged
// path either way.
func TestQMVZScalesInPlace(t *testing.T) {
	if !hasAVX512 {
		t.Skip("no AVX-512")
	}
	defer func(on bool) { qmvScalesInPlaceOn = on }(qmvScalesInPlaceOn)
	live := tensor.LiveArrays()
	r := rand.New(rand.NewPCG(43, 44))
	run := func(x []float32, q qmat, m int, inPlace bool) []float32 {
		qmvScalesInPlaceOn = inPlace
		out := make([]float32, m*q.rows)
		qmvZ(out, x, m, q)
		return out
	}
	c := 0
	for _, gs := range []int{32, 64, 128} {
		for _, k := range []int{1024, 2048, 8192, 1152} {
			for _, m := range []int{1, 3, 8, 13} {
				dt := invDTypes[c%3]
				c++
				n := 40 + c%7
				w := tensor.FromFloat32(randF32(r, n*k), []int{n, k}, tensor.BFloat16)
				wq, sc, bi := tensor.Quantize(w, gs, 8)
				xa := tensor.FromFloat32(randF32(r, m*k), []int{m, k}, dt)
				x := xa.Float32s()
				q := loadQ(wq, sc, bi, gs, 8)
				want, got := run(x, q.m, m, false), run(x, q.m, m, true)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("g%d/k%d/m%d/%s: out[%d] = %v in place, %v staged", gs, k, m, dt, i, got[i], want[i])
					}
				}
				q.release()
				tensor.Free(w, wq, sc, bi, xa)
			}
		}
	}
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
}
