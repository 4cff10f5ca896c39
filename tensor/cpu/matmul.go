package cpu

import (
	"runtime"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

// Dense matmul. Operands are read through their strides (a transposed view
// costs nothing extra): blocks of A and B are packed into float32 panels
// (which also widens bfloat16 and float16), and an 8×32 micro-kernel
// accumulates in float32. A few rows against a transposed weight (decode)
// skip packing B and transpose it in registers instead (gemvT), with the
// same arithmetic.

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
		} else {
			gemmDispatch(cm, &av, &bv, m, n, k)
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

// The order of a product's arithmetic is fixed per output element, so a
// row's result does not depend on how many rows the call holds (a T-token
// prefill equals T one-token steps bit for bit), nor on the worker count:
// c[i, j] = Σ over k blocks of kc (in order) of that block's float32 FMA
// chain a[i, p]·b[p, j], p ascending from zero, each block's sum added to
// c in turn. Every path below (gemvT and gemmFew for a few rows, gemm for
// many) computes exactly that, and work is split over rows and columns
// only. (AVX2 runs the same FMA chains as AVX-512; without either the
// portable micro-kernel rounds the product and the sum separately: the
// same order, other bits, on every path alike.)

// gemmDispatch computes c (m×n, dense) = A·B.
func gemmDispatch(c []float32, a, b *mview, m, n, k int) {
	if m <= gemvMaxRows && hasAVX512 && packKind(b.dt) >= 0 && b.rs == 1 && b.cs > 1 {
		gemvT(c, a, b, m, n, k)
		return
	}
	if m <= mc {
		gemmFew(c, a, b, m, n, k)
		return
	}
	gemm(c, a, b, m, n, k)
}

// gemvMaxRows is the most rows gemvT takes: past it, packing B once for
// every row (gemmFew) costs less than transposing it per row group.
const gemvMaxRows = 8

// gemvZeros stands in for the weight rows past n in gemvT's last group.
var gemvZeros [kc * 4]byte

// gemvT is the product for a few rows of A with a B whose columns are
// contiguous (x·Wᵀ for a weight W [N, K], as in decode): each worker takes
// groups of 16 columns and runs gemvT16 over them block by block, reading
// the weights once, in order, with no packing.
func gemvT(c []float32, a, b *mview, m, n, k int) {
	kp := (k + 15) &^ 15
	x := make([]float32, m*kp) // zero past k: the kernel's tail reads it
	for i := range m {
		a.run(x[i*kp:i*kp+k], i, 0, false)
	}
	kind, es := packKind(b.dt), b.dt.Size()
	groups := (n + 15) / 16
	grain := max(1, (1<<17)/max(1, k*16))
	zero := uintptr(unsafe.Pointer(&gemvZeros[0]))
	parallelFor(groups, grain, func(lo, hi int) {
		var rows [16]uintptr
		acc := make([]float32, m*16)
		for g := lo; g < hi; g++ {
			j0 := g * 16
			nv := min(16, n-j0)
			for p0 := 0; p0 < k; p0 += kc {
				for i := range rows {
					rows[i] = zero
					if i < nv {
						rows[i] = uintptr(unsafe.Pointer(&b.data[(b.off+p0*b.rs+(j0+i)*b.cs)*es]))
					}
				}
				clear(acc)
				gemvT16(&acc[0], &x[p0], 4*kp, &rows[0], min(kc, k-p0), kind, m)
				for i := range m {
					row := c[i*n+j0 : i*n+j0+nv]
					if p0 == 0 {
						copy(row, acc[i*16:])
						continue
					}
					for j := range row {
						row[j] += acc[i*16+j]
					}
				}
			}
		}
		runtime.KeepAlive(b.data)
	})
}

// gemmFew is gemm for at most mc rows (decode, small batches): A is packed
// once for every k block, and each worker takes whole column panels,
// packing a panel's block of B into a buffer that stays in L1 and using
// it at once for every row.
func gemmFew(c []float32, a, b *mview, m, n, k int) {
	clear(c)
	mp := (m + mr - 1) / mr * mr
	ap := make([]float32, mp*k)
	for p0 := 0; p0 < k; p0 += kc {
		packA(ap[p0*mp:], a, 0, p0, m, min(kc, k-p0))
	}
	panels := (n + nr - 1) / nr
	// enough panels per task to outweigh starting it
	grain := max(1, (1<<18)/max(1, mp*k*nr))
	parallelFor(panels, grain, func(lo, hi int) {
		bp := make([]float32, kc*nr)
		tile := make([]float32, mr*nr)
		for pj := lo; pj < hi; pj++ {
			jj := pj * nr
			nw := min(nr, n-jj)
			for p0 := 0; p0 < k; p0 += kc {
				kb := min(kc, k-p0)
				packPanel(bp, b, p0, jj, kb, nw)
				for ir := 0; ir < m; ir += mr {
					mh := min(mr, m-ir)
					apan := ap[p0*mp+ir*kb:]
					if mh == mr && nw == nr {
						microKernel(kb, apan, bp, c[ir*n+jj:], n)
						continue
					}
					clear(tile)
					microKernel(kb, apan, bp, tile, nr)
					for i := range mh {
						row := c[(ir+i)*n+jj:]
						for j := range nw {
							row[j] += tile[i*nr+j]
						}
					}
				}
			}
		}
	})
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
		for pj := lo; pj < hi; pj++ {
			packPanel(bp[pj*nr*kb:(pj+1)*nr*kb], b, p0, j0+pj*nr, kb, min(nr, nb-pj*nr))
		}
	})
}

