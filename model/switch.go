package model

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
)

// ExpertBank is a bank of expert matrices as SwitchGLU calls it. Like
// Projection for dense layers, it is the seam through which a stand-in
// (calibration, an adapter) takes a loaded bank's place: see
// LoadOptions.Wrap.
type ExpertBank interface {
	// Gather runs each row of x [..., 1, 1, in] through the experts inds
	// [..., k] selects for it, returning [..., k, 1, out].
	Gather(x, inds *tensor.Array) *tensor.Array
	// Expert runs expert e alone over the rows x [n, in] routed to it,
	// returning [n, out].
	Expert(e int, x *tensor.Array) *tensor.Array
	// Quantized reports whether the bank's weights are packed: SwitchGLU
	// gathers packed banks per row and groups rows by expert otherwise.
	Quantized() bool
	// Len is the number of experts.
	Len() int
}

// RowExpertBank is an ExpertBank that can be told, with each expert's
// rows, which token of the pass each row is (the leading dims of
// SwitchGLU's input flattened): a stand-in adding terms that differ from
// token to token (LoRA adapters chosen per row of a batch) uses it to
// give rows grouped by expert their own tokens' terms. SwitchGLU's
// grouped path calls ExpertRows instead of Expert when a bank has it.
type RowExpertBank interface {
	ExpertBank
	// ExpertRows is Expert for rows x [n, in] that are the tokens
	// tokens[i] (len n) of the pass.
	ExpertRows(e int, x *tensor.Array, tokens []int32) *tensor.Array
}

// expertRows runs expert e of b over x, the tokens given.
func expertRows(b ExpertBank, e int, x *tensor.Array, tokens []int32) *tensor.Array {
	if rb, ok := b.(RowExpertBank); ok {
		return rb.ExpertRows(e, x, tokens)
	}
	return b.Expert(e, x)
}

// SwitchLinear is a bank of E expert matrices [E, out, in], plain or
// affine-quantized, applied per token to the experts a router picked.
type SwitchLinear struct {
	Weight         *tensor.Array // [E, out, in] or uint32 [E, out, in·bits/32]
	Scales, Biases *tensor.Array // [E, out, in/group] when quantized
	tensor.QuantSpec
	Experts, In int
	Out         int
}

// Quantized implements ExpertBank.
func (s *SwitchLinear) Quantized() bool { return s.Scales != nil }

// Len implements ExpertBank.
func (s *SwitchLinear) Len() int { return s.Experts }

// Expert implements ExpertBank.
func (s *SwitchLinear) Expert(e int, x *tensor.Array) *tensor.Array {
	return scoped(func() *tensor.Array {
		l, _ := s.expert(e)
		return l.Forward(x)
	})
}

// expert returns expert e's [out, in] matrix as a plain Linear (views).
func (s *SwitchLinear) expert(e int) (*Linear, []*tensor.Array) {
	take := func(a *tensor.Array) *tensor.Array {
		if a == nil {
			return nil
		}
		v := tensor.SliceAxis(a, 0, e, e+1)
		r := tensor.Squeeze(v, 0)
		v.Free()
		return r
	}
	l := &Linear{Weight: take(s.Weight), Scales: take(s.Scales), Biases: take(s.Biases), QuantSpec: s.QuantSpec}
	var views []*tensor.Array
	for _, a := range []*tensor.Array{l.Weight, l.Scales, l.Biases} {
		if a != nil {
			views = append(views, a)
		}
	}
	return l, views
}

// SwitchLinear loads a stacked expert bank stored at name (name.weight
// [E, out, in], or packed with name.scales and name.biases). It returns
// the *SwitchLinear, or what LoadOptions.Wrap stands in for it.
func (w *Weights) SwitchLinear(name string, experts, in, out int) ExpertBank {
	if w.stream != nil {
		return w.streamSwitchLinear(name, experts, in, out)
	}
	mod, spec, q := w.quantized(name)
	s := &SwitchLinear{Experts: experts, In: in, Out: out}
	if q {
		s.Weight, s.Scales, s.Biases = w.packed(mod, spec, []int{experts}, out, in)
		s.QuantSpec = spec
	} else {
		s.Weight = w.load(w.must(name+".weight"), []int{experts, out, in}, tensor.Invalid)
	}
	return w.wrapBank(Module{Path: mod, Source: mod + ".weight"}, s)
}

