package backendtest

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// The suite's own test: a conformance suite that passes everything proves
// nothing, so each mutation below breaks one op of the CPU backend the way
// a real kernel bug would, and the cases of that op must notice. (Only
// this test imports the CPU backend; the suite itself does not.)

// mutant forwards to the CPU backend, owning every array it hands out so
// that later ops dispatch back to it, and breaks the op named by mut.
type mutant struct {
	in  tensor.Backend
	mut string
}

// own re-homes an array made by the inner backend onto m, keeping its storage.
func (m *mutant) own(r *tensor.Array) *tensor.Array {
	if r == nil {
		return nil
	}
	out := tensor.NewArray(m, r.Impl(), r.Shape(), r.DType())
	r.SetImpl(nil) // the storage now belongs to out
	r.Free()
	return out
}

// ownNew is own for ops that may hand back their input itself.
func (m *mutant) ownNew(r, in *tensor.Array) *tensor.Array {
	if r == in {
		return r
	}
	return m.own(r)
}

// host makes an array from values computed on the host.
func (m *mutant) host(v []float64, shape []int, dt tensor.DType) *tensor.Array {
	return m.own(m.in.FromBytes(encodeVals(v, dt), shape, dt, false))
}

func (m *mutant) Name() string { return "mutant-" + m.mut }
func (m *mutant) FromBytes(raw []byte, shape []int, dt tensor.DType, noCopy bool) *tensor.Array {
	return m.own(m.in.FromBytes(raw, shape, dt, noCopy))
}
func (m *mutant) Bytes(a *tensor.Array) []byte { return m.in.Bytes(a) }
func (m *mutant) Full(shape []int, v float64, dt tensor.DType) *tensor.Array {
	return m.own(m.in.Full(shape, v, dt))
}
func (m *mutant) Arange(start, step float64, n int, dt tensor.DType) *tensor.Array {
	return m.own(m.in.Arange(start, step, n, dt))
}
func (m *mutant) Free(a *tensor.Array)            { m.in.Free(a) }
func (m *mutant) Eval(arrs ...*tensor.Array)      { m.in.Eval(arrs...) }
func (m *mutant) AsyncEval(arrs ...*tensor.Array) { m.in.AsyncEval(arrs...) }

func (m *mutant) Unary(op tensor.UnaryOp, a *tensor.Array) *tensor.Array {
	if m.mut == "gelu-is-the-tanh-approximation" && op == tensor.OpGelu {
		op = tensor.OpGeluTanh
	}
	r := m.own(m.in.Unary(op, a))
	if m.mut == "exp-off-by-1e-3" && op == tensor.OpExp {
		defer r.Free()
		v := r.Float64s()
		for i := range v {
			v[i] *= 1 + 1e-3
		}
		return m.host(v, r.Shape(), r.DType())
	}
	return r
}

func (m *mutant) Binary(op tensor.BinaryOp, a, b *tensor.Array, shape []int) *tensor.Array {
	switch {
	case m.mut == "remainder-sign-of-dividend" && op == tensor.OpRemainder:
		av, bv := a.Float64s(), b.Float64s()
		out := make([]float64, numel(shape))
		for i := range out {
			idx := unravel(i, shape)
			out[i] = math.Mod(av[bcastIndex(idx, a.Shape())], bv[bcastIndex(idx, b.Shape())]) // C's fmod
		}
		return m.host(out, shape, a.DType())
	case m.mut == "maximum-drops-nan" && op == tensor.OpMaximum && a.DType().IsFloat():
		av, bv := a.Float64s(), b.Float64s()
		out := make([]float64, numel(shape))
		for i := range out {
			idx := unravel(i, shape)
			x, y := av[bcastIndex(idx, a.Shape())], bv[bcastIndex(idx, b.Shape())]
			out[i] = x
			if y > x {
				out[i] = y
			}
		}
		return m.host(out, shape, a.DType())
	case m.mut == "add-leaks" && op == tensor.OpAdd:
		m.in.Full([]int{1}, 0, tensor.Float32) // never freed
	}
	return m.own(m.in.Binary(op, a, b, shape))
}

func (m *mutant) Where(cond, a, b *tensor.Array, shape []int) *tensor.Array {
	return m.own(m.in.Where(cond, a, b, shape))
}
func (m *mutant) AsType(a *tensor.Array, dt tensor.DType) *tensor.Array {
	return m.ownNew(m.in.AsType(a, dt), a)
}

