package tensor

// Backend executes array operations. The package-level functions of this
// package validate their arguments, normalise axes, promote dtypes and
// compute result shapes, then call exactly one Backend method; a backend may
// therefore assume its inputs are well formed: axes are non-negative and in
// range, binary operands share one dtype (except where noted), and result
// shapes passed in are correct.
//
// A backend returns new arrays made with NewArray. Backend methods panic
// with an *Error on failure (device out of memory, a backend-level fault);
// the tensor API converts nothing: callers at API boundaries use Try.
//
// Lazy backends (MLX) build graphs and compute on Eval; eager backends (the
// CPU backend) compute immediately and treat Eval as a no-op.
type Backend interface {
	// Name identifies the backend ("cpu", "mlx").
	Name() string

	// FromBytes makes an array from little-endian element bytes, len(raw) ==
	// prod(shape)*dt.Size(). With noCopy the backend may keep raw (for example
	// a read-only mmap of a checkpoint) instead of copying it; raw must then
	// outlive the array and never be written.
	FromBytes(raw []byte, shape []int, dt DType, noCopy bool) *Array
	// Bytes evaluates a and returns its elements, row-major and contiguous, as
	// little-endian bytes in a fresh slice.
	Bytes(a *Array) []byte
	// Full makes an array of shape filled with v converted to dt.
	Full(shape []int, v float64, dt DType) *Array
	// Arange makes a 1-D array start, start+step, ... with n elements.
	Arange(start, step float64, n int, dt DType) *Array
	// Free releases a's storage. It is called once, by Array.Free.
	Free(a *Array)
	// Eval computes arrays (blocking). A no-op for eager backends.
	Eval(arrs ...*Array)
	// AsyncEval schedules the computation of arrays and returns at once.
	AsyncEval(arrs ...*Array)

	// Unary applies an elementwise function; out has a's dtype except for
	// LogicalNot (bool). Float math on 16-bit types is done in float32.
	Unary(op UnaryOp, a *Array) *Array
	// Binary applies an elementwise function with NumPy broadcasting to out
	// (shape given). a and b share a dtype; comparisons and logical ops
	// return bool.
	Binary(op BinaryOp, a, b *Array, shape []int) *Array
	// Where selects a where cond (bool) is true, else b, broadcast to shape;
	// a and b share a dtype.
	Where(cond, a, b *Array, shape []int) *Array
	// AsType converts to dt (float→int truncates toward zero, as C does;
	// to bool is x != 0).
	AsType(a *Array, dt DType) *Array

	// Reduce reduces over the given (sorted, unique) axes. Mean of integers
	// gives float32; Any/All give bool; LogSumExp is computed stably.
	Reduce(op ReduceOp, a *Array, axes []int, keepDims bool) *Array
	// ArgReduce returns int32 indices of the max/min along axis (first on ties).
	ArgReduce(op ArgReduceOp, a *Array, axis int, keepDims bool) *Array
	// Softmax along axis, accumulated in float32, output in a's dtype.
	Softmax(a *Array, axis int) *Array
	// Cumsum along axis; reverse accumulates from the end; exclusive shifts
	// by one so the first element is 0.
	Cumsum(a *Array, axis int, reverse, inclusive bool) *Array
	// Sort sorts ascending along axis (NaN last).
	Sort(a *Array, axis int) *Array
	// Argsort returns the int32 indices that sort a ascending along axis (stable).
	Argsort(a *Array, axis int) *Array
	// Argpartition returns int32 indices such that the element at position
	// kth is in sorted position, smaller ones before it and larger after.
	Argpartition(a *Array, kth, axis int) *Array

	// Matmul multiplies the last two dims with batch broadcasting; a is
	// [..., M, K], b is [..., K, N], out is shape. Either may be a transposed
	// view; backends should use the layout rather than copy.
	Matmul(a, b *Array, shape []int) *Array

	// Take gathers along axis with int indices (any shape); negative indices
	// count from the end.
	Take(a, indices *Array, axis int) *Array
	// TakeAlongAxis gathers with indices broadcast against a except along axis.
	TakeAlongAxis(a, indices *Array, axis int) *Array
	// PutAlongAxis returns a copy of a with values scattered at indices along axis.
	PutAlongAxis(a, indices, values *Array, axis int) *Array

	// Reshape returns a with a new shape of the same size (a view when a is contiguous).
	Reshape(a *Array, shape []int) *Array
	// Transpose permutes axes (a view where the backend supports strides).
	Transpose(a *Array, perm []int) *Array
	// BroadcastTo expands size-1 and missing leading dims (a view where possible).
	BroadcastTo(a *Array, shape []int) *Array
	// Slice takes start:stop:step per axis (steps positive; a view where possible).
	Slice(a *Array, start, stop, step []int) *Array
	// SliceUpdate returns a copy of a with the region start:stop:step replaced
	// by update (already broadcast to the region's shape and cast to a's dtype).
	SliceUpdate(a, update *Array, start, stop, step []int) *Array
	// SliceAssign writes update into the region of dst in place: arrays that
	// shared dst's storage before (views, copies) keep the old values.
	SliceAssign(dst, update *Array, start, stop, step []int)
	// Concatenate joins arrays (same dtype) along axis.
	Concatenate(arrs []*Array, axis int, shape []int) *Array
	// Contiguous returns a row-major copy (or a itself, retained, when already so).
	Contiguous(a *Array) *Array

	// RMSNorm normalises the last axis: x / sqrt(mean(x²)+eps) * w (w may be nil).
	RMSNorm(x, w *Array, eps float32) *Array
	// LayerNorm normalises the last axis with optional weight and bias.
	LayerNorm(x, w, b *Array, eps float32) *Array
	// RoPE rotates the first dims of the last axis of x [..., T, D]; see RoPEOptions.
	RoPE(x *Array, o RoPEOptions) *Array
	// SDPA is scaled dot-product attention; see SDPAOptions.
	SDPA(q, k, v *Array, o SDPAOptions) *Array

	// Quantize packs w [..., N, K] (K divisible by groupSize) in MLX's
	// affine format: uint32 words [..., N, K*bits/32] and scales and biases
	// [..., N, K/groupSize] in w's dtype.
	Quantize(w *Array, groupSize, bits int) (wq, scales, biases *Array)
	// Dequantize inverts Quantize into dt.
	Dequantize(wq, scales, biases *Array, groupSize, bits int, dt DType) *Array
	// QuantizedMatmul computes x @ dequant(w).T (transpose) or x @ dequant(w)
	// without materialising the dequantized weight; out has shape and x's dtype.
	QuantizedMatmul(x, wq, scales, biases *Array, transpose bool, groupSize, bits int, shape []int) *Array
	// GatherQMM is QuantizedMatmul where each batch entry of x selects its
	// weight matrix from the leading (expert) dims of w by rhsIndices and
	// its x matrix by lhsIndices (either may be nil: identity).
	GatherQMM(x, wq, scales, biases, lhsIndices, rhsIndices *Array, transpose bool, groupSize, bits int, shape []int) *Array

	// RandomBits returns uint32 words from the threefry-2x32 generator keyed
	// by key (a uint32 array of shape [2]) exactly as MLX computes them.
	RandomBits(key *Array, shape []int) *Array
}

