package model

import (
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// Linear is a dense layer y = x·Wᵀ (+ b), plain or MLX affine-quantized.
// Quantized layers run through QuantizedMatmul and are never dequantized
// as a whole: that is what makes 4-bit checkpoints fit and decode fast.
type Linear struct {
	Weight *tensor.Array // [out, in], or uint32 [out, in·bits/32] when quantized
	Bias   *tensor.Array // [out] or nil
	// Scales and Biases are the quantization parameters (nil when plain).
	Scales, Biases  *tensor.Array
	GroupSize, Bits int
	// tap, when set, sees every input (calibration for GPTQ).
	tap func(x *tensor.Array)
}

// Quantized reports whether the layer is affine-quantized.
func (l *Linear) Quantized() bool { return l.Scales != nil }

// Forward applies the layer to x [..., in].
func (l *Linear) Forward(x *tensor.Array) *tensor.Array {
	if l.tap != nil {
		l.tap(x)
	}
	var y *tensor.Array
	if l.Scales != nil {
		y = tensor.QuantizedMatmul(x, l.Weight, l.Scales, l.Biases, true, l.GroupSize, l.Bits)
	} else {
		wt := tensor.Transpose(l.Weight)
		y = tensor.Matmul(x, wt)
		wt.Free()
	}
	if l.Bias != nil {
		yb := tensor.Add(y, l.Bias)
		y.Free()
		y = yb
	}
	return y
}

// Linear loads the layer at the model-relative path name (name.weight,
// name.bias, name.scales, name.biases) with in inputs and out outputs.
func (w *Weights) Linear(name string, in, out int, bias bool) *Linear {
	mod, spec, q := w.quantized(name)
	l := &Linear{}
	if q {
		l.Weight, l.Scales, l.Biases = w.packed(mod, spec, nil, out, in)
		l.GroupSize, l.Bits = spec.GroupSize, spec.Bits
	} else {
		l.Weight = w.load(w.must(name+".weight"), []int{out, in}, tensor.Invalid)
		if !l.Weight.DType().IsFloat() {
			w.failf(mod+".weight", "dtype %s, want a float type (or scales and biases for a quantized layer)", l.Weight.DType())
		}
	}
	if bias {
		l.Bias = w.Tensor(name+".bias", out)
	}
	w.linears[mod] = l
	return l
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
	Weight          *tensor.Array
	Scales, Biases  *tensor.Array
	GroupSize, Bits int
	// DType is the type of the rows returned (the table's, or its scales'
	// when quantized).
	DType tensor.DType
	// tap, when set, sees every input of AsLinear (calibration of a tied head).
	tap func(x *tensor.Array)
}

// Forward returns the rows for ids (any int shape) as [ids..., dim].
func (e *Embedding) Forward(ids *tensor.Array) *tensor.Array {
	if e.Scales == nil {
		return tensor.Take(e.Weight, ids, 0)
	}
	w := tensor.Take(e.Weight, ids, 0)
	s := tensor.Take(e.Scales, ids, 0)
	b := tensor.Take(e.Biases, ids, 0)
	out := tensor.Dequantize(w, s, b, e.GroupSize, e.Bits, e.DType)
	tensor.Free(w, s, b)
	return out
}

// AsLinear uses the table as an output projection (tied heads): x [..., dim]
// → [..., vocab].
func (e *Embedding) AsLinear(x *tensor.Array) *tensor.Array {
	l := Linear{Weight: e.Weight, Scales: e.Scales, Biases: e.Biases, GroupSize: e.GroupSize, Bits: e.Bits, tap: e.tap}
	return l.Forward(x)
}

// Embedding loads a [vocab, dim] table at the model-relative path name.
func (w *Weights) Embedding(name string, vocab, dim int) *Embedding {
	mod, spec, q := w.quantized(name)
	e := &Embedding{}
	if q {
		e.Weight, e.Scales, e.Biases = w.packed(mod, spec, nil, vocab, dim)
		e.GroupSize, e.Bits, e.DType = spec.GroupSize, spec.Bits, e.Scales.DType()
	} else {
		e.Weight = w.load(w.must(name+".weight"), []int{vocab, dim}, tensor.Invalid)
		e.DType = e.Weight.DType()
		if !e.DType.IsFloat() {
			w.failf(mod+".weight", "dtype %s, want a float type", e.DType)
		}
	}
	w.embeds[mod] = e
	return e
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
	Gate, Up, Down *Linear
	// Act is the gate's activation (nil: SiLU).
	Act func(*tensor.Array) *tensor.Array
}

// Forward applies the block to x [..., dim].
func (m *MLP) Forward(x *tensor.Array) *tensor.Array {
	g := m.Gate.Forward(x)
	u := m.Up.Forward(x)
	h := glu(m.Act, g, u)
	tensor.Free(g, u)
	out := m.Down.Forward(h)
	h.Free()
	return out
}

func glu(act func(*tensor.Array) *tensor.Array, g, u *tensor.Array) *tensor.Array {
	if act == nil {
		act = tensor.Silu
	}
	a := act(g)
	h := tensor.Mul(a, u)
	a.Free()
	return h
}

// MLP loads name.gate_proj, name.up_proj and name.down_proj.
func (w *Weights) MLP(name string, dim, hidden int) *MLP {
	return &MLP{
		Gate: w.Linear(name+".gate_proj", dim, hidden, false),
		Up:   w.Linear(name+".up_proj", dim, hidden, false),
		Down: w.Linear(name+".down_proj", hidden, dim, false),
	}
}
