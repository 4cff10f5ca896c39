package model

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// Projection is a dense layer as an architecture calls it: x [..., in]
// → [..., out]. Architectures hold their projections through this
// interface, so that what Weights.Linear loaded (a *Linear, or a
// *TiedHead) can be stood in for from outside the package without the
// layer types knowing: a calibration pass that records each layer's
// inputs, an adapter that adds a low-rank residual to the base layer's
// output. LoadOptions.Wrap is where such stand-ins are given.
type Projection interface {
	Forward(x *tensor.Array) *tensor.Array
}

// Linear is a dense layer y = x·Wᵀ (+ b), plain or MLX affine-quantized.
// Quantized layers run through QuantizedMatmul and are never dequantized
// as a whole: that is what makes 4-bit checkpoints fit and decode fast.
type Linear struct {
	Weight *tensor.Array // [out, in], or uint32 [out, in·bits/32] when quantized
	Bias   *tensor.Array // [out] or nil
	// Scales and Biases are the quantization parameters (nil when plain),
	// in groups and bits of QuantSpec.
	Scales, Biases *tensor.Array
	tensor.QuantSpec
}

// Quantized reports whether the layer is affine-quantized.
func (l *Linear) Quantized() bool { return l.Scales != nil }

// Forward applies the layer to x [..., in].
func (l *Linear) Forward(x *tensor.Array) *tensor.Array {
	return scoped(func() *tensor.Array {
		var y *tensor.Array
		if l.Scales != nil {
			y = tensor.QuantizedMatmul(x, l.Weight, l.Scales, l.Biases, true, l.GroupSize, l.Bits)
		} else {
			y = tensor.Matmul(x, tensor.Transpose(l.Weight))
		}
		if l.Bias != nil {
			y = tensor.Add(y, l.Bias)
		}
		return y
	})
}

// Linear loads the layer at the model-relative path name (name.weight,
// name.bias, name.scales, name.biases) with in inputs and out outputs. It
// returns the *Linear, or what LoadOptions.Wrap stands in for it.
func (w *Weights) Linear(name string, in, out int, bias bool) Projection {
	mod, spec, q := w.quantized(name)
	l := &Linear{}
	if q {
		l.Weight, l.Scales, l.Biases = w.packed(mod, spec, nil, out, in)
		l.QuantSpec = spec
	} else {
		l.Weight = w.load(w.must(name+".weight"), []int{out, in}, tensor.Invalid)
		if !l.Weight.DType().IsFloat() {
			w.failf(mod+".weight", "dtype %s, want a float type (or scales and biases for a quantized layer)", l.Weight.DType())
		}
	}
	if bias {
		l.Bias = w.Tensor(name+".bias", out)
	}
	if w.wrap == nil {
		return l
	}
	return w.wrap.Projection(Module{Path: mod, Source: mod + ".weight"}, l)
}

// must resolves a model-relative name or fails naming it.
func (w *Weights) must(name string) string {
	full, ok := w.Resolve(name)
	if !ok {
		fail(fmt.Errorf("%w: %s: missing tensor %q", ErrCheckpoint, w.set.Dir(), full))
	}
	return full
}

// Embedding maps token ids to rows of a [vocab, dim] table, plain or
// quantized. A quantized table is gathered packed and only the gathered
// rows are dequantized.
type Embedding struct {
	Weight         *tensor.Array
	Scales, Biases *tensor.Array // nil when plain
	tensor.QuantSpec
	// DType is the type of the rows returned (the table's, or its scales'
	// when quantized).
	DType tensor.DType
}

// Forward returns the rows for ids (any int shape) as [ids..., dim].
func (e *Embedding) Forward(ids *tensor.Array) *tensor.Array {
	if e.Scales == nil {
		return tensor.Take(e.Weight, ids, 0)
	}
	return scoped(func() *tensor.Array {
		w := tensor.Take(e.Weight, ids, 0)
		s := tensor.Take(e.Scales, ids, 0)
		b := tensor.Take(e.Biases, ids, 0)
		return tensor.Dequantize(w, s, b, e.GroupSize, e.Bits, e.DType)
	})
}

