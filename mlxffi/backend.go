package mlxffi

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/mlxgo/mlxgo/tensor"
)

func init() {
	// Registration loads nothing: the library is opened by the constructor,
	// the first time someone asks for the "mlx" backend.
	tensor.Register("mlx", func() (tensor.Backend, error) { return Open() })
}

// Backend runs the tensor API on MLX. Every method hands one closure to the
// MLX thread (see Do), or runs inline when called inside Run, so a Backend
// may be used from any goroutine; like
// every backend it panics with a *tensor.Error wrapping tensor.ErrBackend
// and MLX's message when MLX reports a failure.
//
// Arrays hold an mlx_array handle each and own it: Free (through
// Array.Free or a Scope) releases it exactly once. There are no
// finalizers, since the Go GC cannot see MLX's (possibly device) memory.
type Backend struct {
	stream uintptr
	device DeviceType
}

var _ tensor.Backend = (*Backend)(nil)

var (
	openOnce sync.Once
	openBe   *Backend
	openErr  error
)

// Open returns the process-wide MLX backend on MLX's default device (the
// GPU where MLX has one, else the CPU), loading libmlxc on first use.
func Open() (*Backend, error) {
	openOnce.Do(func() {
		dt := CPU
		if DeviceAvailable(GPU) {
			dt = GPU
		}
		openBe, openErr = New(dt)
	})
	return openBe, openErr
}

// New opens a backend whose work is queued on the default stream of a
// device kind. Backends are cheap; they share the one MLX thread.
func New(dt DeviceType) (*Backend, error) {
	s, err := DefaultStream(dt)
	if err != nil {
		return nil, err
	}
	return &Backend{stream: s.h, device: dt}, nil
}

// Device is the kind of device the backend's stream runs on.
func (be *Backend) Device() DeviceType { return be.device }

// Name returns "mlx".
func (be *Backend) Name() string { return "mlx" }

// handle is an Array's storage: one owned mlx_array.
type handle struct{ h uintptr }

func hOf(a *tensor.Array) uintptr {
	if a == nil {
		return 0
	}
	return a.Impl().(*handle).h
}

// Handle returns the mlx_array behind an MLX-backend array, for code that
// calls mlx-c itself inside Do. The array keeps ownership.
func Handle(a *tensor.Array) uintptr { return hOf(a) }

// ---- dtypes ----

// MLX's mlx_dtype numbering.
const (
	mBool     = 0
	mUint8    = 1
	mUint16   = 2
	mUint32   = 3
	mUint64   = 4
	mInt8     = 5
	mInt16    = 6
	mInt32    = 7
	mInt64    = 8
	mFloat16  = 9
	mFloat32  = 10
	mFloat64  = 11
	mBFloat16 = 12
)

func toMLX(dt tensor.DType) int32 {
	switch dt {
	case tensor.Bool:
		return mBool
	case tensor.Uint8:
		return mUint8
	case tensor.Int32:
		return mInt32
	case tensor.Uint32:
		return mUint32
	case tensor.Int64:
		return mInt64
	case tensor.Float16:
		return mFloat16
	case tensor.BFloat16:
		return mBFloat16
	case tensor.Float32:
		return mFloat32
	}
	panic(&Error{Msg: fmt.Sprintf("dtype %s has no MLX equivalent", dt)})
}

// fromMLX maps an MLX dtype to the tensor dtype an array is exposed as
// (and whether it has to be converted to get there).
func fromMLX(m int32) (tensor.DType, bool) {
	switch m {
	case mBool:
		return tensor.Bool, true
	case mUint8:
		return tensor.Uint8, true
	case mInt32:
		return tensor.Int32, true
	case mUint32:
		return tensor.Uint32, true
	case mInt64:
		return tensor.Int64, true
	case mFloat16:
		return tensor.Float16, true
	case mBFloat16:
		return tensor.BFloat16, true
	case mFloat32:
		return tensor.Float32, true
	case mInt8, mInt16:
		return tensor.Int32, false
	case mUint16:
		return tensor.Uint32, false
	case mUint64:
		return tensor.Int64, false
	}
	return tensor.Float32, false
}

// ---- the per-call context, on the MLX thread ----

// cx carries the stream and the temporaries of one Backend method; the
// temporaries are freed when the method's closure ends, panic or not.
type cx struct {
	be  *Backend
	s   uintptr
	tmp []uintptr
}

func (c *cx) t(h uintptr) uintptr { c.tmp = append(c.tmp, h); return h }

func (c *cx) release() {
	for _, h := range c.tmp {
		if h != 0 {
			mlx_array_free(h)
		}
	}
	c.tmp = c.tmp[:0]
}

