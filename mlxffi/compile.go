package mlxffi

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego"
	"github.com/mlxgo/mlxgo/tensor"
)

// Compiled is a Go function of arrays traced and fused by mlx_compile: MLX
// calls the Go function once per new input shape (once in all when
// shapeless) to record its graph, then replays the optimised graph without
// calling Go again. The function must be pure (array ops only) and must not
// keep its inputs, outputs or intermediates: every array it sees is freed
// when the trace ends.
type Compiled struct {
	be  *Backend
	cf  *closureFn
	cls uintptr
}

// closure payloads: a payload is an index into this registry, so no Go
// pointer is ever stored in C memory. The destructor MLX calls when it
// drops the closure removes the entry.
var (
	closureMu   sync.Mutex
	closureFns          = map[uintptr]*closureFn{}
	closureNext uintptr = 1

	trampolineOnce sync.Once
	trampolineCB   uintptr
	closureDtorCB  uintptr
)

type closureFn struct {
	be  *Backend
	fn  func(in []*tensor.Array) []*tensor.Array
	err error // the last Go failure inside fn, reported by Call
}

func initTrampolines() {
	trampolineOnce.Do(func() {
		trampolineCB = purego.NewCallback(closureTrampoline)
		closureDtorCB = purego.NewCallback(func(payload uintptr) {
			closureMu.Lock()
			delete(closureFns, payload)
			closureMu.Unlock()
		})
	})
}

// closureTrampoline is what MLX calls to run a Go closure; it runs on the
// MLX thread, inside the mlx-c call that triggered the trace.
func closureTrampoline(res *uintptr, input uintptr, payload uintptr) uintptr {
	closureMu.Lock()
	cf := closureFns[payload]
	closureMu.Unlock()
	if cf == nil {
		takeLastError()
		return 1
	}
	w := &mlxThread
	w.reenter.Add(1)
	defer w.reenter.Add(-1)
	var out uintptr
	err := tensor.Try(func() {
		s := tensor.NewScope()
		defer s.Close()
		c := cx{be: cf.be, s: cf.be.stream}
		defer c.release()
		n := mlx_vector_array_size(input)
		in := make([]*tensor.Array, n)
		for i := range n {
			var h uintptr
			ck(mlx_vector_array_get(&h, input, i))
			in[i] = c.wrap(c.t(h))
		}
		outs := cf.fn(in)
		hs := make([]uintptr, len(outs))
		for i, a := range outs {
			if a == nil || a.Backend() != tensor.Backend(cf.be) {
				panic(&tensor.Error{Op: "Compile", Err: fmt.Errorf("%w: output %d is not an array of this MLX backend", tensor.ErrArgument, i)})
			}
			hs[i] = hOf(a)
		}
		if len(hs) == 0 {
			out = ckHandle(mlx_vector_array_new())
		} else {
			out = ckHandle(mlx_vector_array_new_data(&hs[0], uint64(len(hs))))
		}
	})
	if err != nil {
		cf.err = err
		return 1
	}
	*res = out
	return 0
}

// Compile traces fn into an MLX compiled function. With shapeless, one
// trace serves every input shape (fn must then not branch on shapes).
func (be *Backend) Compile(fn func(in []*tensor.Array) []*tensor.Array, shapeless bool) (*Compiled, error) {
	initTrampolines()
	cf := &closureFn{be: be, fn: fn}
	closureMu.Lock()
	id := closureNext
	closureNext++
	closureFns[id] = cf
	closureMu.Unlock()
	c := &Compiled{be: be, cf: cf}
	err := call(func() {
		raw := ckHandle(mlx_closure_new_func_payload(trampolineCB, id, closureDtorCB))
		defer mlx_closure_free(raw)
		ck(mlx_compile(&c.cls, raw, shapeless))
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Call runs the compiled function; the caller owns the returned arrays.
func (c *Compiled) Call(in ...*tensor.Array) (out []*tensor.Array, err error) {
	err = tensor.Try(func() { out = c.call(in) })
	if err != nil && c.cf.err != nil {
		err = fmt.Errorf("%w (in the compiled Go function: %v)", err, c.cf.err)
		c.cf.err = nil
	}
	return out, err
}

func (c *Compiled) call(in []*tensor.Array) (out []*tensor.Array) {
	hs := make([]uintptr, len(in))
	for i, a := range in {
		hs[i] = hOf(a)
	}
	c.be.run("Compiled.Call", func(x *cx) {
		if c.cls == 0 {
			panic(&Error{Msg: "call of a freed compiled function"})
		}
		var vin uintptr
		if len(hs) == 0 {
			vin = ckHandle(mlx_vector_array_new())
		} else {
			vin = ckHandle(mlx_vector_array_new_data(&hs[0], uint64(len(hs))))
		}
		defer mlx_vector_array_free(vin)
		var vout uintptr
		ck(mlx_closure_apply(&vout, c.cls, vin))
		defer mlx_vector_array_free(vout)
		n := mlx_vector_array_size(vout)
		out = make([]*tensor.Array, n)
		for i := range n {
			var h uintptr
			ck(mlx_vector_array_get(&h, vout, i))
			out[i] = x.wrap(x.t(h))
		}
	})
	return out
}

// Free releases the compiled function.
func (c *Compiled) Free() {
	if c == nil || c.cls == 0 {
		return
	}
	h := c.cls
	c.cls = 0
	_ = call(func() { mlx_closure_free(h) })
}
