package cpu

import "unsafe"

// 4- and 8-bit quantized matmul x·Wᵀ on AVX2+FMA (machines without the
// AVX-512 kernels), for any number of x rows: decode (one row), batched
// decode (a few) and prefill (many) run one kernel, so each row's result
// is the same bits whatever rows it is computed with.
//
// As in qmvT, Σ_k x_k·(s_g·q_k + b_g) is computed as Σ_g b_g·X_g +
// Σ_g s_g·(Σ_{k∈g} q_k·x_k), X_g the group sums of x (once per call and
// row). The codes of each 32-code block are widened to float32 once and
// dotted with every x row of a pass of up to 8 rows (qmvA4, qmvA8), so a
// pass reads and decodes each weight byte once, whatever its row count.
// Per row and block the dot is one fixed chain of four 8-lane FMAs, then
// one FMA of the group scale into the row's accumulator, which started
// from the bias terms; the 8 lanes are summed once at the end in a fixed
// tree. Which rows share a pass, how the weight rows are split over
// workers and how K is cut into chunks (a chunk's accumulators are stored
// and reloaded exactly) change none of these operations.
//
// Precision: x is used as float32 (exactly its bfloat16, float16 or
// float32 value) and a code is exact in float32; each product q·x is
// exact inside its FMA, so the error is float32 accumulation of Σ|s·q·x|
// and Σ|b·x| (TestQMVAExact holds it to that bound against float64).

//go:generate go run gen_qmva.go

// qmvaChunkBytes bounds the x bytes one pass reads per K chunk, so that a
// pass's rows stay in L1 while the weight rows of a block stream past.
const qmvaChunkBytes = 16 << 10

// qmvaRowBlock is how many weight rows a worker runs every pass of x rows
// over before moving on (they stay in L2 meanwhile), and the smallest
// share of rows a worker takes.
const qmvaRowBlock = 16

// qmvaMaxRows is the most x rows one kernel pass carries (one 8-lane
// accumulator per row in Y8..Y15).
const qmvaMaxRows = 8

// qmvaUsable reports whether qmvA can compute x·Wᵀ for w: AVX2 and FMA,
// 4- or 8-bit codes, group size 32, 64 or 128 (so K is whole 32-code
// blocks).
func qmvaUsable(w qmat) bool {
	return hasAVX2 && (w.bits == 4 || w.bits == 8) && (w.gs == 32 || w.gs == 64 || w.gs == 128) &&
		w.cols%w.gs == 0 && w.cols > 0
}

// qmvaPool recycles qmvA's per-call and per-worker scratch.
var qmvaPool scratchPool[float32] // every user overwrites what it reads

