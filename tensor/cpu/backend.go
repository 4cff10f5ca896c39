// Package cpu is mlxgo's pure-Go tensor backend: the embedded default,
// needing no cgo and nothing installed.
//
// Arrays are strided views of reference-counted buffers, so reshape,
// transpose, slicing and broadcasting are free. Kernels compute eagerly and
// in parallel over GOMAXPROCS goroutines; 16-bit floats are stored as such
// and computed in float32. Large buffers live on transparent huge pages.
//
// Results are token-invariant: a row's (a token's) output of every kernel
// does not depend on how many rows the call holds, how the call is
// chunked, or GOMAXPROCS. A T-token forward gives each token the bits of
// T one-token steps, and a row of a batch the bits of its solo run (for
// attention, keys a query must not see are masked causally, with false or
// with −∞; finite mask values are added as given). Each kernel fixes one
// reduction order per output element (blocks of k at fixed boundaries,
// fixed lane layouts, partial sums merged in order) and every path it
// picks by size follows it; work is split over output rows and columns,
// or over k only in pieces of a fixed size. invariance_test.go holds every
// kernel to this bit for bit. Which kernels run depends on the machine's
// instruction set (AVX-512, AVX512_BF16 or neither), so results are
// invariant on a machine, not across kinds of machine.
//
// Importing the package registers the backend as "cpu", which
// tensor.Default picks when nothing else is set.
package cpu

