package cpu

import "unsafe"

// Non-transposed quantized matmul (x @ W, W packed along its columns) for
// few x rows and many W rows: probs @ V in quantized-KV attention, where
// the rows of W are the cached tokens (K up to the context length) and
// its columns the head dimension (N of 64–256), so M·N is tiny and K long.
//
// out[m, n] = Σ_k x[m, k]·(s[k, g(n)]·q[k, n] + b[k, g(n)]). Each packed
// row is dequantized once, in registers, 32 columns at a time (one FMA
// per 16 values: a 32-column block lies in one group since groups are 32,
// 64 or 128), and every x row then adds x[m, k] times it into its own
// register accumulators, so the bias needs no separate term and each
// weight byte is read once per call. K is cut into fixed segments
// (M·N is too small to split) whose partial sums are added at the end, in
// order.
//
// Precision: x is used as float32 (exactly its bfloat16, float16 or
// float32 value); the dequantized weight s·q + b is rounded once to
// float32 (as the plain-Go path does), and the rest is float32
// accumulation in order within a segment of K, the segments' sums then
// added in K order (so results depend on neither timing nor the worker
// count, and a row's on no other row): the error
// stays within float32 accumulation error of Σ_k |x·w|. TestQMatmulNExact
// holds it to that bound against float64, and to exact equality on data
// where every step is exact.

// qmmNMaxRows is the most x rows one kernel pass accumulates (two
// accumulators per row in 16 of the 32 vector registers); more rows run
// in passes of up to this many.
const qmmNMaxRows = 8

// qmmNSegment is the length of the fixed K segments qmmNFast sums
// separately (and in parallel) before adding them in order.
const qmmNSegment = 1024

// qmmNChunkBytes bounds the packed bytes of one chunk of rows, so a
// chunk stays in L1 while its column blocks are walked one after another.
const qmmNChunkBytes = 16 << 10

// qmmNUsable reports whether qmmNFast can compute this product: 4- or
// 8-bit codes, whole 32-column blocks, AVX-512.
func qmmNUsable(w qmat) bool {
	return hasAVX512 && (w.bits == 4 || w.bits == 8) && w.cols%32 == 0 &&
		(w.gs == 32 || w.gs == 64 || w.gs == 128)
}

// qmmNPool recycles the per-worker scratch (transposed x chunk, float32
// scales and biases): decode calls qmmNFast once per KV head and layer.
var qmmNPool scratchPool[float32]

// qmmNFast computes out[m, n] += Σ_k x[m, k]·W[k, n] for the K×N matrix w
// (packed along N) with qmmNKern; qmmNUsable(w) must hold.
func qmmNFast(out, x []float32, rows int, w qmat) {
	kin, n, ng := w.rows, w.cols, w.groups()
	ldw := w.wordsPerRow() * 4
	nb := n / 32
	kc := max(16, min(512, qmmNChunkBytes/ldw)) &^ 7
	wb := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.words))), len(w.words)*4)
	passes := (rows + qmmNMaxRows - 1) / qmmNMaxRows
	blk := nb * qmmNMaxRows * 32 // one pass's partial sums, kernel lane order
	// K is summed in fixed segments of qmmNSegment rows, each from zero,
	// then the segments' sums are added in K order: workers take whole
	// segments, so the result depends on neither their count nor timing
	segs := (kin + qmmNSegment - 1) / qmmNSegment
	parts := make([][]float32, segs)
	parallelFor(segs, 1, func(s0, s1 int) {
		buf := qmmNPool.get(kc*qmmNMaxRows + 2*kc*ng)
		defer qmmNPool.put(buf)
		f := *buf
		xt := f[:kc*qmmNMaxRows]
		sv := f[kc*qmmNMaxRows:][:kc*ng]
		bv := f[kc*qmmNMaxRows+kc*ng:][:kc*ng]
		for seg := s0; seg < s1; seg++ {
			lo, hi := seg*qmmNSegment, min(kin, (seg+1)*qmmNSegment)
			part := make([]float32, passes*blk)
			for k0, nk := lo, 0; k0 < hi; k0 += nk {
				nk = min(kc, hi-k0, w.run(k0)) // one stored run
				w.rowScales(sv, bv, k0, k0+nk)
				for p := range passes {
					m0 := p * qmmNMaxRows
					mr := min(qmmNMaxRows, rows-m0)
					for m := range mr {
						xr := x[(m0+m)*kin+k0 : (m0+m)*kin+k0+nk]
						for i, v := range xr {
							xt[i*qmmNMaxRows+m] = v
						}
					}
					for cb := range nb {
						g := cb * 32 / w.gs
						qmmNKern(&wb[w.phys(k0)*ldw+cb*32*w.bits/8], ldw, &xt[0], &sv[g], &bv[g], 4*ng, nk, mr,
							&part[p*blk+cb*qmmNMaxRows*32], w.bits)
					}
				}
			}
			parts[seg] = part
		}
	})
	for _, part := range parts {
		for m := range rows {
			p, mm := m/qmmNMaxRows, m%qmmNMaxRows
			for cb := range nb {
				s := part[p*blk+(cb*qmmNMaxRows+mm)*32:][:32]
				o := out[m*n+cb*32:][:32]
				if w.bits == 4 {
					// lanes 0..15 hold the even columns, 16..31 the odd
					for l := range 16 {
						o[2*l] += s[l]
						o[2*l+1] += s[16+l]
					}
				} else {
					for j, v := range s {
						o[j] += v
					}
				}
			}
		}
	}
}
