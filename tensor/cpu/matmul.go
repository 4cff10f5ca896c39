package cpu

import (
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// Dense matmul. Operands are read through their strides (a transposed view
// costs nothing extra): blocks of A and B are packed into float32 panels
// (which also widens bfloat16 and float16), and an 8×32 micro-kernel
// accumulates in float32. Matrix-vector products (decode) skip packing.

const (
	mr = 8   // micro-kernel rows
	nr = 32  // micro-kernel columns
	kc = 256 // depth of a packed block
	mc = 64  // rows of a packed A block
	nc = 512 // columns of a packed B block
)

// mview is a strided 2-D view of dense storage: element (i, j) is at
// off + i·rs + j·cs.
type mview struct {
	data        []byte
	dt          tensor.DType
	off, rs, cs int
}

// at reads one element as float32.
func (v *mview) at(i, j int) float32 {
	p := v.off + i*v.rs + j*v.cs
	switch v.dt {
	case tensor.BFloat16:
		return tensor.BF16ToF32(*(*uint16)(unsafe.Pointer(&v.data[2*p])))
	case tensor.Float16:
		return tensor.F16ToF32(*(*uint16)(unsafe.Pointer(&v.data[2*p])))
	}
	return *(*float32)(unsafe.Pointer(&v.data[4*p]))
}

// run reads n consecutive elements of row i from column j into dst (or of
// column j from row i when alongRows), widening to float32.
func (v *mview) run(dst []float32, i, j int, alongRows bool) {
	step := v.cs
	if alongRows {
		step = v.rs
	}
	p := v.off + i*v.rs + j*v.cs
	es := v.dt.Size()
	if step == 1 {
		toF32(dst, v.data[p*es:(p+len(dst))*es], v.dt)
		return
	}
	for t := range dst {
		if alongRows {
			dst[t] = v.at(i+t, j)
		} else {
			dst[t] = v.at(i, j+t)
		}
	}
}

// Matmul multiplies the last two dims with batch broadcasting.
func (be *Backend) Matmul(a, b *tensor.Array, shape []int) *tensor.Array {
	dt := a.DType()
	out, oi := be.newArray(shape, dt)
	nd := len(shape)
	m, n := shape[nd-2], shape[nd-1]
	k := a.Shape()[a.NDim()-1]
	if out.Size() == 0 {
		return out
	}
	ai, bi := get(a), get(b)
	batch := shape[:nd-2]
	aStr := bcastStrides(batch, a.Shape()[:a.NDim()-2], ai.strides[:a.NDim()-2])
	bStr := bcastStrides(batch, b.Shape()[:b.NDim()-2], bi.strides[:b.NDim()-2])
	var c []float32
	if dt == tensor.Float32 {
		c = f32s(oi.buf.data)
	} else {
		c = make([]float32, m*n)
	}
	for bt := range numel(batch) {
		aoff, boff := ai.off, bi.off
		r := bt
		for d := len(batch) - 1; d >= 0; d-- {
			idx := r % batch[d]
			r /= batch[d]
			aoff += idx * aStr[d]
			boff += idx * bStr[d]
		}
		av := mview{ai.buf.data, dt, aoff, ai.strides[a.NDim()-2], ai.strides[a.NDim()-1]}
		bv := mview{bi.buf.data, dt, boff, bi.strides[b.NDim()-2], bi.strides[b.NDim()-1]}
		var cm []float32
		if dt == tensor.Float32 {
			cm = c[bt*m*n : (bt+1)*m*n]
		} else {
			cm = c
			clear(cm)
		}
		if k == 0 {
			clear(cm)
		} else if m == 1 {
			matvec(cm, &av, &bv, k, n)
		} else {
			gemm(cm, &av, &bv, m, n, k)
		}
		if dt != tensor.Float32 {
			es := dt.Size()
			fromF32(oi.buf.data[bt*m*n*es:(bt+1)*m*n*es], cm, dt)
		}
	}
	return out
}

// bcastStrides gives the element stride of each out batch dim in an
// operand with batch dims src (right-aligned; broadcast dims get 0).
func bcastStrides(batch, src, strides []int) []int {
	out := make([]int, len(batch))
	for d := range batch {
		sd := d - (len(batch) - len(src))
		if sd >= 0 && src[sd] != 1 {
			out[d] = strides[sd]
		}
	}
	return out
}

// matvec computes c[0:n] = a[0, :] · B for a 1×k row.
func matvec(c []float32, a, b *mview, k, n int) {
	x := make([]float32, k)
	a.run(x, 0, 0, false)
	switch {
	case b.rs == 1 && b.cs != 1:
		// B's columns are contiguous (a transposed weight): one dot per column
		parallelFor(n, 64, func(lo, hi int) {
			col := make([]float32, k)
			k64 := k &^ 63
			es := b.dt.Size()
			for j := lo; j < hi; j++ {
				p := b.off + j*b.cs
				switch {
				case hasAVX512 && b.dt == tensor.BFloat16 && k64 > 0:
					u := u16s(b.data[p*es : (p+k)*es])
					s := sdotbf16(&x[0], &u[0], k64)
					for t := k64; t < k; t++ {
						s += x[t] * tensor.BF16ToF32(u[t])
					}
					c[j] = s
				case hasAVX512 && b.dt == tensor.Float32 && k64 > 0:
					f := f32s(b.data[p*es : (p+k)*es])
					s := sdot(&x[0], &f[0], k64)
					for t := k64; t < k; t++ {
						s += x[t] * f[t]
					}
					c[j] = s
				default:
					b.run(col, 0, j, true)
					c[j] = dot32(x, col)
				}
			}
		})
	default:
		// rows of B: c += x[t]·B[t, :], each worker owning a column range
		parallelFor(n, 256, func(lo, hi int) {
			row := make([]float32, hi-lo)
			cc := c[lo:hi]
			clear(cc)
			for t := range k {
				b.run(row, t, lo, false)
				xt := x[t]
				for j, v := range row {
					cc[j] += xt * v
				}
			}
		})
	}
}

// gemm computes c (m×n, dense) = A·B with packed blocks.
func gemm(c []float32, a, b *mview, m, n, k int) {
	clear(c)
	bp := make([]float32, kc*((nc+nr-1)/nr*nr))
	for j0 := 0; j0 < n; j0 += nc {
		nb := min(nc, n-j0)
		panels := (nb + nr - 1) / nr
		for p0 := 0; p0 < k; p0 += kc {
			kb := min(kc, k-p0)
			packB(bp, b, p0, j0, kb, nb)
			// tasks: row blocks × column groups, enough for every worker
			mBlocks := (m + mc - 1) / mc
			groups := max(1, min(panels, (2*workers()+mBlocks-1)/mBlocks))
			per := (panels + groups - 1) / groups
			parallelFor(mBlocks*groups, 1, func(lo, hi int) {
				ap := make([]float32, mc*kb)
				tile := make([]float32, mr*nr)
				lastBlock := -1
				for t := lo; t < hi; t++ {
					ib, g := t/groups, t%groups
					i0 := ib * mc
					mb := min(mc, m-i0)
					if ib != lastBlock {
						packA(ap, a, i0, p0, mb, kb)
						lastBlock = ib
					}
					for pj := g * per; pj < min(panels, (g+1)*per); pj++ {
						jj := j0 + pj*nr
						nw := min(nr, n-jj)
						bpan := bp[pj*nr*kb:]
						for ir := 0; ir < mb; ir += mr {
							mh := min(mr, mb-ir)
							apan := ap[ir*kb:]
							if mh == mr && nw == nr {
								microKernel(kb, apan, bpan, c[(i0+ir)*n+jj:], n)
								continue
							}
							clear(tile)
							microKernel(kb, apan, bpan, tile, nr)
							for i := range mh {
								row := c[(i0+ir+i)*n+jj:]
								for j := range nw {
									row[j] += tile[i*nr+j]
								}
							}
						}
					}
				}
			})
		}
	}
}

// packA packs rows [i0, i0+mb) × cols [p0, p0+kb) of A into mr-row panels:
// panel r holds, for each p, its mr values (zero past the last row).
func packA(ap []float32, a *mview, i0, p0, mb, kb int) {
	tmp := make([]float32, kb)
	for ir := 0; ir < mb; ir += mr {
		pan := ap[ir*kb : ir*kb+mr*kb]
		for i := range mr {
			if ir+i >= mb {
				for p := range kb {
					pan[p*mr+i] = 0
				}
				continue
			}
			a.run(tmp, i0+ir+i, p0, false)
			for p, v := range tmp {
				pan[p*mr+i] = v
			}
		}
	}
}

// packB packs rows [p0, p0+kb) × cols [j0, j0+nb) of B into nr-column
// panels: panel j holds, for each p, its nr values (zero past the last column).
func packB(bp []float32, b *mview, p0, j0, kb, nb int) {
	panels := (nb + nr - 1) / nr
	parallelFor(panels, 4, func(lo, hi int) {
		tmp := make([]float32, max(kb, nr))
		for pj := lo; pj < hi; pj++ {
			pan := bp[pj*nr*kb : (pj+1)*nr*kb]
			w := min(nr, nb-pj*nr)
			if b.cs == 1 || b.rs != 1 {
				// rows of the panel are runs along B's columns
				for p := range kb {
					dst := pan[p*nr : p*nr+nr]
					b.run(dst[:w], p0+p, j0+pj*nr, false)
					clear(dst[w:])
				}
				continue
			}
			// B's columns are contiguous: read each down the rows
			for j := range nr {
				if j >= w {
					for p := range kb {
						pan[p*nr+j] = 0
					}
					continue
				}
				b.run(tmp[:kb], p0, j0+pj*nr+j, true)
				for p, v := range tmp[:kb] {
					pan[p*nr+j] = v
				}
			}
		}
	})
}

// microKernel adds the product of a packed A panel (mr×kb) and a packed B
// panel (kb×nr) into c (mr rows, ldc apart).
func microKernel(kb int, a, b, c []float32, ldc int) {
	if hasAVX512 {
		_ = c[(mr-1)*ldc+nr-1]
		sgemm8x32(kb, &a[0], &b[0], &c[0], ldc)
		return
	}
	var acc [mr * nr]float32
	for p := range kb {
		bv := b[p*nr : p*nr+nr]
		av := a[p*mr : p*mr+mr]
		for i, x := range av {
			row := acc[i*nr : i*nr+nr]
			for j, y := range bv {
				row[j] += x * y
			}
		}
	}
	for i := range mr {
		row := c[i*ldc : i*ldc+nr]
		for j := range row {
			row[j] += acc[i*nr+j]
		}
	}
}
