package model

import (
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
)

// SparseMoE is Qwen3-MoE's sparse block: a linear router, softmax over all
// experts, the top k kept (renormalised when NormTopK), and the chosen
// experts' gated MLPs mixed by those weights.
type SparseMoE struct {
	Router   Projection
	Experts  *SwitchGLU
	TopK     int
	NormTopK bool
}

// Forward applies the block to x [..., D].
func (m *SparseMoE) Forward(x *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	gates := tensor.Softmax(tensor.AsType(m.Router.Forward(x), tensor.Float32), -1)
	inds, scores := TopKRouting(gates, m.TopK)
	if m.NormTopK {
		scores = tensor.Div(scores, tensor.Sum(scores, []int{-1}, true))
	}
	y := m.Experts.Forward(x, inds) // [..., k, D]
	w := tensor.ExpandDims(tensor.AsType(scores, x.DType()), -1)
	return sc.Keep(tensor.Sum(tensor.Mul(y, w), []int{-2}, false))
}

// TopKRouting returns the indices (int32) and values of the k largest
// router probabilities along the last axis, in no particular order.
func TopKRouting(probs *tensor.Array, k int) (inds, vals *tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	inds = tensor.Argpartition(tensor.Neg(probs), k-1, -1)
	if e := inds.Dim(-1); k < e {
		inds = tensor.SliceAxis(inds, inds.NDim()-1, 0, k)
	}
	vals = tensor.TakeAlongAxis(probs, inds, -1)
	sc.Keep(inds, vals)
	return inds, vals
}

// SparseMoE loads a Qwen3-MoE block at name: the router name.gate and the
// experts stacked (mlx-lm's name.switch_mlp.{gate,up,down}_proj), fused
// (transformers 5's name.experts.gate_up_proj [E, 2I, D] and
// name.experts.down_proj [E, D, I]) or per expert (name.experts.{e}.*).
func (w *Weights) SparseMoE(name string, dim, hidden, experts, topK int, normTopK bool) *SparseMoE {
	m := &SparseMoE{Router: w.Linear(name+".gate", dim, experts, false), TopK: topK, NormTopK: normTopK}
	switch {
	case w.Has(name+".switch_mlp.gate_proj.weight") || w.Has(name+".switch_mlp.gate_proj.scales"):
		m.Experts = &SwitchGLU{
			Gate: w.SwitchLinear(name+".switch_mlp.gate_proj", experts, dim, hidden),
			Up:   w.SwitchLinear(name+".switch_mlp.up_proj", experts, dim, hidden),
			Down: w.SwitchLinear(name+".switch_mlp.down_proj", experts, hidden, dim),
		}
	case w.Has(name + ".experts.gate_up_proj"):
		m.Experts = w.FusedExperts(name+".experts", experts, dim, hidden)
	default:
		of := func(proj string) func(int) string {
			return func(e int) string { return name + ".experts." + strconv.Itoa(e) + "." + proj }
		}
		if w.stream != nil {
			m.Experts = &SwitchGLU{
				Gate: w.streamPerExpert(of("gate_proj"), experts, dim, hidden),
				Up:   w.streamPerExpert(of("up_proj"), experts, dim, hidden),
				Down: w.streamPerExpert(of("down_proj"), experts, hidden, dim),
			}
		} else {
			m.Experts = &SwitchGLU{
				Gate: w.StackedLinear(of("gate_proj"), experts, dim, hidden),
				Up:   w.StackedLinear(of("up_proj"), experts, dim, hidden),
				Down: w.StackedLinear(of("down_proj"), experts, hidden, dim),
			}
		}
		src := w.must(of("gate_proj")(0) + ".weight")
		w.wrapBanks(strings.TrimSuffix(src, ".experts.0.gate_proj.weight"), src, m.Experts)
	}
	if w.stream != nil {
		w.stream.link(m.Experts, m.Router, topK)
	}
	return m
}