func (m *mutant) Reduce(op tensor.ReduceOp, a *tensor.Array, axes []int, keep bool) *tensor.Array {
	if m.mut == "sum-accumulates-in-bfloat16" && op == tensor.ReduceSum && a.DType() == tensor.BFloat16 && len(axes) == a.NDim() {
		acc := 0.0
		for _, x := range a.Float64s() {
			acc = roundTo(acc+x, tensor.BFloat16)
		}
		shape := []int{}
		if keep {
			for range axes {
				shape = append(shape, 1)
			}
		}
		return m.host([]float64{acc}, shape, tensor.BFloat16)
	}
	return m.own(m.in.Reduce(op, a, axes, keep))
}

func (m *mutant) ArgReduce(op tensor.ArgReduceOp, a *tensor.Array, axis int, keep bool) *tensor.Array {
	if m.mut == "argmax-last-on-ties" && op == tensor.ArgMax {
		v := a.Float64s()
		var shape []int
		for d, n := range a.Shape() {
			if d != axis {
				shape = append(shape, n)
			} else if keep {
				shape = append(shape, 1)
			}
		}
		var out []float64
		lanes(a.Shape(), axis, func(idx []int) {
			best := 0
			for k := range idx {
				if v[idx[k]] >= v[idx[best]] {
					best = k
				}
			}
			out = append(out, float64(best))
		})
		return m.host(out, shape, tensor.Int32)
	}
	return m.own(m.in.ArgReduce(op, a, axis, keep))
}

func (m *mutant) Softmax(a *tensor.Array, axis int) *tensor.Array {
	if m.mut == "softmax-without-max" {
		v := a.Float64s()
		out := make([]float64, len(v))
		lanes(a.Shape(), axis, func(idx []int) {
			var s float32
			for _, i := range idx {
				s += float32(math.Exp(v[i]))
			}
			for _, i := range idx {
				out[i] = float64(float32(math.Exp(v[i])) / s)
			}
		})
		return m.host(out, a.Shape(), a.DType())
	}
	return m.own(m.in.Softmax(a, axis))
}
func (m *mutant) Cumsum(a *tensor.Array, axis int, reverse, inclusive bool) *tensor.Array {
	if m.mut == "cumsum-always-inclusive" {
		inclusive = true
	}
	return m.own(m.in.Cumsum(a, axis, reverse, inclusive))
}
func (m *mutant) Sort(a *tensor.Array, axis int) *tensor.Array {
	if m.mut == "sort-puts-nan-first" && a.DType().IsFloat() {
		v := a.Float64s()
		out := make([]float64, len(v))
		lanes(a.Shape(), axis, func(idx []int) {
			lane := make([]float64, len(idx))
			for k, i := range idx {
				lane[k] = v[i]
			}
			sort.Float64s(lane) // NaN first
			for k, i := range idx {
				out[i] = lane[k]
			}
		})
		return m.host(out, a.Shape(), a.DType())
	}
	return m.own(m.in.Sort(a, axis))
}

func (m *mutant) Argsort(a *tensor.Array, axis int) *tensor.Array {
	if m.mut == "argsort-unstable" {
		v := a.Float64s()
		out := make([]float64, len(v))
		lanes(a.Shape(), axis, func(idx []int) {
			perm := make([]int, len(idx))
			for k := range perm {
				perm[k] = len(idx) - 1 - k // ties come out last-first
			}
			sort.SliceStable(perm, func(i, j int) bool { return v[idx[perm[i]]] < v[idx[perm[j]]] })
			for k, p := range perm {
				out[idx[k]] = float64(p)
			}
		})
		return m.host(out, a.Shape(), tensor.Int32)
	}
	return m.own(m.in.Argsort(a, axis))
}
func (m *mutant) Argpartition(a *tensor.Array, kth, axis int) *tensor.Array {
	return m.own(m.in.Argpartition(a, kth, axis))
}

func (m *mutant) Matmul(a, b *tensor.Array, shape []int) *tensor.Array {
	k := a.Shape()[a.NDim()-1]
	if m.mut == "matmul-drops-last-k" && k >= 2 {
		// a blocked kernel that forgets the tail of the inner dim
		as := slices.Clone(a.Shape())
		as[len(as)-1] = k - 1
		bs := slices.Clone(b.Shape())
		bs[len(bs)-2] = k - 1
		a1 := m.in.Slice(a, make([]int, a.NDim()), as, ones(a.NDim()))
		b1 := m.in.Slice(b, make([]int, b.NDim()), bs, ones(b.NDim()))
		defer a1.Free()
		defer b1.Free()
		return m.own(m.in.Matmul(a1, b1, shape))
	}
	return m.own(m.in.Matmul(a, b, shape))
}