import (
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

func init() {
	tensor.Register("cpu", func() (tensor.Backend, error) { return Default, nil })
}

// Backend is the CPU backend. Its zero value is ready; Default is the shared instance.
type Backend struct{}

// Default is the process-wide CPU backend.
var Default = &Backend{}

var _ tensor.Backend = (*Backend)(nil)

// Name returns "cpu".
func (be *Backend) Name() string { return "cpu" }

// FromBytes makes an array from little-endian bytes; with noCopy the
// buffer borrows raw (read-only: writes go to a copy).
func (be *Backend) FromBytes(raw []byte, shape []int, dt tensor.DType, noCopy bool) *tensor.Array {
	if noCopy {
		b := &buffer{data: raw, readOnly: true}
		b.refs.Store(1)
		return tensor.NewArray(be, &impl{buf: b, strides: rowMajor(shape)}, shape, dt)
	}
	a, im := be.newArray(shape, dt)
	copy(im.buf.data, raw)
	return a
}

// Bytes returns a copy of a's elements, dense and row-major.
func (be *Backend) Bytes(a *tensor.Array) []byte {
	es := a.DType().Size()
	out := make([]byte, a.Size()*es)
	src := get(a)
	if isContiguous(a.Shape(), src.strides) {
		copy(out, bytesOf(src, a.Size(), es))
	} else {
		copyStrided(out, src, a.Shape(), es)
	}
	return out
}

// Full makes an array filled with v. It is stored densely (not as a broadcast view)
// so that in-place writes to it are cheap.
func (be *Backend) Full(shape []int, v float64, dt tensor.DType) *tensor.Array {
	a, im := be.newArray(shape, dt)
	n := numel(shape)
	if v == 0 || n == 0 {
		return a
	}
	es := dt.Size()
	one := tensor.ScalarBytes(v, dt)
	data := im.buf.data
	copy(data[:es], one)
	for filled := es; filled < n*es; filled *= 2 {
		copy(data[filled:n*es], data[:filled])
	}
	return a
}

// Arange makes start, start+step, ... (n values).
func (be *Backend) Arange(start, step float64, n int, dt tensor.DType) *tensor.Array {
	a, im := be.newArray([]int{n}, dt)
	es := dt.Size()
	for i := 0; i < n; i++ {
		copy(im.buf.data[i*es:], tensor.ScalarBytes(start+float64(i)*step, dt))
	}
	return a
}

// Free drops the array's reference to its buffer.
func (be *Backend) Free(a *tensor.Array) {
	if im, ok := a.Impl().(*impl); ok && im.buf != nil {
		im.buf.drop()
		im.buf = nil
	}
}

// Eval is a no-op: the CPU backend computes eagerly.
func (be *Backend) Eval(arrs ...*tensor.Array) {}

// AsyncEval is a no-op: the CPU backend computes eagerly.
func (be *Backend) AsyncEval(arrs ...*tensor.Array) {}

// ---- layout operations: views where possible ----

// Reshape returns a view when a is contiguous, else a reshaped copy.
func (be *Backend) Reshape(a *tensor.Array, shape []int) *tensor.Array {
	src := get(a)
	if isContiguous(a.Shape(), src.strides) {
		return be.view(src, src.off, shape, rowMajor(shape), a.DType())
	}
	c, owned := contig(a)
	out := be.view(c, c.off, shape, rowMajor(shape), a.DType())
	if owned {
		c.buf.drop()
	}
	return out
}

// Transpose permutes strides (a view).
func (be *Backend) Transpose(a *tensor.Array, perm []int) *tensor.Array {
	src := get(a)
	shape := make([]int, len(perm))
	strides := make([]int, len(perm))
	for i, p := range perm {
		shape[i] = a.Shape()[p]
		strides[i] = src.strides[p]
	}
	return be.view(src, src.off, shape, strides, a.DType())
}

// BroadcastTo gives broadcast dims stride 0 (a view).
func (be *Backend) BroadcastTo(a *tensor.Array, shape []int) *tensor.Array {
	src := get(a)
	strides := make([]int, len(shape))
	off := len(shape) - a.NDim()
	for i := range shape {
		if i < off {
			continue
		}
		if a.Shape()[i-off] == 1 && shape[i] != 1 {
			strides[i] = 0
		} else {
			strides[i] = src.strides[i-off]
		}
	}
	return be.view(src, src.off, shape, strides, a.DType())
}

// Slice offsets and scales strides (a view).
func (be *Backend) Slice(a *tensor.Array, start, stop, step []int) *tensor.Array {
	src := get(a)
	shape := make([]int, a.NDim())
	strides := make([]int, a.NDim())
	off := src.off
	for i := range shape {
		shape[i] = (stop[i] - start[i] + step[i] - 1) / step[i]
		strides[i] = src.strides[i] * step[i]
		if shape[i] > 0 {
			off += start[i] * src.strides[i]
		}
	}
	return be.view(src, off, shape, strides, a.DType())
}

// Contiguous returns a view of a when dense, else a dense copy.
func (be *Backend) Contiguous(a *tensor.Array) *tensor.Array {
	c, owned := contig(a)
	out := be.view(c, c.off, a.Shape(), rowMajor(a.Shape()), a.DType())
	if owned {
		c.buf.drop()
	}
	return out
}

// denseCopy returns a fresh dense copy of a (never sharing its buffer).
func (be *Backend) denseCopy(a *tensor.Array) (*tensor.Array, *impl) {
	out, im := be.newArray(a.Shape(), a.DType())
	src := get(a)
	es := a.DType().Size()
	if isContiguous(a.Shape(), src.strides) {
		copy(im.buf.data, bytesOf(src, a.Size(), es))
	} else {
		copyStrided(im.buf.data, src, a.Shape(), es)
	}
	return out, im
}

// writeRegion copies the dense-or-strided update into the strided region
// of dst described by start/step.
func writeRegion(dst *impl, dstShape []int, update *tensor.Array, start, step []int, es int) {
	region := update.Shape()
	n := numel(region)
	if n == 0 {
		return
	}
	nd := len(region)
	// an update whose rows are dense and whose storage is not dst's is
	// read in place (a row slice of a batch's keys, say); any other is
	// made contiguous first
	ui := get(update)
	direct := nd > 0 && ui.strides[nd-1] == 1 && ui.buf != dst.buf
	var ub []byte
	if !direct {
		uc, owned := contig(update)
		if owned {
			defer uc.buf.drop()
		}
		ub = bytesOf(uc, n, es)
	}
	off := dst.off
	strides := make([]int, len(region))
	for i := range region {
		off += start[i] * dst.strides[i]
		strides[i] = dst.strides[i] * step[i]
	}
	if nd == 0 {
		copy(dst.buf.data[off*es:(off+1)*es], ub)
		return
	}
	inner := region[nd-1]
	rows := n / inner
	data := dst.buf.data
	idx := make([]int, nd-1)
	for row := 0; row < rows; row++ {
		base := off
		for d := 0; d < nd-1; d++ {
			base += idx[d] * strides[d]
		}
		var src []byte
		if direct {
			so := ui.off
			for d := 0; d < nd-1; d++ {
				so += idx[d] * ui.strides[d]
			}
			src = ui.buf.data[so*es : (so+inner)*es]
		} else {
			src = ub[row*inner*es : (row+1)*inner*es]
		}
		if strides[nd-1] == 1 {
			copy(data[base*es:(base+inner)*es], src)
		} else {
			for j := 0; j < inner; j++ {
				p := (base + j*strides[nd-1]) * es
				copy(data[p:p+es], src[j*es:(j+1)*es])
			}
		}
		for d := nd - 2; d >= 0; d-- {
			idx[d]++
			if idx[d] < region[d] {
				break
			}
			idx[d] = 0
		}
	}
	_ = dstShape
}

// SliceUpdate copies a and writes update into the region.
func (be *Backend) SliceUpdate(a, update *tensor.Array, start, stop, step []int) *tensor.Array {
	out, im := be.denseCopy(a)
	writeRegion(im, a.Shape(), update, start, step, a.DType().Size())
	return out
}

// SliceAssign writes update into dst in place. When dst's buffer is shared
// (views, or borrowed read-only memory) dst first gets a private dense copy,
// so that earlier views keep their values.
func (be *Backend) SliceAssign(dst, update *tensor.Array, start, stop, step []int) {
	im := get(dst)
	if im.buf.refs.Load() > 1 || im.buf.readOnly || !isContiguous(dst.Shape(), im.strides) {
		es := dst.DType().Size()
		fresh := &impl{buf: alloc(dst.Size(), dst.DType()), strides: rowMajor(dst.Shape())}
		if isContiguous(dst.Shape(), im.strides) {
			copy(fresh.buf.data, bytesOf(im, dst.Size(), es))
		} else {
			copyStrided(fresh.buf.data, im, dst.Shape(), es)
		}
		im.buf.drop()
		dst.SetImpl(fresh)
		im = fresh
	}
	writeRegion(im, dst.Shape(), update, start, step, dst.DType().Size())
}

// Concatenate copies the inputs side by side along axis.
func (be *Backend) Concatenate(arrs []*tensor.Array, axis int, shape []int) *tensor.Array {
	out, im := be.newArray(shape, arrs[0].DType())
	es := arrs[0].DType().Size()
	outer := numel(shape[:axis])
	inner := numel(shape[axis+1:])
	rowOut := shape[axis] * inner * es
	off := 0
	for _, a := range arrs {
		c, owned := contig(a)
		w := a.Shape()[axis] * inner * es
		src := bytesOf(c, a.Size(), es)
		for o := 0; o < outer; o++ {
			copy(im.buf.data[o*rowOut+off:o*rowOut+off+w], src[o*w:(o+1)*w])
		}
		off += w
		if owned {
			c.buf.drop()
		}
	}
	return out
}

// shapeOf is a convenience for kernels that need a cloned shape.
func shapeOf(a *tensor.Array) []int { return slices.Clone(a.Shape()) }
