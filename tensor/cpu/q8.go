package cpu

import (
	"math"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

//go:generate go run gen_q8.go

// Int8 activations (opt-in): x·Wᵀ for 4-bit and 8-bit affine-quantized
// model weights computed as llama.cpp computes its quantized products —
// each x row is quantized to int8 per group of the weight's group size
// (d = max|x|/127, x8 = round-half-even(x/d)), every group's integer dot
// Σ q·x8 is exact (AVX512_VNNI VPDPBUSD), and the row's float32 result
// is Σ_g (s_g·d_g)·Σq·x8 + b_g·(d_g·Σx8) over the groups in order. That is
// the exact product of the dequantized weight with the quantized x
// rounded once per group, so the only approximation is x's int8
// rounding (its drift is measured in BENCHMARKS.md). A row's bits depend
// only on that row: the kernel for one x row and for eight run the same
// operations on it, so batched decode keeps token-level invariance.
//
// The weights are repacked on first use into 16-row interleaved blocks
// (q8pack), kept beside the checkpoint's own bytes for as long as they
// live; the checkpoint's pages are then no longer read by these products,
// so when they are borrowed (a checkpoint's read-only mmap) the kernel is
// asked to reclaim the codes' pages after the repack (dropPages): the
// resident set then holds the pack instead of both. Anything that reads
// the codes later (an embedding lookup of a tied matrix, say) faults the
// pages it touches back in from the file.

// int8Act is the process-wide switch; MLXGO_INT8_ACTIVATIONS=1 sets it at
// start.
var int8Act atomic.Bool

func init() {
	if os.Getenv("MLXGO_INT8_ACTIVATIONS") == "1" {
		int8Act.Store(true)
	}
}

// SetInt8Activations turns int8 activations on or off for every later
// quantized product of this process (see Int8ActivationsSupported).
// Results change bits: set it before generating, not between the steps
// of a generation whose tokens should match a run without it.
func SetInt8Activations(on bool) { int8Act.Store(on) }

// Int8Activations reports whether int8 activations are on.
func Int8Activations() bool { return int8Act.Load() }

// Int8ActivationsSupported reports whether this CPU runs the int8 kernels
// (AVX512_VNNI); without it the switch has no effect.
func Int8ActivationsSupported() bool { return q8Kernels }

// q8Usable reports whether x·Wᵀ with w takes the int8 path: the switch on,
// the kernels present, 4- or 8-bit plain (not paged) model weights
// (K above 512) that a buffer owns so their repack can be kept.
func q8Usable(w qmat) bool {
	return int8Act.Load() && q8Kernels && w.owner != nil && w.pg == nil &&
		(w.bits == 4 || w.bits == 8) && w.cols > 512 && w.gs%16 == 0 && w.cols%w.gs == 0
}

// q8pack is one weight matrix repacked for the kernels: rows padded to a
// multiple of 16; block b (rows 16b..16b+15) is blk bytes; in it, group g
// is gs/8 chunks of codes then the 16 rows' scales and biases: bfloat16
// (32 bytes each) when the checkpoint's are (half), else float32 (64).
// A chunk covers 8 columns: for 4-bit one 64-byte vector whose byte 4i+j
// holds row i's column j in its low nibble and column j+4 in its high
// nibble; for 8-bit two vectors, columns j and j+4 of row i at byte 4i+j.
type q8pack struct {
	buf       *buffer
	bits      int
	half      bool
	nblk, blk int // row blocks, bytes per block
}

// trail is the bytes of a group's scales and biases, after its codes.
func (p *q8pack) trail() int {
	if p.half {
		return 64
	}
	return 128
}

// q8key names one matrix inside a buffer.
type q8key struct {
	p                   uintptr
	rows, cols, gs, bit int
}

// q8entry builds a pack once.
type q8entry struct {
	once sync.Once
	p    atomic.Pointer[q8pack] // set once built (Int8Packs reads it meanwhile)
}

// q8packs are the packs built for each buffer, dropped with it.
var q8packs struct {
	sync.Mutex
	m map[*buffer]map[q8key]*q8entry
}

// q8For returns w's pack, building it on first use.
func q8For(w qmat) *q8pack {
	k := q8key{uintptr(unsafe.Pointer(&w.words[0])), w.rows, w.cols, w.gs, w.bits}
	q8packs.Lock()
	if q8packs.m == nil {
		q8packs.m = map[*buffer]map[q8key]*q8entry{}
	}
	byBuf := q8packs.m[w.owner]
	if byBuf == nil {
		byBuf = map[q8key]*q8entry{}
		q8packs.m[w.owner] = byBuf
		w.owner.onDrop = q8Forget
	}
	e := byBuf[k]
	if e == nil {
		e = &q8entry{}
		byBuf[k] = e
	}
	q8packs.Unlock()
	e.once.Do(func() { e.p.Store(q8Build(w)) })
	return e.p.Load()
}

// q8Forget releases the packs of a buffer whose last reference dropped.
func q8Forget(b *buffer) {
	q8packs.Lock()
	byBuf := q8packs.m[b]
	delete(q8packs.m, b)
	q8packs.Unlock()
	for _, e := range byBuf {
		e.once.Do(func() {}) // a build in flight has finished
		if p := e.p.Load(); p != nil {
			p.buf.drop()
		}
	}
}

// Int8Packs reports the int8 repacks alive in this process: how many
// weight matrices have one and their bytes (memory held beside the
// checkpoint's own, see SetInt8Activations).
func Int8Packs() (packs int, bytes int64) {
	q8packs.Lock()
	defer q8packs.Unlock()
	for _, m := range q8packs.m {
		for _, e := range m {
			if p := e.p.Load(); p != nil {
				packs++
				bytes += int64(len(p.buf.data))
			}
		}
	}
	return packs, bytes
}

// q8Build repacks w (see q8pack).
func q8Build(w qmat) *q8pack {
	ng, wpr := w.groups(), w.wordsPerRow()
	cpgB := w.gs / 2 * 16 // 4-bit: gs/8 chunks of 64 bytes
	if w.bits == 8 {
		cpgB = w.gs * 16
	}
	p := &q8pack{bits: w.bits, half: w.sdt == tensor.BFloat16}
	trail := p.trail()
	p.nblk = (w.rows + 15) / 16
	p.blk = ng * (cpgB + trail)
	p.buf = alloc(p.nblk*p.blk, tensor.Uint8)
	parallelFor(p.nblk, 4, func(lo, hi int) {
		sv := make([]float32, 16*ng)
		bv := make([]float32, 16*ng)
		for b := lo; b < hi; b++ {
			dst := p.buf.data[b*p.blk : (b+1)*p.blk]
			r0, nr := b*16, min(16, w.rows-b*16)
			clear(sv)
			clear(bv)
			w.rowScales(sv, bv, r0, r0+nr)
			for i := range nr {
				row := w.words[(r0+i)*wpr : (r0+i+1)*wpr]
				for g := range ng {
					gd := dst[g*(cpgB+trail):]
					for c := range w.gs / 8 {
						if w.bits == 4 {
							v := row[g*w.gs/8+c] // columns 8c..8c+7 of the group
							u := spread4(v&0xffff) | spread4(v>>16)<<4
							putU32(gd[c*64+4*i:], u)
						} else {
							putU32(gd[c*128+4*i:], row[g*w.gs/4+2*c])
							putU32(gd[c*128+64+4*i:], row[g*w.gs/4+2*c+1])
						}
					}
				}
			}
			for g := range ng {
				gd := dst[g*(cpgB+trail)+cpgB:]
				for i := range 16 {
					var s, bb float32
					if i < nr {
						s, bb = sv[i*ng+g], bv[i*ng+g]
					}
					if p.half { // widened from bfloat16: the top half is exact
						putU16(gd[2*i:], uint16(math.Float32bits(s)>>16))
						putU16(gd[32+2*i:], uint16(math.Float32bits(bb)>>16))
						continue
					}
					putU32(gd[4*i:], math.Float32bits(s))
					putU32(gd[64+4*i:], math.Float32bits(bb))
				}
			}
		}
	})
	if w.owner.readOnly {
		dropPages(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w.words))), 4*len(w.words)))
	}
	return p
}