// keep removes h from the temporaries (it becomes a result).
func (c *cx) keep(h uintptr) uintptr {
	for i := len(c.tmp) - 1; i >= 0; i-- {
		if c.tmp[i] == h {
			c.tmp[i] = 0
			break
		}
	}
	return h
}

func (c *cx) un(f fnUnary, a uintptr) uintptr {
	var r uintptr
	ck(f(&r, a, c.s))
	return c.t(r)
}

func (c *cx) bin(f fnBinary, a, b uintptr) uintptr {
	var r uintptr
	ck(f(&r, a, b, c.s))
	return c.t(r)
}

func (c *cx) astype(a uintptr, m int32) uintptr {
	if mlx_array_dtype(a) == m {
		return a
	}
	var r uintptr
	ck(mlx_astype(&r, a, m, c.s))
	return c.t(r)
}

// scalar makes a 0-d array of v in MLX dtype m from host bytes.
func (c *cx) scalar(v float64, dt tensor.DType) uintptr {
	b := tensor.ScalarBytes(v, dt)
	return c.t(ckHandle(mlx_array_new_data(&b[0], nil, 0, toMLX(dt))))
}

func (c *cx) fscalar(v float32) uintptr { return c.scalar(float64(v), tensor.Float32) }

// wrap makes the tensor.Array owning h (which stops being a temporary),
// with MLX's shape and dtype; an MLX dtype the tensor API lacks is
// converted to the nearest one it has.
func (c *cx) wrap(h uintptr) *tensor.Array {
	dt, exact := fromMLX(mlx_array_dtype(h))
	if !exact {
		h = c.astype(h, toMLX(dt))
	}
	c.keep(h)
	return tensor.NewArray(c.be, &handle{h: h}, shapeOf(h), dt)
}

func shapeOf(h uintptr) []int {
	n := int(mlx_array_ndim(h))
	shape := make([]int, n)
	if n > 0 {
		dims := unsafe.Slice(mlx_array_shape(h), n)
		for i, d := range dims {
			shape[i] = int(d)
		}
	}
	return shape
}

// run executes f on the MLX thread and converts an MLX failure into the
// *tensor.Error the tensor API panics with.
func (be *Backend) run(op string, f func(c *cx)) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(*Error); ok {
				panic(&tensor.Error{Op: op, Err: fmt.Errorf("%w: %s", tensor.ErrBackend, e.Msg)})
			}
			panic(r)
		}
	}()
	Do(func() {
		c := cx{be: be, s: be.stream}
		defer c.release()
		f(&c)
	})
}

// Run runs f on the MLX thread and waits for it; tensor ops made inside f
// (on this or any other MLX backend) run inline there instead of paying a
// hand-off to the MLX thread each (BenchmarkAddNoEval against
// BenchmarkAddNoEvalInRun measures the difference), which
// is what makes small-model decode steps cheap: the generation loop runs
// each step's forward pass and sampling inside one Run
// (generate.StepRunner). Calls from other goroutines wait until f
// returns, so f must not wait for another goroutine's tensor work, nor
// block on anything slow that is not MLX's. A Run inside a Run (or inside
// Do) runs inline. A panic inside f leaves the MLX thread running and is
// re-raised on the caller's goroutine as a *tensor.Error (MLX failures
// wrap tensor.ErrBackend; any other panic is converted as tensor.Try
// does, with the MLX thread's stack), so tensor.Try and tensor.Recover
// around Run see it like any tensor failure. f must not call
// runtime.Goexit (t.FailNow in a test): it would end the MLX thread.
func (be *Backend) Run(f func()) {
	var err error
	Do(func() {
		err = tensor.Try(func() {
			defer func() {
				if r := recover(); r != nil {
					if e, ok := r.(*Error); ok {
						panic(&tensor.Error{Op: "Run", Err: fmt.Errorf("%w: %s", tensor.ErrBackend, e.Msg)})
					}
					panic(r)
				}
			}()
			f()
		})
	})
	if err != nil {
		panic(err)
	}
}

// do1 runs a method whose closure yields one result handle.
func (be *Backend) do1(op string, f func(c *cx) uintptr) *tensor.Array {
	var out *tensor.Array
	be.run(op, func(c *cx) { out = c.wrap(f(c)) })
	return out
}

