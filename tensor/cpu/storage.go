package cpu

import (
	"slices"
	"sync/atomic"

	"github.com/mlxgo/mlxgo/tensor"
)

// buffer is reference-counted element storage shared by an array and its
// views. Large buffers come from anonymous memory on huge pages (see
// alloc_linux.go) and go back to the OS when the last reference drops.
type buffer struct {
	data     []byte
	refs     atomic.Int32
	release  func([]byte)  // returns data to the OS; nil for Go-heap and borrowed memory
	readOnly bool          // borrowed (an mmap'd checkpoint): never written
	onDrop   func(*buffer) // set under q8packs' lock: frees what was derived from data
}

func (b *buffer) retain() { b.refs.Add(1) }

func (b *buffer) drop() {
	if b.refs.Add(-1) == 0 {
		if b.onDrop != nil {
			b.onDrop(b)
		}
		if b.release != nil {
			b.release(b.data)
		}
		b.data = nil
	}
}

// impl is the CPU backend's storage handle for one array: a strided view
// of a buffer. Offsets and strides count elements, not bytes. Strides may
// be zero (broadcast views).
type impl struct {
	buf     *buffer
	off     int
	strides []int
}

// get returns a's CPU storage.
func get(a *tensor.Array) *impl { return a.Impl().(*impl) }

// rowMajor returns the contiguous strides of shape.
func rowMajor(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// isContiguous reports whether the view is dense row-major (size-1 dims may
// have any stride).
func isContiguous(shape, strides []int) bool {
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] != 1 && strides[i] != s {
			return false
		}
		s *= shape[i]
	}
	return true
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// alloc returns zeroed storage for n elements of dt.
func alloc(n int, dt tensor.DType) *buffer {
	size := n * dt.Size()
	b := &buffer{}
	b.data, b.release = getBuffer(size)
	b.refs.Store(1)
	return b
}

// newArray makes a contiguous, zeroed array of shape and dt.
func (be *Backend) newArray(shape []int, dt tensor.DType) (*tensor.Array, *impl) {
	im := &impl{buf: alloc(numel(shape), dt), strides: rowMajor(shape)}
	return tensor.NewArray(be, im, shape, dt), im
}

// view makes an array sharing im's buffer with a new layout.
func (be *Backend) view(im *impl, off int, shape, strides []int, dt tensor.DType) *tensor.Array {
	im.buf.retain()
	return tensor.NewArray(be, &impl{buf: im.buf, off: off, strides: slices.Clone(strides)}, shape, dt)
}

// contig returns a contiguous impl with a's values: a's own when it is
// already dense (owned=false), else a fresh copy the caller must drop.
func contig(a *tensor.Array) (im *impl, owned bool) {
	src := get(a)
	if isContiguous(a.Shape(), src.strides) {
		return src, false
	}
	dst := &impl{buf: alloc(a.Size(), a.DType()), strides: rowMajor(a.Shape())}
	copyStrided(dst.buf.data, src, a.Shape(), a.DType().Size())
	return dst, true
}

// bytesOf returns the raw bytes of a contiguous impl holding n elements of size es.
func bytesOf(im *impl, n, es int) []byte {
	return im.buf.data[im.off*es : (im.off+n)*es]
}

// Typed views of contiguous storage (ewView for the types used most). The
// data slices are allocated with at least 64-byte alignment, or come from
// a checkpoint mmap; x86-64 and arm64 both tolerate the rare unaligned
// case for these plain loads.

func f32s(b []byte) []float32 { return ewView[float32](b) }
func u16s(b []byte) []uint16  { return ewView[uint16](b) }
func u32s(b []byte) []uint32  { return ewView[uint32](b) }
func i32s(b []byte) []int32   { return ewView[int32](b) }
func i64s(b []byte) []int64   { return ewView[int64](b) }

// copyStrided gathers the strided view src of shape into dense dst
// (element size es), copying whole inner runs where the last dim is dense.
func copyStrided(dst []byte, src *impl, shape []int, es int) {
	n := numel(shape)
	if n == 0 {
		return
	}
	nd := len(shape)
	if nd == 0 {
		copy(dst[:es], src.buf.data[src.off*es:(src.off+1)*es])
		return
	}
	inner := shape[nd-1]
	innerStride := src.strides[nd-1]
	rows := n / inner
	data := src.buf.data
	parallelFor(rows, max(1, 4096/max(inner, 1)), func(lo, hi int) {
		idx := make([]int, nd-1)
		// position idx at row lo
		r := lo
		for d := nd - 2; d >= 0; d-- {
			idx[d] = r % shape[d]
			r /= shape[d]
		}
		for row := lo; row < hi; row++ {
			base := src.off
			for d := 0; d < nd-1; d++ {
				base += idx[d] * src.strides[d]
			}
			out := dst[row*inner*es : (row+1)*inner*es]
			if innerStride == 1 {
				copy(out, data[base*es:(base+inner)*es])
			} else {
				for j := 0; j < inner; j++ {
					p := (base + j*innerStride) * es
					copy(out[j*es:(j+1)*es], data[p:p+es])
				}
			}
			for d := nd - 2; d >= 0; d-- {
				idx[d]++
				if idx[d] < shape[d] {
					break
				}
				idx[d] = 0
			}
		}
	})
}