// UnaryOp names an elementwise function of one argument.
type UnaryOp uint8

// Unary operations.
const (
	OpNeg UnaryOp = iota
	OpAbs
	OpSign
	OpSquare
	OpSqrt
	OpRsqrt
	OpReciprocal
	OpExp
	OpLog
	OpLog1p
	OpSin
	OpCos
	OpTanh
	OpSigmoid
	OpSoftplus
	OpErf
	OpGelu     // exact: x/2 (1 + erf(x/√2))
	OpGeluTanh // tanh approximation
	OpSilu
	OpFloor
	OpCeil
	OpRound // half to even
	OpLogicalNot
	OpIsNaN
	OpIsInf
)

// BinaryOp names an elementwise function of two arguments.
type BinaryOp uint8

// Binary operations.
const (
	OpAdd BinaryOp = iota
	OpSub
	OpMul
	OpDiv
	OpPow
	OpMaximum
	OpMinimum
	OpRemainder // result has the sign of the divisor, like Python's %
	OpFloorDivide
	OpEqual
	OpNotEqual
	OpLess
	OpLessEqual
	OpGreater
	OpGreaterEqual
	OpLogicalAnd
	OpLogicalOr
	OpBitwiseAnd
	OpBitwiseOr
	OpBitwiseXor
	OpLeftShift
	OpRightShift
)