// AsLinear uses the table as an output projection (tied heads): x [..., dim]
// → [..., vocab].
func (e *Embedding) AsLinear(x *tensor.Array) *tensor.Array {
	l := Linear{Weight: e.Weight, Scales: e.Scales, Biases: e.Biases, QuantSpec: e.QuantSpec}
	return l.Forward(x)
}

// TiedHead is an embedding table used as the output projection (a head
// tied to the input embeddings), as a Projection so that it can be wrapped
// like any other dense layer. It reads the table at each call.
type TiedHead struct {
	Embedding *Embedding
}

// Forward projects x [..., dim] to [..., vocab].
func (h *TiedHead) Forward(x *tensor.Array) *tensor.Array { return h.Embedding.AsLinear(x) }

// TiedHead returns the table e, loaded by Embedding from the model-relative
// path name, as the output projection (or what LoadOptions.Wrap stands in
// for it, told the table's module path).
func (w *Weights) TiedHead(name string, e *Embedding) Projection {
	h := &TiedHead{Embedding: e}
	if w.wrap == nil {
		return h
	}
	mod := w.modulePath(name)
	return w.wrap.Projection(Module{Path: mod, Source: mod + ".weight"}, h)
}

// Embedding loads a [vocab, dim] table at the model-relative path name.
func (w *Weights) Embedding(name string, vocab, dim int) *Embedding {
	mod, spec, q := w.quantized(name)
	e := &Embedding{}
	if q {
		e.Weight, e.Scales, e.Biases = w.packed(mod, spec, nil, vocab, dim)
		e.QuantSpec, e.DType = spec, e.Scales.DType()
	} else {
		e.Weight = w.load(w.must(name+".weight"), []int{vocab, dim}, tensor.Invalid)
		e.DType = e.Weight.DType()
		if !e.DType.IsFloat() {
			w.failf(mod+".weight", "dtype %s, want a float type", e.DType)
		}
	}
	if w.wrap == nil {
		return e
	}
	return w.wrap.Embedding(Module{Path: mod, Source: mod + ".weight"}, e)
}

// RMSNorm is x / sqrt(mean(x²) + eps) · weight over the last axis.
type RMSNorm struct {
	Weight *tensor.Array // nil for a weightless norm
	Eps    float32
}

// Forward normalises x.
func (n *RMSNorm) Forward(x *tensor.Array) *tensor.Array { return tensor.RMSNorm(x, n.Weight, n.Eps) }

// RMSNorm loads the norm weight name.weight of size dim.
func (w *Weights) RMSNorm(name string, dim int, eps float32) *RMSNorm {
	return &RMSNorm{Weight: w.Tensor(name+".weight", dim), Eps: eps}
}

// MLP is the gated feed-forward block of Llama-family models:
// down(act(gate(x)) · up(x)).
type MLP struct {
	Gate, Up, Down Projection
	// Act is the gate's activation (nil: SiLU).
	Act func(*tensor.Array) *tensor.Array
}

// Forward applies the block to x [..., dim].
func (m *MLP) Forward(x *tensor.Array) *tensor.Array {
	return scoped(func() *tensor.Array {
		return m.Down.Forward(glu(m.Act, m.Gate.Forward(x), m.Up.Forward(x)))
	})
}

// glu is act(g)·u, its temporary in the caller's scope.
func glu(act func(*tensor.Array) *tensor.Array, g, u *tensor.Array) *tensor.Array {
	if act == nil {
		act = tensor.Silu
	}
	return tensor.Mul(act(g), u)
}

// scoped runs f inside a tensor.Scope and keeps only what it returns: the
// package's one rule for temporaries (see the package doc).
func scoped(f func() *tensor.Array) *tensor.Array {
	sc := tensor.NewScope()
	defer sc.Close()
	return sc.Keep(f())
}

// MLP loads name.gate_proj, name.up_proj and name.down_proj.
func (w *Weights) MLP(name string, dim, hidden int) *MLP {
	return &MLP{
		Gate: w.Linear(name+".gate_proj", dim, hidden, false),
		Up:   w.Linear(name+".up_proj", dim, hidden, false),
		Down: w.Linear(name+".down_proj", hidden, dim, false),
	}
}
