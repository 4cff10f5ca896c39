package model

import (
	"math"

	"github.com/mlxgo/mlxgo/tensor"
)

// gemma4PLE is Gemma 4's per-layer input embeddings (the e2b/e4b models):
// every layer gets a small extra input per token, the sum of a token
// lookup in a packed [vocab, layers·width] table and a projection of the
// token's main embedding, which the layer gates into its residual stream.
type gemma4PLE struct {
	Embed         *Embedding // [per-layer vocab, layers·width]
	embedScale    float64    // √width, rounded to the table's dtype
	Proj          Projection // hidden → layers·width
	projScale     float64    // 1/√hidden
	Norm          *RMSNorm   // over width
	layers, width int
}

// inputs returns the per-layer inputs [B, T, layers, width] for ids and
// their scaled main embeddings h: (norm(proj(h)/√D) + table[ids]·√width)/√2.
func (p *gemma4PLE) inputs(ids, h *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	b, t := ids.Dim(0), ids.Dim(1)
	tok := tensor.Reshape(tensor.MulScalar(p.Embed.Forward(ids), p.embedScale), b, t, p.layers, p.width)
	proj := tensor.Reshape(tensor.MulScalar(p.Proj.Forward(h), p.projScale), b, t, p.layers, p.width)
	proj = p.Norm.Forward(proj)
	if tok.DType() != proj.DType() {
		tok = tensor.AsType(tok, proj.DType())
	}
	return sc.Keep(tensor.MulScalar(tensor.Add(proj, tok), 1/math.Sqrt2))
}

// gemma4MoE is the mixture-of-experts block of the 26B-A4B model. It runs
// beside the dense MLP on the same (post-attention) residual: a router
// (weightless RMSNorm, a learned per-feature scale and 1/√D, a linear
// score per expert, softmax, top k renormalised, times a learned
// per-expert scale) mixes k gated-GELU experts, each branch with its own
// norms.
type gemma4MoE struct {
	routerScale *tensor.Array // scale·D^-½ [D], folded into the router's norm
	Proj        Projection    // router scores [experts, D]
	PerExpert   *tensor.Array // [experts] float32
	Experts     *SwitchGLU
	TopK        int
	eps         float32

	PreNorm2, PostNorm1, PostNorm2 *RMSNorm
}

func loadGemma4MoE(w *Weights, p string, cfg *gemma4Config, dt tensor.DType, act func(*tensor.Array) *tensor.Array) *gemma4MoE {
	d, e, hid := cfg.Hidden, *cfg.Experts, *cfg.MoEIntermediate
	m := &gemma4MoE{TopK: *cfg.TopKExperts, eps: cfg.Eps}
	scale := w.Tensor(p+"router.scale", d)
	m.routerScale = w.Own(tensor.WithScope(func() []*tensor.Array {
		s := tensor.MulScalar(tensor.AsType(scale, tensor.Float32), 1/math.Sqrt(float64(d)))
		return []*tensor.Array{tensor.AsType(s, dt)}
	})[0])
	m.Proj = w.Linear(p+"router.proj", d, e, false)
	pe := w.Tensor(p+"router.per_expert_scale", e)
	m.PerExpert = w.Own(tensor.AsType(pe, tensor.Float32))
	name := p + "experts"
	stacked := func(bank string) bool { return w.Has(bank+".gate_proj.weight") || w.Has(bank+".gate_proj.scales") }
	bank := ""
	switch {
	case stacked(name + ".switch_glu"):
		bank = name + ".switch_glu" // mlx-lm's gemma4 layout (mlx-community checkpoints)
	case stacked(p + "switch_mlp"):
		bank = p + "switch_mlp" // mlxgo convert's stacking of per-expert tensors
	}
	switch {
	case bank != "":
		m.Experts = &SwitchGLU{
			Gate: w.SwitchLinear(bank+".gate_proj", e, d, hid),
			Up:   w.SwitchLinear(bank+".up_proj", e, d, hid),
			Down: w.SwitchLinear(bank+".down_proj", e, hid, d),
		}
	default:
		// transformers' layout: gate and up fused along the output rows
		m.Experts = w.FusedExperts(name, e, d, hid)
	}
	m.Experts.Act = act
	m.PreNorm2 = w.RMSNorm(p+"pre_feedforward_layernorm_2", d, cfg.Eps)
	m.PostNorm1 = w.RMSNorm(p+"post_feedforward_layernorm_1", d, cfg.Eps)
	m.PostNorm2 = w.RMSNorm(p+"post_feedforward_layernorm_2", d, cfg.Eps)
	return m
}

// forward returns the expert branch for the residual r [B, T, D], normed
// by post_feedforward_layernorm_2 (the dense branch's norm is the
// caller's).
func (m *gemma4MoE) forward(r *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	scores := tensor.AsType(m.Proj.Forward(tensor.RMSNorm(r, m.routerScale, m.eps)), tensor.Float32)
	probs := tensor.Softmax(scores, -1)
	inds, vals := TopKRouting(probs, m.TopK)
	vals = tensor.Div(vals, tensor.Sum(vals, []int{-1}, true))
	vals = tensor.Mul(vals, tensor.Take(m.PerExpert, inds, 0))
	y := m.Experts.Forward(m.PreNorm2.Forward(r), inds) // [B, T, k, D]
	wts := tensor.ExpandDims(tensor.AsType(vals, y.DType()), -1)
	out := tensor.Sum(tensor.Mul(y, wts), []int{-2}, false)
	return sc.Keep(m.PostNorm2.Forward(out))
}