// qmvA computes out[m, n] = Σ_k x[m, k]·W[n, k] for 4- or 8-bit codes;
// qmvaUsable(w) must hold.
func qmvA(out, x []float32, rows int, w qmat) {
	if rows == 0 || w.rows == 0 {
		return
	}
	n, k, gs, ng := w.rows, w.cols, w.gs, w.groups()
	bpr := k * w.bits / 8
	nbv := (ng + 7) / 8
	ngp := 8 * nbv
	cpg := gs / 32
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.words))), len(w.words)*4)
	kern := qmvA4
	if w.bits == 8 {
		kern = qmvA8
	}
	// passes of at most qmvaMaxRows x rows, sizes as even as possible
	passes := (rows + qmvaMaxRows - 1) / qmvaMaxRows
	nxMax := (rows + passes - 1) / passes
	ldx := xStride(k, nxMax)
	buf := qmvaPool.get(rows*ldx + rows*ngp)
	defer qmvaPool.put(buf)
	xl, gx := (*buf)[:rows*ldx], (*buf)[rows*ldx:]
	for m := range rows {
		prepQMVA(xl[m*ldx:m*ldx+k], gx[m*ngp:(m+1)*ngp], x[m*k:(m+1)*k], gs, w.bits)
	}
	// K chunks of whole groups, so that a pass's x chunk stays in L1
	cg := max(1, qmvaChunkBytes/(4*gs*nxMax))
	chunked := cg < ng
	pfd := 2 * bpr // the same chunk two weight rows on
	if !chunked {
		cg = ng
		pfd = 1024 // straight on along consecutive rows
	}
	parallelFor(n, qmvaRowBlock, func(r0, r1 int) {
		sb := qmvaPool.get(qmvaRowBlock*(2*ng+ngp) + qmvaRowBlock*qmvaMaxRows*8)
		defer qmvaPool.put(sb)
		f := *sb
		sv := f[:qmvaRowBlock*ng]
		bt := f[qmvaRowBlock*ng : 2*qmvaRowBlock*ng]
		bp := f[2*qmvaRowBlock*ng : qmvaRowBlock*(2*ng+ngp)]
		acc := f[qmvaRowBlock*(2*ng+ngp):]
		for b0 := r0; b0 < r1; b0 += qmvaRowBlock {
			b1 := min(b0+qmvaRowBlock, r1)
			w.rowScales(sv, bt, b0, b1)
			for r := range b1 - b0 {
				p := bp[r*ngp : (r+1)*ngp]
				copy(p, bt[r*ng:(r+1)*ng])
				clear(p[ng:])
			}
			for p, m0 := 0, 0; p < passes; p++ {
				nx := (rows - m0) / (passes - p) // the rest spread evenly
				if (rows-m0)%(passes-p) != 0 {
					nx++
				}
				for c0 := 0; c0 < ng; c0 += cg {
					c1 := min(ng, c0+cg)
					flags := 0
					if c0 == 0 {
						flags |= 1
					}
					if c1 == ng {
						flags |= 2
					}
					kern(&wb[b0*bpr+c0*gs*w.bits/8], bpr, &xl[m0*ldx+c0*gs], 4*ldx, c1-c0, cpg,
						&sv[c0], 4*ng, &bp[0], 4*ngp, nbv, &gx[m0*ngp], 4*ngp,
						&acc[0], &out[m0*n+b0], 4*n, b1-b0, pfd, flags, nx)
				}
				m0 += nx
			}
		}
	})
}

// xStride is how many floats apart qmvA and qmvZ lay the x rows of a
// pass of rows rows out: k rounded up so that consecutive rows start
// 64/rows cache lines apart modulo 64 lines (4 KiB). Rows a multiple of
// 4 KiB apart would put the same offset of every row in one L1 set, more
// lines than the set has ways once a pass has 8 or more rows.
func xStride(k, rows int) int {
	lines := (4*k + 63) / 64
	if rows <= 1 {
		return 16 * lines
	}
	shift := max(1, 64/rows)
	return 16 * (lines + ((shift-lines)%64+64)%64)
}

// prepQMVA lays one x row out for the kernels and fills its group sums
// (zero-padded to gx's length). For 4-bit codes each run of 16 values
// becomes its 8 even-indexed values then its 8 odd-indexed ones (the low
// and high nibbles of 8 packed bytes); 8-bit codes keep x's order. The
// group sums add four interleaved partial sums, merged in a fixed order.
func prepQMVA(xl, gx, x []float32, gs, bits int) {
	if bits == 4 {
		for c := 0; c+16 <= len(x); c += 16 {
			s, d := x[c:c+16], xl[c:c+16]
			for j := range 8 {
				d[j], d[8+j] = s[2*j], s[2*j+1]
			}
		}
	} else {
		copy(xl, x)
	}
	groupSums(gx, x, gs)
}

// groupSums writes the sum of each group of gs values of x to gx, then
// zeros to the rest of gx: four interleaved partial sums per group,
// merged in a fixed order.
func groupSums(gx, x []float32, gs int) {
	ng := len(x) / gs
	for g := range ng {
		v := x[g*gs : (g+1)*gs]
		var s0, s1, s2, s3 float32
		for j := 0; j < len(v); j += 4 {
			s0 += v[j]
			s1 += v[j+1]
			s2 += v[j+2]
			s3 += v[j+3]
		}
		gx[g] = (s0 + s1) + (s2 + s3)
	}
	clear(gx[ng:])
}