func ints32(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

func first(v []int32) *int32 {
	if len(v) == 0 {
		return nil
	}
	return &v[0]
}

// ---- creation and host access ----

// FromBytes copies raw into a new MLX array. noCopy is honoured as a copy
// too: MLX's allocator owns array memory (and on a GPU it must be device
// visible), so borrowing a Go or mmap'd buffer is not attempted.
func (be *Backend) FromBytes(raw []byte, shape []int, dt tensor.DType, noCopy bool) *tensor.Array {
	sh := ints32(shape)
	return be.do1("FromBytes", func(c *cx) uintptr {
		var p *byte
		if len(raw) > 0 {
			p = &raw[0]
		} else {
			var zero [8]byte
			p = &zero[0]
		}
		return c.t(ckHandle(mlx_array_new_data(p, first(sh), int32(len(sh)), toMLX(dt))))
	})
}

// Bytes evaluates a and copies its elements out row-major.
func (be *Backend) Bytes(a *tensor.Array) []byte {
	out := make([]byte, a.NBytes())
	be.run("Bytes", func(c *cx) {
		h := hOf(a)
		var r uintptr
		ck(mlx_contiguous(&r, h, false, c.s))
		c.t(r)
		ck(mlx_array_eval(r))
		if len(out) == 0 {
			return
		}
		copyOut(out, r, a.DType().Size())
	})
	return out
}

// copyOut copies an evaluated array's elements row-major into out,
// following its strides when they are not the dense row-major ones.
func copyOut(out []byte, h uintptr, es int) {
	shape := shapeOf(h)
	n := len(shape)
	strides := make([]int, n)
	if n > 0 {
		for i, s := range unsafe.Slice(mlx_array_strides(h), n) {
			strides[i] = int(int64(s))
		}
	}
	data := mlx_array_data_uint8(h)
	if data == nil {
		panic(&Error{Msg: "array has no data after evaluation"})
	}
	dense, want := true, 1
	for i := n - 1; i >= 0; i-- {
		if shape[i] != 1 && strides[i] != want {
			dense = false
			break
		}
		want *= shape[i]
	}
	if dense {
		copy(out, unsafe.Slice(data, len(out)))
		return
	}
	// strided walk: the largest element offset bounds the source slice
	span := 0
	for i := range shape {
		span += (shape[i] - 1) * strides[i]
	}
	src := unsafe.Slice(data, (span+1)*es)
	idx := make([]int, n)
	off := 0
	for k := 0; k < len(out)/es; k++ {
		copy(out[k*es:(k+1)*es], src[off*es:(off+1)*es])
		for d := n - 1; d >= 0; d-- {
			idx[d]++
			off += strides[d]
			if idx[d] < shape[d] {
				break
			}
			off -= strides[d] * shape[d]
			idx[d] = 0
		}
	}
}

// Full makes an array of shape filled with v converted to dt (C rules).
func (be *Backend) Full(shape []int, v float64, dt tensor.DType) *tensor.Array {
	sh := ints32(shape)
	return be.do1("Full", func(c *cx) uintptr {
		s := c.scalar(v, dt)
		var r uintptr
		ck(mlx_full(&r, first(sh), uint64(len(sh)), s, toMLX(dt), c.s))
		return c.t(r)
	})
}

// Arange computes start+i·step on the host, exactly as the CPU backend
// does, and uploads it: MLX's own arange rounds differently for floats.
func (be *Backend) Arange(start, step float64, n int, dt tensor.DType) *tensor.Array {
	es := dt.Size()
	raw := make([]byte, n*es)
	for i := range n {
		copy(raw[i*es:], tensor.ScalarBytes(start+float64(i)*step, dt))
	}
	return be.FromBytes(raw, []int{n}, dt, false)
}

// Free releases a's mlx_array. The release itself is queued for the MLX
// thread's next hand-off, so freeing never blocks.
func (be *Backend) Free(a *tensor.Array) {
	if hd, ok := a.Impl().(*handle); ok && hd.h != 0 {
		mlxThread.queueFree(hd.h)
		hd.h = 0
	}
}

func (be *Backend) evalVec(op string, arrs []*tensor.Array, f func(vec uintptr) int32) {
	if len(arrs) == 0 {
		return
	}
	hs := make([]uintptr, len(arrs))
	for i, a := range arrs {
		hs[i] = hOf(a)
	}
	be.run(op, func(c *cx) {
		vec := ckHandle(mlx_vector_array_new_data(&hs[0], uint64(len(hs))))
		defer mlx_vector_array_free(vec)
		ck(f(vec))
	})
}

// Eval computes the arrays, blocking until they are ready.
func (be *Backend) Eval(arrs ...*tensor.Array) { be.evalVec("Eval", arrs, mlx_eval) }

// AsyncEval queues the computation of the arrays and returns.
func (be *Backend) AsyncEval(arrs ...*tensor.Array) {
	be.evalVec("AsyncEval", arrs, mlx_async_eval)
}
