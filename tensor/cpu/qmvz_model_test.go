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
func qmvzModel(bits int, pair bool) qmvzKern {
	return func(w *byte, ldw int, x *float32, ldx, nit, cpi int, s *float32, lds int, b *float32, ldb, nbv int, gx *float32, ldg int, acc, out *float32, ldo, nrows, pfd, flags, nx int) {
		f32 := func(p *float32, off int) float32 {
			return *(*float32)(unsafe.Add(unsafe.Pointer(p), off))
		}
		fma := func(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }
		for r := range nrows {
			var z [16][qmvzChains][16]float32
			for i := range nx {
				if flags&1 != 0 {
					for j := range nbv {
						for l := range 16 {
							z[i][0][l] = fma(f32(b, r*ldb+64*j+4*l), f32(gx, i*ldg+64*j+4*l), z[i][0][l])
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
				sa := f32(s, r*lds+4*it*map[bool]int{false: 1, true: 2}[pair])
				sb := sa
				if pair {
					sb = f32(s, r*lds+8*it+4)
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
						c[2][l] *= sb
						c[3][l] *= sb
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
	saved := qmvzKernels
	defer func() { qmvzKernels = saved }()
	qmvzKernels = [2][2]qmvzKern{{qmvzModel(4, false), qmvzModel(4, true)}, {qmvzModel(8, false), qmvzModel(8, true)}}
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