func ones(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

func (m *mutant) Take(a, idx *tensor.Array, axis int) *tensor.Array {
	if m.mut == "take-clamps-negative-indices" {
		iv := idx.Float64s()
		for i := range iv {
			iv[i] = max(iv[i], 0)
		}
		want, shape := takeRef(a.Float64s(), a.Shape(), iv, idx.Shape(), axis)
		return m.host(want, shape, a.DType())
	}
	return m.own(m.in.Take(a, idx, axis))
}
func (m *mutant) TakeAlongAxis(a, idx *tensor.Array, axis int) *tensor.Array {
	return m.own(m.in.TakeAlongAxis(a, idx, axis))
}
func (m *mutant) PutAlongAxis(a, idx, v *tensor.Array, axis int) *tensor.Array {
	return m.own(m.in.PutAlongAxis(a, idx, v, axis))
}
func (m *mutant) Reshape(a *tensor.Array, shape []int) *tensor.Array {
	return m.own(m.in.Reshape(a, shape))
}
func (m *mutant) Transpose(a *tensor.Array, perm []int) *tensor.Array {
	return m.own(m.in.Transpose(a, perm))
}
func (m *mutant) BroadcastTo(a *tensor.Array, shape []int) *tensor.Array {
	return m.own(m.in.BroadcastTo(a, shape))
}
func (m *mutant) Slice(a *tensor.Array, start, stop, step []int) *tensor.Array {
	return m.own(m.in.Slice(a, start, stop, step))
}
func (m *mutant) SliceUpdate(a, u *tensor.Array, start, stop, step []int) *tensor.Array {
	return m.own(m.in.SliceUpdate(a, u, start, stop, step))
}
func (m *mutant) SliceAssign(dst, u *tensor.Array, start, stop, step []int) {
	m.in.SliceAssign(dst, u, start, stop, step)
}
func (m *mutant) Concatenate(arrs []*tensor.Array, axis int, shape []int) *tensor.Array {
	return m.own(m.in.Concatenate(arrs, axis, shape))
}
func (m *mutant) Contiguous(a *tensor.Array) *tensor.Array { return m.ownNew(m.in.Contiguous(a), a) }
func (m *mutant) RMSNorm(x, w *tensor.Array, eps float32) *tensor.Array {
	return m.own(m.in.RMSNorm(x, w, eps))
}
func (m *mutant) LayerNorm(x, w, b *tensor.Array, eps float32) *tensor.Array {
	return m.own(m.in.LayerNorm(x, w, b, eps))
}

func (m *mutant) RoPE(x *tensor.Array, o tensor.RoPEOptions) *tensor.Array {
	if m.mut == "rope-ignores-offset-array" {
		o.OffsetArr = nil
	}
	return m.own(m.in.RoPE(x, o))
}

func (m *mutant) SDPA(q, k, v *tensor.Array, o tensor.SDPAOptions) *tensor.Array {
	if m.mut == "causal-aligned-to-start" && o.MaskKind == tensor.MaskCausal && q.Dim(2) != k.Dim(2) {
		// the classic bug: query i sees keys ≤ i instead of ≤ i + Tk - Tq
		tq, tk := q.Dim(2), k.Dim(2)
		keep := make([]float64, tq*tk)
		for i := 0; i < tq; i++ {
			for j := 0; j < tk; j++ {
				keep[i*tk+j] = boolOf(j <= i)
			}
		}
		mask := m.host(keep, []int{tq, tk}, tensor.Bool)
		defer mask.Free()
		o.MaskKind, o.Mask = tensor.MaskArray, mask
	}
	return m.own(m.in.SDPA(q, k, v, o))
}

func (m *mutant) Quantize(w *tensor.Array, g, bits int) (wq, s, b *tensor.Array) {
	wq, s, b = m.in.Quantize(w, g, bits)
	wq, s, b = m.own(wq), m.own(s), m.own(b)
	if m.mut == "quantize-packs-msb-first" && bits == 4 {
		raw := wq.Bytes()
		v := make([]float64, len(raw)/4)
		for i := range v {
			w := uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24
			var r uint32
			for n := 0; n < 8; n++ {
				r |= (w >> (4 * n) & 0xf) << (4 * (7 - n))
			}
			v[i] = float64(r)
		}
		shape := wq.Shape()
		wq.Free()
		wq = m.host(v, shape, tensor.Uint32)
	}
	return wq, s, b
}
func (m *mutant) Dequantize(wq, s, b *tensor.Array, g, bits int, dt tensor.DType) *tensor.Array {
	return m.own(m.in.Dequantize(wq, s, b, g, bits, dt))
}
func (m *mutant) QuantizedMatmul(x, wq, s, b *tensor.Array, tr bool, g, bits int, shape []int) *tensor.Array {
	if m.mut == "qmm-uses-last-group-bias" {
		// every group takes the bias of the row's last group: a stride bug
		bv := b.Float64s()
		ng := b.Dim(-1)
		for i := range bv {
			bv[i] = bv[i-i%ng+ng-1]
		}
		b = m.host(bv, b.Shape(), b.DType())
		defer b.Free()
	}
	return m.own(m.in.QuantizedMatmul(x, wq, s, b, tr, g, bits, shape))
}
func (m *mutant) GatherQMM(x, wq, s, b, lhs, rhs *tensor.Array, tr bool, g, bits int, shape []int) *tensor.Array {
	return m.own(m.in.GatherQMM(x, wq, s, b, lhs, rhs, tr, g, bits, shape))
}

func (m *mutant) RandomBits(key *tensor.Array, shape []int) *tensor.Array {
	r := m.own(m.in.RandomBits(key, shape))
	if m.mut == "random-bits-in-counter-order" && r.Size() > 1 {
		// words laid out pair by pair instead of MLX's two halves
		defer r.Free()
		v := r.Float64s()
		half := (len(v) + 1) / 2
		out := make([]float64, len(v))
		for i := range v {
			if i%2 == 0 {
				out[i] = v[i/2]
			} else {
				out[i] = v[half+i/2]
			}
		}
		return m.host(out, shape, tensor.Uint32)
	}
	return r
}

// recorder collects what a case reports.
type recorder struct{ msgs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// runSome runs the cases of family whose names start with prefix on be
// and returns how many ran and what they reported.
func runSome(be tensor.Backend, family, prefix string) (n int, msgs []string) {
	prev := tensor.Default()
	tensor.SetDefault(be)
	defer tensor.SetDefault(prev)
	for _, f := range families() {
		if f.name != family {
			continue
		}
		for _, tc := range f.cases() {
			if !strings.HasPrefix(tc.name, prefix) {
				continue
			}
			n++
			r := &recorder{}
			runCase(r, be, 42, f.name, tc)
			msgs = append(msgs, r.msgs...)
		}
	}
	return n, msgs
}

func TestSuiteCatchesBrokenBackends(t *testing.T) {
	mutations := []struct{ mut, family, prefix string }{
		{"exp-off-by-1e-3", "unary", "Exp/float32"},
		{"gelu-is-the-tanh-approximation", "unary", "Gelu/float32"},
		{"maximum-drops-nan", "binary", "Maximum+Minimum/NaN/"},
		{"cumsum-always-inclusive", "cumsum", "Cumsum/float32/axis0/"},
		{"sort-puts-nan-first", "sort", "Sort/NaN-last"},
		{"take-clamps-negative-indices", "indexing", "Take/float32/"},
		{"remainder-sign-of-dividend", "binary", "Remainder+FloorDivide/"},
		{"add-leaks", "binary", "Add/float32"},
		{"sum-accumulates-in-bfloat16", "reduce", "Sum/bfloat16/1<<16"},
		{"argmax-last-on-ties", "argreduce", "Argmax/"},
		{"softmax-without-max", "softmax", "Softmax/masked-and-large"},
		{"argsort-unstable", "sort", "Sort+Argsort/"},
		{"matmul-drops-last-k", "matmul", "float32/"},
		{"rope-ignores-offset-array", "rope", "float32/"},
		{"causal-aligned-to-start", "sdpa", "float32/"},
		{"quantize-packs-msb-first", "quant", "Quantize+Dequantize/float32/bits4/"},
		{"random-bits-in-counter-order", "random", "RandomBits/"},
		{"qmm-uses-last-group-bias", "scale", "tails/QuantizedMatmul/float32/bits4/"},
	}
	for _, mu := range mutations {
		t.Run(mu.mut, func(t *testing.T) {
			n, ctrl := runSome(&mutant{in: cpu.Default}, mu.family, mu.prefix)
			if n == 0 {
				t.Fatalf("no cases match %s/%s", mu.family, mu.prefix)
			}
			if len(ctrl) > 0 {
				t.Skipf("the unmutated CPU backend already fails %s/%s* (see TestConformance): %s", mu.family, mu.prefix, ctrl[0])
			}
			_, msgs := runSome(&mutant{in: cpu.Default, mut: mu.mut}, mu.family, mu.prefix)
			if len(msgs) == 0 {
				t.Errorf("mutation %s went unnoticed by the %d cases %s/%s*", mu.mut, n, mu.family, mu.prefix)
			} else {
				t.Logf("%d cases, %d reports; first: %.200s", n, len(msgs), msgs[0])
			}
		})
	}
}
