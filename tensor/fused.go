package tensor

import (
	"math"
	"slices"
)

// ---- fused layers ----

// RMSNorm normalises the last axis: x·rsqrt(mean(x²)+eps)·w, accumulating
// in float32. w (shape [D]) may be nil. The result has x's dtype.
func RMSNorm(x, w *Array, eps float32) *Array {
	sameBackend("RMSNorm", x, w)
	if x.NDim() == 0 {
		throw("RMSNorm", ErrShape, "scalar input")
	}
	if !x.dtype.IsFloat() {
		throw("RMSNorm", ErrDType, "%s input", x.dtype)
	}
	d := x.shape[x.NDim()-1]
	if w != nil && (w.NDim() != 1 || w.shape[0] != d) {
		throw("RMSNorm", ErrShape, "weight %v for last dim %d", w.shape, d)
	}
	return x.be.RMSNorm(x, w, eps)
}

// LayerNorm normalises the last axis to zero mean and unit variance, then
// scales by w and shifts by b (either may be nil).
func LayerNorm(x, w, b *Array, eps float32) *Array {
	sameBackend("LayerNorm", x, w, b)
	if x.NDim() == 0 || !x.dtype.IsFloat() {
		throw("LayerNorm", ErrShape, "input %s%v", x.dtype, x.shape)
	}
	d := x.shape[x.NDim()-1]
	for _, p := range []*Array{w, b} {
		if p != nil && (p.NDim() != 1 || p.shape[0] != d) {
			throw("LayerNorm", ErrShape, "parameter %v for last dim %d", p.shape, d)
		}
	}
	return x.be.LayerNorm(x, w, b, eps)
}

// RoPE applies rotary position embedding to x [..., T, D]; see RoPEOptions.
func RoPE(x *Array, o RoPEOptions) *Array {
	ropeCheck(x, &o)
	return x.be.RoPE(x, o)
}

// ropeCheck refuses RoPE arguments that do not fit x and fills in the
// default scale.
func ropeCheck(x *Array, o *RoPEOptions) {
	sameBackend("RoPE", x, o.OffsetArr, o.Freqs)
	if x.NDim() < 2 || !x.dtype.IsFloat() {
		throw("RoPE", ErrShape, "input %s%v (want float [..., T, D])", x.dtype, x.shape)
	}
	d := x.shape[x.NDim()-1]
	if o.Dims <= 0 || o.Dims > d || o.Dims%2 != 0 {
		throw("RoPE", ErrArgument, "dims %d for head dim %d (must be even and ≤ it)", o.Dims, d)
	}
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.Freqs == nil && o.Base <= 0 {
		throw("RoPE", ErrArgument, "base %v", o.Base)
	}
	if o.Freqs != nil && (o.Freqs.NDim() != 1 || o.Freqs.shape[0] != o.Dims/2) {
		throw("RoPE", ErrShape, "freqs %v for %d dims", o.Freqs.shape, o.Dims)
	}
	if o.OffsetArr != nil {
		if !o.OffsetArr.dtype.IsInteger() || o.OffsetArr.NDim() > 1 ||
			(o.OffsetArr.NDim() == 1 && o.OffsetArr.shape[0] != x.shape[0] && o.OffsetArr.shape[0] != 1) {
			throw("RoPE", ErrShape, "offset array %s%v for input %v", o.OffsetArr.dtype, o.OffsetArr.shape, x.shape)
		}
	}
}

// RoPESpan is a run of Len tokens of x's T axis, from token Start, that
// RoPESpans rotates from position Offset.
type RoPESpan struct{ Start, Len, Offset int }

// SpanRoPE is implemented by backends that rotate a call's spans in one
// pass; the result must equal RoPE of each span alone, bit for bit.
type SpanRoPE interface {
	RoPESpans(x *Array, o RoPEOptions, spans []RoPESpan) *Array
}

// RoPESpans applies RoPE to x [..., T, D] whose T tokens divide into
// spans (consecutive, in order, covering T), each span at its own
// offset: what a batched pass of rows at different positions needs. The
// result is RoPE of each span alone, concatenated; o.Offset and
// o.OffsetArr must be unset.
func RoPESpans(x *Array, o RoPEOptions, spans []RoPESpan) *Array {
	ropeCheck(x, &o)
	if o.Offset != 0 || o.OffsetArr != nil {
		throw("RoPE", ErrArgument, "spans with an offset option (each span has its own)")
	}
	t, next := x.shape[x.NDim()-2], 0
	for _, s := range spans {
		if s.Start != next || s.Len < 0 || s.Offset < 0 {
			throw("RoPE", ErrArgument, "span %+v after token %d", s, next)
		}
		next += s.Len
	}
	if next != t {
		throw("RoPE", ErrShape, "spans cover %d tokens of %d", next, t)
	}
	if len(spans) == 1 {
		o.Offset = spans[0].Offset
		return RoPE(x, o)
	}
	if sr, ok := x.be.(SpanRoPE); ok {
		return sr.RoPESpans(x, o, spans)
	}
	sc := NewScope()
	defer sc.Close()
	parts := make([]*Array, len(spans))
	for i, s := range spans {
		so := o
		so.Offset = s.Offset
		parts[i] = RoPE(SliceAxis(x, x.NDim()-2, s.Start, s.Start+s.Len), so)
	}
	return sc.Keep(Concatenate(parts, x.NDim()-2))
}