// packPanel packs rows [p0, p0+kb) × cols [j0, j0+w) of B (w ≤ nr) as one
// panel: for each p, nr values (zero past w).
func packPanel(pan []float32, b *mview, p0, j0, kb, w int) {
	pan = pan[:nr*kb]
	if b.cs == 1 || b.rs != 1 {
		// rows of the panel are runs along B's columns
		for p := range kb {
			dst := pan[p*nr : p*nr+nr]
			b.run(dst[:w], p0+p, j0, false)
			clear(dst[w:])
		}
		return
	}
	// B's columns are contiguous (a transposed weight): 16 columns at a
	// time are transposed in registers, the rest read down the rows
	j := 0
	if kind := packKind(b.dt); hasAVX512 && kind >= 0 && b.cs > 0 && kb >= 16 {
		es := b.dt.Size()
		for ; j+16 <= w; j += 16 {
			src := unsafe.Pointer(&b.data[(b.off+p0*b.rs+(j0+j)*b.cs)*es])
			packT16(&pan[j], 4*nr, src, b.cs*es, kb/16, kind)
			for p := kb &^ 15; p < kb; p++ {
				for jj := j; jj < j+16; jj++ {
					pan[p*nr+jj] = b.at(p0+p, j0+jj)
				}
			}
		}
	}
	var tmp [kc]float32
	for ; j < nr; j++ {
		if j >= w {
			for p := range kb {
				pan[p*nr+j] = 0
			}
			continue
		}
		b.run(tmp[:kb], p0, j0+j, true)
		for p, v := range tmp[:kb] {
			pan[p*nr+j] = v
		}
	}
}

// packKind names dt for packT16 (-1: not a float type it reads).
func packKind(dt tensor.DType) int {
	switch dt {
	case tensor.Float32:
		return 0
	case tensor.BFloat16:
		return 1
	case tensor.Float16:
		return 2
	}
	return -1
}

// microKernel adds the product of a packed A panel (mr×kb) and a packed B
// panel (kb×nr) into c (mr rows, ldc apart).
func microKernel(kb int, a, b, c []float32, ldc int) {
	if hasAVX512 {
		_ = c[(mr-1)*ldc+nr-1]
		sgemm8x32(kb, &a[0], &b[0], &c[0], ldc)
		return
	}
	if hasAVX2 {
		_ = c[(mr-1)*ldc+nr-1]
		sgemm8x32Y(kb, &a[0], &b[0], &c[0], ldc)
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
