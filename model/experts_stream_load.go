package model

import (
	"container/list"
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// Streaming counterparts of the expert loaders (SwitchLinear,
// FusedExperts, StackedLinear): they check the stored tensors as those do
// but read nothing, recording where each expert's bytes lie instead.

// streamRange is a byte range of a stored tensor: expert slices of it are
// contiguous because the expert is the leading axis (or the tensor is one
// expert's).
type streamRange struct {
	full  string
	begin int64 // absolute file offset of the tensor's data
	size  int64
	dt    tensor.DType
}

// streamTensor checks the stored tensor full against shape and dtype (as
// load does) and returns where its data lies. It marks the tensor used.
func (w *Weights) streamTensor(full string, shape []int, dt tensor.DType) streamRange {
	info, err := w.set.Info(full)
	if err != nil {
		fail(fmt.Errorf("%w: %w", ErrCheckpoint, err))
	}
	if info.DType == tensor.Invalid {
		w.failf(full, "unsupported dtype %s", info.RawDType)
	}
	if shape != nil && !shapeMatches(info.Shape, shape) {
		w.failf(full, "shape %v, want %v", info.Shape, shape)
	}
	if dt != tensor.Invalid && info.DType != dt {
		w.failf(full, "dtype %s, want %s", info.DType, dt)
	}
	f, err := w.set.File(full)
	if err != nil {
		fail(fmt.Errorf("%w: %w", ErrCheckpoint, err))
	}
	if f.Path() == memoryName {
		w.failf(full, "expert streaming needs a checkpoint on disk")
	}
	w.used[full] = true
	return streamRange{full: full, begin: f.DataOffset() + info.Begin, size: info.Size(), dt: info.DType}
}

// memoryName is the path safetensors gives files parsed from memory.
const memoryName = "<memory>"

// part is expert e's slice [lo, lo+n) bytes into its slice of r, where r
// holds experts equal slices, shaped shape.
func (w *Weights) part(r streamRange, experts, e int, lo, n int64, shape []int) expertPart {
	f, err := w.set.File(r.full)
	if err != nil {
		fail(fmt.Errorf("%w: %w", ErrCheckpoint, err))
	}
	h, err := w.stream.file(f.Path())
	if err != nil {
		w.failf(r.full, "open for expert streaming: %v", err)
	}
	stride := r.size / int64(experts)
	if n < 0 {
		n = stride
	}
	return expertPart{file: h, off: r.begin + int64(e)*stride + lo, n: n, shape: shape, dt: r.dt}
}

// newStreamBank registers a bank with the store.
func (w *Weights) newStreamBank(experts, in, out int, parts [][]expertPart) *streamBank {
	s := w.stream
	b := &streamBank{store: s, id: len(s.banks), n: experts, parts: parts, in: in, out: out, lru: list.New()}
	s.banks = append(s.banks, b)
	for _, ps := range parts {
		for _, p := range ps {
			s.stats.TotalBytes += p.n
		}
	}
	s.stats.Experts += experts
	return b
}

// streamSwitchLinear is SwitchLinear's streaming form: a stacked bank
// (name.weight [E, out, in], or packed with name.scales and name.biases).
func (w *Weights) streamSwitchLinear(name string, experts, in, out int) ExpertBank {
	mod, spec, q := w.quantized(name)
	parts := make([][]expertPart, experts)
	var b *streamBank
	if q {
		if in%spec.GroupSize != 0 || (in*spec.Bits)%32 != 0 {
			w.failf(mod+".weight", "input dim %d is not a multiple of group size %d (inconsistent quantization config)", in, spec.GroupSize)
		}
		wr := w.streamTensor(mod+".weight", []int{experts, out, in * spec.Bits / 32}, tensor.Uint32)
		sr := w.streamTensor(mod+".scales", []int{experts, out, in / spec.GroupSize}, tensor.Invalid)
		br := w.streamTensor(mod+".biases", []int{experts, out, in / spec.GroupSize}, sr.dt)
		if !sr.dt.IsFloat() {
			w.failf(mod+".scales", "dtype %s, want a float type", sr.dt)
		}
		for e := range experts {
			parts[e] = []expertPart{
				w.part(wr, experts, e, 0, -1, []int{out, in * spec.Bits / 32}),
				w.part(sr, experts, e, 0, -1, []int{out, in / spec.GroupSize}),
				w.part(br, experts, e, 0, -1, []int{out, in / spec.GroupSize}),
			}
		}
		b = w.newStreamBank(experts, in, out, parts)
		b.quant, b.spec = true, spec
	} else {
		r := w.streamTensor(w.must(name+".weight"), []int{experts, out, in}, tensor.Invalid)
		for e := range experts {
			parts[e] = []expertPart{w.part(r, experts, e, 0, -1, []int{out, in})}
		}
		b = w.newStreamBank(experts, in, out, parts)
	}
	return w.wrapBank(Module{Path: mod, Source: mod + ".weight"}, b)
}

// streamFused is FusedExperts' streaming form: gate and up are the two
// halves of each expert's slice of name.gate_up_proj.
func (w *Weights) streamFused(name string, experts, dim, hidden int) *SwitchGLU {
	src := w.must(name + ".gate_up_proj")
	gu := w.streamTensor(src, []int{experts, 2 * hidden, dim}, tensor.Invalid)
	dn := w.streamTensor(w.must(name+".down_proj"), []int{experts, dim, hidden}, tensor.Invalid)
	half := int64(hidden * dim * gu.dt.Size())
	gp, up, dp := make([][]expertPart, experts), make([][]expertPart, experts), make([][]expertPart, experts)
	for e := range experts {
		gp[e] = []expertPart{w.part(gu, experts, e, 0, half, []int{hidden, dim})}
		up[e] = []expertPart{w.part(gu, experts, e, half, half, []int{hidden, dim})}
		dp[e] = []expertPart{w.part(dn, experts, e, 0, -1, []int{dim, hidden})}
	}
	s := &SwitchGLU{
		Gate: w.newStreamBank(experts, dim, hidden, gp),
		Up:   w.newStreamBank(experts, dim, hidden, up),
		Down: w.newStreamBank(experts, hidden, dim, dp),
	}
	w.wrapBanks(trimSuffix(src, ".experts.gate_up_proj"), src, s)
	return s
}

// streamPerExpert is StackedLinear's streaming form: one stored tensor
// per expert (nameOf(e) + ".weight").
func (w *Weights) streamPerExpert(nameOf func(e int) string, experts, in, out int) *streamBank {
	parts := make([][]expertPart, experts)
	for e := range experts {
		base := nameOf(e)
		if w.Has(base + ".scales") {
			w.failf(w.must(base+".scales"), "per-expert quantized weights are not supported (MLX checkpoints stack experts)")
		}
		r := w.streamTensor(w.must(base+".weight"), []int{out, in}, tensor.Invalid)
		parts[e] = []expertPart{w.part(r, 1, 0, 0, -1, []int{out, in})}
	}
	return w.newStreamBank(experts, in, out, parts)
}

func trimSuffix(s, suffix string) string {
	if len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)]
	}
	return s
}