// ScaledDotProductAttention computes softmax(q·kᵀ·scale + mask)·v with
// grouped-query heads; see SDPAOptions. A zero Scale means 1/√D.
func ScaledDotProductAttention(q, k, v *Array, o SDPAOptions) *Array {
	sameBackend("SDPA", q, k, v, o.Mask, o.Sinks)
	if q.NDim() != 4 || k.NDim() != 4 || v.NDim() != 4 {
		throw("SDPA", ErrShape, "q %v, k %v, v %v (want [B, H, T, D])", q.shape, k.shape, v.shape)
	}
	b, hq, _, d := q.shape[0], q.shape[1], q.shape[2], q.shape[3]
	hkv, tk := k.shape[1], k.shape[2]
	if k.shape[0] != b || v.shape[0] != b || k.shape[3] != d || v.shape[1] != hkv || v.shape[2] != tk {
		throw("SDPA", ErrShape, "q %v, k %v, v %v disagree", q.shape, k.shape, v.shape)
	}
	if hkv == 0 || hq%hkv != 0 {
		throw("SDPA", ErrShape, "%d query heads for %d kv heads", hq, hkv)
	}
	if o.Scale == 0 {
		o.Scale = float32(1 / math.Sqrt(float64(d)))
	}
	if o.MaskKind == MaskArray {
		if o.Mask == nil {
			throw("SDPA", ErrArgument, "MaskArray without a mask")
		}
		want := []int{b, hq, q.shape[2], tk}
		if bs, ok := BroadcastShapes(o.Mask.shape, want); !ok || !slices.Equal(bs, want) {
			throw("SDPA", ErrShape, "mask %v does not broadcast to %v", o.Mask.shape, want)
		}
	}
	if o.Sinks != nil && (o.Sinks.NDim() != 1 || o.Sinks.shape[0] != hq) {
		throw("SDPA", ErrShape, "sinks %v for %d heads", o.Sinks.shape, hq)
	}
	return q.be.SDPA(q, k, v, o)
}

// ---- quantization ----

// QuantBitsSupported lists the bit widths of MLX's affine quantization.
var QuantBitsSupported = []int{2, 3, 4, 5, 6, 8}

// QuantGroupsSupported lists the group sizes of MLX's affine quantization.
var QuantGroupsSupported = []int{32, 64, 128}

func checkQuant(op string, groupSize, bits int) {
	if !slices.Contains(QuantBitsSupported, bits) {
		throw(op, ErrArgument, "bits %d (supported: %v)", bits, QuantBitsSupported)
	}
	if !slices.Contains(QuantGroupsSupported, groupSize) {
		throw(op, ErrArgument, "group size %d (supported: %v)", groupSize, QuantGroupsSupported)
	}
}

// PackedDim is the number of uint32 words a row of k values takes at bits.
func PackedDim(k, bits int) int { return k * bits / 32 }

// Quantize packs w [..., N, K] with MLX's affine quantization (w ≈ scale·q +
// bias per group of groupSize along K). It returns the uint32-packed
// weights [..., N, K·bits/32] and scales and biases [..., N, K/groupSize] in
// w's dtype — the bytes MLX would produce.
func Quantize(w *Array, groupSize, bits int) (wq, scales, biases *Array) {
	w.check()
	checkQuant("Quantize", groupSize, bits)
	if w.NDim() < 2 || !w.dtype.IsFloat() {
		throw("Quantize", ErrShape, "weight %s%v (want float, ≥ 2 dims)", w.dtype, w.shape)
	}
	k := w.shape[w.NDim()-1]
	if k%groupSize != 0 || (k*bits)%32 != 0 {
		throw("Quantize", ErrShape, "last dim %d is not a multiple of group size %d", k, groupSize)
	}
	return w.be.Quantize(w, groupSize, bits)
}