// StackedLinear builds a bank from per-expert plain matrices named by
// nameOf(e) (HF checkpoints store experts.{e}.gate_proj.weight); the
// stacked copy is owned by the weights. Per-expert quantized experts are
// refused: MLX checkpoints store them stacked. The bank is not yet handed
// to LoadOptions.Wrap: its caller does that once it knows the block's
// path (wrapBanks).
func (w *Weights) StackedLinear(nameOf func(e int) string, experts, in, out int) *SwitchLinear {
	parts := make([]*tensor.Array, experts)
	for e := range experts {
		base := nameOf(e)
		if w.Has(base + ".scales") {
			w.failf(w.must(base+".scales"), "per-expert quantized weights are not supported (MLX checkpoints stack experts)")
		}
		parts[e] = w.load(w.must(base+".weight"), []int{out, in}, tensor.Invalid)
	}
	stacked := tensor.Stack(parts, 0)
	for _, p := range parts {
		w.disown(p)
	}
	return &SwitchLinear{Weight: w.Own(stacked), Experts: experts, In: in, Out: out}
}

// FusedExperts loads transformers 5's expert layout at name:
// name.gate_up_proj [E, 2·hidden, dim] (gate rows first, then up) split
// into two banks, and name.down_proj [E, dim, hidden]. MLX checkpoints
// stack them under BankPath of the block.
func (w *Weights) FusedExperts(name string, experts, dim, hidden int) *SwitchGLU {
	if w.stream != nil {
		return w.streamFused(name, experts, dim, hidden)
	}
	src := w.must(name + ".gate_up_proj")
	gu := w.load(src, []int{experts, 2 * hidden, dim}, tensor.Invalid)
	half := func(lo int) *tensor.Array {
		v := tensor.SliceAxis(gu, 1, lo, lo+hidden)
		c := tensor.Contiguous(v)
		v.Free()
		return w.Own(c)
	}
	g, u := half(0), half(hidden)
	w.disown(gu)
	down := w.load(w.must(name+".down_proj"), []int{experts, dim, hidden}, tensor.Invalid)
	s := &SwitchGLU{
		Gate: &SwitchLinear{Weight: g, Experts: experts, In: dim, Out: hidden},
		Up:   &SwitchLinear{Weight: u, Experts: experts, In: dim, Out: hidden},
		Down: &SwitchLinear{Weight: down, Experts: experts, In: hidden, Out: dim},
	}
	w.wrapBanks(strings.TrimSuffix(src, ".experts.gate_up_proj"), src, s)
	return s
}

// disown frees a loaded array that was only an intermediate.
func (w *Weights) disown(a *tensor.Array) {
	for i, o := range w.owned {
		if o == a {
			w.owned = append(w.owned[:i], w.owned[i+1:]...)
			break
		}
	}
	a.Free()
}

// SwitchGLU is the expert MLP of mixture-of-experts blocks:
// down_e(act(gate_e(x)) · up_e(x)) for each selected expert e. Quantized
// banks go through GatherQMM (each token reads only its experts' weights);
// plain banks group tokens by expert and run one matmul per used expert,
// which needs the indices on the host (a sync, acceptable for the
// floating-point path, which is for references and small models).
type SwitchGLU struct {
	Gate, Up, Down ExpertBank
	// Act is the gate activation (nil: SiLU).
	Act func(*tensor.Array) *tensor.Array
	// next is the following MoE layer's experts and router, for
	// prefetching streamed experts (ExpertStreaming.Prefetch).
	next *prefetchHint
}