// IsComparison reports whether op returns bool.
func (op BinaryOp) IsComparison() bool { return op >= OpEqual && op <= OpLogicalOr }

// ReduceOp names a reduction.
type ReduceOp uint8

// Reductions.
const (
	ReduceSum ReduceOp = iota
	ReduceMean
	ReduceProd
	ReduceMax
	ReduceMin
	ReduceAny
	ReduceAll
	ReduceLogSumExp
)

// ArgReduceOp names an index-returning reduction.
type ArgReduceOp uint8

// Index reductions.
const (
	ArgMax ArgReduceOp = iota
	ArgMin
)

// RoPEOptions configures rotary position embedding, with MLX's fast.rope
// semantics: the first Dims features of the last axis rotate; the rest pass
// through. Position t of the sequence axis (second to last) has angle
// (Offset+t)·θ_i with θ_i = Scale·base^(-2i/Dims), or Scale/Freqs[i] when
// Freqs is given (then Base is ignored).
type RoPEOptions struct {
	Dims        int
	Traditional bool    // rotate interleaved pairs (x0,x1),(x2,x3)… instead of halves
	Base        float32 // e.g. 10000
	Scale       float32 // position multiplier; 1 for none
	Offset      int     // first position
	// OffsetArr, when non-nil, is an int32 array of shape [] or [B] giving the
	// offset per batch entry (x's leading dim); it overrides Offset.
	OffsetArr *Array
	// Freqs, when non-nil, is a float32 array of Dims/2 wavelengths
	// (positions are divided by them), overriding Base.
	Freqs *Array
}

// PagedAttention is implemented by backends that attend over a paged KV
// pool in place (ScaledDotProductAttentionPaged gathers the blocks for
// those that do not). Arguments are checked by the caller; table holds
// exactly the blocks of the kvLen keys, and the result must equal SDPA on
// the gathered keys and values bit for bit.
type PagedAttention interface {
	SDPAPaged(q, kPool, vPool *Array, table []int32, kvLen int, o SDPAOptions) *Array
}

// PagedQuantizedMatmul is implemented by backends that multiply by an
// affine-quantized paged KV pool in place (QuantizedMatmulPaged gathers
// the blocks otherwise). Arguments are checked by the caller and table
// holds exactly the blocks of the kvLen positions; the result, of shape,
// must equal QuantizedMatmul on the gathered matrix bit for bit. A backend
// returns nil for a product it does not compute in place, and the caller
// gathers.
type PagedQuantizedMatmul interface {
	QuantizedMatmulPaged(x, wPool, sPool, bPool *Array, table []int32, kvLen int, transpose bool, groupSize, bits int, shape []int) *Array
}

// MaskKind selects how SDPA masks scores.
type MaskKind uint8

// Mask kinds.
const (
	MaskNone   MaskKind = iota
	MaskCausal          // query i (aligned to the end of the keys) sees keys ≤ its position
	MaskArray           // Mask is a bool (true = keep) or additive float array broadcastable to [B, Hq, Tq, Tk]
)

// SDPAOptions configures scaled dot-product attention. q is [B, Hq, Tq, D],
// k is [B, Hkv, Tk, D], v is [B, Hkv, Tk, Dv] with Hq a multiple of Hkv
// (grouped-query attention); the result is [B, Hq, Tq, Dv] in q's dtype.
// Scores are computed and softmaxed in float32. A row whose every key is
// masked yields zeros, not NaN.
type SDPAOptions struct {
	Scale    float32
	MaskKind MaskKind
	Mask     *Array
	// Sinks, when non-nil, is a [Hq] array of per-head logits joined to every
	// row's softmax as an extra key with a zero value vector.
	Sinks *Array
	// KeyStart is the sequence position of key 0, when the keys are
	// consecutive positions (a sliding window that no longer starts at
	// position 0). It changes no value: a backend whose reductions run in
	// fixed pieces (the CPU backend's key chunks and blocks) aligns those
	// pieces to positions rather than to key indices, so that a query
	// sums its keys in the same pieces whichever window of keys a call
	// hands it (a prefill chunk's or a decode step's). 0 for keys that
	// start at position 0 or are not consecutive.
	KeyStart int
}