func checkQuantArrays(op string, wq, scales, biases *Array, groupSize, bits int) (n, k int) {
	checkQuant(op, groupSize, bits)
	if wq.dtype != Uint32 || wq.NDim() < 2 {
		throw(op, ErrDType, "packed weight %s%v (want uint32, ≥ 2 dims)", wq.dtype, wq.shape)
	}
	n = wq.shape[wq.NDim()-2]
	k = wq.shape[wq.NDim()-1] * 32 / bits
	want := slices.Clone(wq.shape)
	want[len(want)-1] = k / groupSize
	if !slices.Equal(scales.shape, want) || !slices.Equal(biases.shape, want) {
		throw(op, ErrShape, "scales %v / biases %v for packed weight %v (want %v)", scales.shape, biases.shape, wq.shape, want)
	}
	if !scales.dtype.IsFloat() || biases.dtype != scales.dtype {
		throw(op, ErrDType, "scales %s, biases %s", scales.dtype, biases.dtype)
	}
	return n, k
}

// Dequantize unpacks MLX affine-quantized weights into dt (scales' dtype when Invalid).
func Dequantize(wq, scales, biases *Array, groupSize, bits int, dt DType) *Array {
	sameBackend("Dequantize", wq, scales, biases)
	checkQuantArrays("Dequantize", wq, scales, biases, groupSize, bits)
	if dt == Invalid {
		dt = scales.dtype
	}
	return wq.be.Dequantize(wq, scales, biases, groupSize, bits, dt)
}

// QuantizedMatmul is x @ dequantize(w).T when transpose (the Linear layer:
// w is [N, K], x is [..., K], out [..., N]), else x @ dequantize(w) (w is
// [K, N] packed along N). The weight is never dequantized as a whole.
func QuantizedMatmul(x, wq, scales, biases *Array, transpose bool, groupSize, bits int) *Array {
	sameBackend("QuantizedMatmul", x, wq, scales, biases)
	n, k := checkQuantArrays("QuantizedMatmul", wq, scales, biases, groupSize, bits)
	if !x.dtype.IsFloat() || x.NDim() < 1 {
		throw("QuantizedMatmul", ErrDType, "input %s%v", x.dtype, x.shape)
	}
	inner, outer := k, n
	if !transpose {
		inner, outer = n, k
	}
	if x.shape[x.NDim()-1] != inner {
		throw("QuantizedMatmul", ErrShape, "input %v, weight %v (transpose=%v): inner dims differ", x.shape, wq.shape, transpose)
	}
	var shape []int
	if wq.NDim() > 2 {
		xb := x.shape[:max(x.NDim()-2, 0)]
		batch, ok := BroadcastShapes(xb, wq.shape[:wq.NDim()-2])
		if !ok {
			throw("QuantizedMatmul", ErrShape, "batch dims of %v and %v", x.shape, wq.shape)
		}
		m := 1
		if x.NDim() >= 2 {
			m = x.shape[x.NDim()-2]
		}
		shape = append(slices.Clone(batch), m, outer)
	} else {
		shape = append(slices.Clone(x.shape[:x.NDim()-1]), outer)
	}
	return x.be.QuantizedMatmul(x, wq, scales, biases, transpose, groupSize, bits, shape)
}

// GatherQMM is the quantized matmul of mixture-of-experts layers: wq is
// [E, N, K'] (experts first); rhsIndices (int, any shape I) picks an expert
// per output entry and lhsIndices (or nil) picks x's matrix from x's
// leading dims flattened; x is [..., M, K]. The result is [I..., M, N].
func GatherQMM(x, wq, scales, biases, lhsIndices, rhsIndices *Array, transpose bool, groupSize, bits int) *Array {
	sameBackend("GatherQMM", x, wq, scales, biases, lhsIndices, rhsIndices)
	n, k := checkQuantArrays("GatherQMM", wq, scales, biases, groupSize, bits)
	if rhsIndices == nil {
		throw("GatherQMM", ErrArgument, "rhs indices are required")
	}
	checkIndices("GatherQMM", rhsIndices)
	if x.NDim() < 2 {
		throw("GatherQMM", ErrShape, "input %v (want [..., M, K])", x.shape)
	}
	inner, outer := k, n
	if !transpose {
		inner, outer = n, k
	}
	if x.shape[x.NDim()-1] != inner {
		throw("GatherQMM", ErrShape, "input %v, weight %v: inner dims differ", x.shape, wq.shape)
	}
	var idxShape []int
	if lhsIndices != nil {
		checkIndices("GatherQMM", lhsIndices)
		s, ok := BroadcastShapes(lhsIndices.shape, rhsIndices.shape)
		if !ok {
			throw("GatherQMM", ErrShape, "lhs indices %v and rhs indices %v", lhsIndices.shape, rhsIndices.shape)
		}
		idxShape = s
	} else {
		// without lhs indices x's batch dims must broadcast with the indices
		s, ok := BroadcastShapes(x.shape[:x.NDim()-2], rhsIndices.shape)
		if !ok {
			throw("GatherQMM", ErrShape, "input batch %v and indices %v", x.shape[:x.NDim()-2], rhsIndices.shape)
		}
		idxShape = s
	}
	shape := append(slices.Clone(idxShape), x.shape[x.NDim()-2], outer)
	return x.be.GatherQMM(x, wq, scales, biases, lhsIndices, rhsIndices, transpose, groupSize, bits, shape)
}