// Forward computes the experts' outputs for x [..., D] and inds [..., k]
// (int32 expert ids), returning [..., k, D] (unweighted: the caller
// applies the router's scores).
func (s *SwitchGLU) Forward(x, inds *tensor.Array) *tensor.Array {
	if x.NDim() != inds.NDim() || !equalInts(x.Shape()[:x.NDim()-1], inds.Shape()[:inds.NDim()-1]) {
		panic(&tensor.Error{Op: "SwitchGLU", Err: fmt.Errorf("%w: x %v, indices %v", tensor.ErrShape, x.Shape(), inds.Shape())})
	}
	if release := s.loadRouted(x, inds); release != nil {
		defer release()
	}
	sc := tensor.NewScope()
	defer sc.Close()
	var out *tensor.Array
	if s.Gate.Quantized() || s.Up.Quantized() || s.Down.Quantized() {
		out = s.gathered(x, inds)
	} else {
		out = s.grouped(x, inds)
	}
	return sc.Keep(out)
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Gather implements ExpertBank.
func (sl *SwitchLinear) Gather(x, inds *tensor.Array) *tensor.Array {
	if sl.Quantized() {
		return tensor.GatherQMM(x, sl.Weight, sl.Scales, sl.Biases, nil, inds, true, sl.GroupSize, sl.Bits)
	}
	// a plain bank mixed with quantized ones: gather the matrices
	w := tensor.Take(sl.Weight, inds, 0) // [..., k, out, in]
	wt := tensor.SwapAxes(w, -1, -2)
	return tensor.Matmul(x, wt)
}

func (s *SwitchGLU) gathered(x, inds *tensor.Array) *tensor.Array {
	xe := tensor.ExpandDims(tensor.ExpandDims(x, -2), -2) // [..., 1, 1, D]
	g := s.Gate.Gather(xe, inds)
	u := s.Up.Gather(xe, inds)
	h := glu(s.Act, g, u) // [..., k, 1, I]
	y := s.Down.Gather(h, inds)
	return tensor.Squeeze(y, -2)
}

func (s *SwitchGLU) grouped(x, inds *tensor.Array) *tensor.Array {
	d := x.Dim(-1)
	k := inds.Dim(-1)
	flat := tensor.Reshape(x, -1, d)
	n := flat.Dim(0)
	ids := tensor.AsType(tensor.Reshape(inds, -1), tensor.Int32)
	raw := ids.Bytes()
	experts := s.Gate.Len()
	rows := make([][]int32, experts) // token row per slot, by expert
	slots := make([][]int, experts)
	for p := range n * k {
		e := int(int32(binary.LittleEndian.Uint32(raw[4*p:])))
		if e < 0 || e >= experts {
			panic(&tensor.Error{Op: "SwitchGLU", Err: fmt.Errorf("%w: expert index %d of %d", tensor.ErrArgument, e, experts)})
		}
		rows[e] = append(rows[e], int32(p/k))
		slots[e] = append(slots[e], p)
	}
	var outs []*tensor.Array
	where := make([]int32, n*k) // slot → row of the concatenated outputs
	at := 0
	for e := range rows {
		if len(rows[e]) == 0 {
			continue
		}
		idx := int32s(x.Backend(), rows[e])
		xe := tensor.Take(flat, idx, 0)
		h := glu(s.Act, expertRows(s.Gate, e, xe, rows[e]), expertRows(s.Up, e, xe, rows[e]))
		outs = append(outs, expertRows(s.Down, e, h, rows[e]))
		for _, p := range slots[e] {
			where[p] = int32(at)
			at++
		}
	}
	all := tensor.Concatenate(outs, 0)
	perm := int32s(x.Backend(), where)
	y := tensor.Take(all, perm, 0)
	shape := append(append([]int(nil), inds.Shape()...), d)
	return tensor.Reshape(y, shape...)
}

// int32s makes an int32 array of v on be, shaped shape (1-D when none is
// given).
func int32s(be tensor.Backend, v []int32, shape ...int) *tensor.Array {
	if len(shape) == 0 {
		shape = []int{len(v)}
	}
	return tensor.FromInt32On(be, v, shape)
}