// spread4 moves the four nibbles of v into the low halves of four bytes.
func spread4(v uint32) uint32 {
	return v&0xf | (v&0xf0)<<4 | (v&0xf00)<<8 | (v&0xf000)<<12
}

func putU16(b []byte, v uint16) {
	_ = b[1]
	b[0], b[1] = byte(v), byte(v>>8)
}

func putU32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// q8RowBytes is one quantized x row's length: per group gs int8 values,
// then float32 d and d·Σx8.
func q8RowBytes(k, gs int) int { return k / gs * (gs + 8) }

// q8QuantizeRef quantizes one x row (k values, groups of gs) into dst in
// the kernels' layout. A group holding NaN or ±Inf gets d = NaN (its
// products are NaN, as the float path's would be).
func q8QuantizeRef(dst []byte, x []float32, gs int) {
	for g := range len(x) / gs {
		xs, gd := x[g*gs:(g+1)*gs], dst[g*(gs+8):]
		var amax float32
		bad := false
		for _, v := range xs {
			a := abs32(v)
			if !(a <= math.MaxFloat32) {
				bad = true
			}
			if a > amax {
				amax = a
			}
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		var sum int32
		for j, v := range xs {
			q := int32(0)
			if !bad {
				q = int32(rint(v * id))
				q = max(-127, min(127, q))
			}
			gd[j] = byte(int8(q))
			sum += q
		}
		if bad {
			d = float32(math.NaN())
		}
		putU32(gd[gs:], math.Float32bits(d))
		putU32(gd[gs+4:], math.Float32bits(d*float32(sum)))
	}
}

// q8Quantize quantizes one x row (see q8QuantizeRef).
var q8Quantize = q8QuantizeRef

// q8Stage holds the quantized x rows of a product.
var q8Stage sizedScratch

// q8Run computes out[m, n] = x[m]·dequant(w)[n] with int8 activations
// (q8Usable(w) must hold).
func q8Run(out, x []float32, rows int, w qmat) {
	p := q8For(w)
	n, k, gs := w.rows, w.cols, w.gs
	ldx := q8RowBytes(k, gs)
	amx := amxUsable(rows, gs)
	staged := rows
	if amx { // the tiles take x rows 16 at a time: zero rows pad the last
		staged = (rows + 15) / 16 * 16
	}
	sp := q8Stage.get((staged*ldx + 3) / 4)
	defer q8Stage.put(sp)
	xq := unsafe.Slice((*byte)(unsafe.Pointer(&(*sp)[0])), staged*ldx)
	clear(xq[rows*ldx:])
	// a row is a few microseconds: a batched decode's 8 rows split over
	// the workers instead of running on the caller alone
	parallelFor(rows, 2, func(lo, hi int) {
		for m := lo; m < hi; m++ {
			q8Quantize(xq[m*ldx:(m+1)*ldx], x[m*k:(m+1)*k], gs)
		}
	})
	if amx {
		amxRun(out, xq, rows, ldx, p, n, k, gs)
		return
	}
	ng := k / gs
	parallelFor(p.nblk, 2, func(lo, hi int) {
		var tail [8 * 16]float32
		for b := lo; b < hi; b++ {
			wb := &p.buf.data[b*p.blk]
			n0 := b * 16
			for m0 := 0; m0 < rows; m0 += 8 {
				r := min(8, rows-m0)
				if n0+16 <= n {
					q8Kernel(p.bits, r, p.half, wb, &xq[m0*ldx], ldx, ng, gs/8, &out[m0*n+n0], n*4)
					continue
				}
				q8Kernel(p.bits, r, p.half, wb, &xq[m0*ldx], ldx, ng, gs/8, &tail[0], 64)
				for i := range r {
					copy(out[(m0+i)*n+n0:(m0+i+1)*n], tail[i*16:])
				}
			}
		}
	})
}