// ---- random (MLX's threefry generator, bit-exact) ----

// Key makes a PRNG key from a seed, as mlx.random.key does: the uint32 pair
// (seed>>32, seed&0xffffffff).
func Key(seed uint64) *Array { return KeyOn(Default(), seed) }

// KeyOn is Key on a given backend.
func KeyOn(be Backend, seed uint64) *Array {
	raw := []byte{0, 0, 0, 0, 0, 0, 0, 0}
	hi, lo := uint32(seed>>32), uint32(seed)
	for i := range 4 {
		raw[i] = byte(hi >> (8 * i))
		raw[4+i] = byte(lo >> (8 * i))
	}
	return FromBytesOn(be, raw, []int{2}, Uint32, false)
}

// RandomBits returns uint32 random words of shape from key.
func RandomBits(key *Array, shape ...int) *Array {
	key.check()
	if key.dtype != Uint32 || !slices.Equal(key.shape, []int{2}) {
		throw("RandomBits", ErrArgument, "key %s%v (want uint32[2])", key.dtype, key.shape)
	}
	checkShape("RandomBits", shape)
	return key.be.RandomBits(key, slices.Clone(shape))
}

// SplitKey derives num new keys from key (as mlx.random.split): a [num, 2] array.
func SplitKey(key *Array, num int) *Array { return RandomBits(key, num, 2) }

// SplitKey2 derives two keys, as mlx.random.split(key) does.
func SplitKey2(key *Array) (a, b *Array) {
	ks := SplitKey(key, 2)
	defer ks.Free()
	r0 := SliceAxis(ks, 0, 0, 1)
	defer r0.Free()
	r1 := SliceAxis(ks, 0, 1, 2)
	defer r1.Free()
	return Reshape(r0, 2), Reshape(r1, 2)
}

// Uniform draws values in [low, high) of dt (a float type), bit-for-bit as
// mlx.random.uniform computes them from the same key.
func Uniform(key *Array, shape []int, low, high float64, dt DType) *Array {
	if !dt.IsFloat() {
		throw("Uniform", ErrDType, "%s", dt)
	}
	s := NewScope()
	defer s.Close()
	be := key.Backend()
	bits := RandomBits(key, shape...)
	f := AsType(bits, Float32)
	u := Div(f, FullOn(be, nil, float64(math.MaxUint32), Float32))
	var upper float64
	switch dt {
	case Float32:
		upper = float64(math.Nextafter32(1, 0))
	case Float16:
		upper = float64(F16ToF32(F32ToF16(1) - 1))
	case BFloat16:
		upper = float64(BF16ToF32(F32ToBF16(1) - 1))
	}
	u = AsType(Minimum(u, FullOn(be, nil, upper, Float32)), dt)
	lo := FullOn(be, nil, low, dt)
	rng := Sub(FullOn(be, nil, high, dt), lo)
	out := Add(Mul(rng, u), lo)
	return s.Keep(out)
}

// Gumbel draws standard Gumbel noise, -log(-log(u)), as mlx.random.gumbel.
func Gumbel(key *Array, shape []int, dt DType) *Array {
	s := NewScope()
	defer s.Close()
	u := Uniform(key, shape, 0, 1, dt)
	out := Neg(Log(Neg(Log(u))))
	return s.Keep(out)
}

// Categorical samples int32 indices along axis of logits (unnormalised log
// probabilities) by the Gumbel-max trick, as mlx.random.categorical.
func Categorical(key *Array, logits *Array, axis int) *Array {
	s := NewScope()
	defer s.Close()
	ax := normAxis(axis, logits.NDim(), "Categorical")
	g := Gumbel(key, logits.Shape(), Float32)
	out := Argmax(Add(g, logits), ax, false)
	return s.Keep(out)
}

// PackCodes writes quantization codes (each < 2^bits) into dst as MLX
// packs them: a little-endian bit stream of bits-wide fields, so a row of
// k codes takes PackedDim(k, bits) words. Tools that choose codes
// themselves (GPTQ) use it to write MLX's format.
func PackCodes(dst []uint32, codes []uint8, bits int) {
	var acc uint64
	n, o := 0, 0
	for _, c := range codes {
		acc |= uint64(c) << n
		n += bits
		if n >= 32 {
			dst[o] = uint32(acc)
			o++
			acc >>= 32
			n -= 32
		}
	}
}
