package tensor

import (
	"slices"
	"sort"
)

// ---- elementwise ----

func unary(op UnaryOp, a *Array) *Array {
	a.check()
	if op == OpLogicalNot {
		if a.dtype != Bool {
			b := AsType(a, Bool)
			defer b.Free()
			return a.be.Unary(op, b)
		}
		return a.be.Unary(op, a)
	}
	if needsFloat(op) && !a.dtype.IsFloat() {
		f := AsType(a, Float32)
		defer f.Free()
		return a.be.Unary(op, f)
	}
	return a.be.Unary(op, a)
}

func needsFloat(op UnaryOp) bool {
	switch op {
	case OpNeg, OpAbs, OpSign, OpSquare, OpFloor, OpCeil, OpRound, OpLogicalNot, OpIsNaN, OpIsInf:
		return false
	}
	return true
}

// Neg is -a.
func Neg(a *Array) *Array { return unary(OpNeg, a) }

// Abs is |a|.
func Abs(a *Array) *Array { return unary(OpAbs, a) }

// Sign is -1, 0 or 1.
func Sign(a *Array) *Array { return unary(OpSign, a) }

// Square is a².
func Square(a *Array) *Array { return unary(OpSquare, a) }

// Sqrt is √a.
func Sqrt(a *Array) *Array { return unary(OpSqrt, a) }

// Rsqrt is 1/√a.
func Rsqrt(a *Array) *Array { return unary(OpRsqrt, a) }

// Reciprocal is 1/a.
func Reciprocal(a *Array) *Array { return unary(OpReciprocal, a) }

// Exp is eᵃ.
func Exp(a *Array) *Array { return unary(OpExp, a) }

// Log is the natural logarithm.
func Log(a *Array) *Array { return unary(OpLog, a) }

// Log1p is log(1+a), accurate near 0.
func Log1p(a *Array) *Array { return unary(OpLog1p, a) }

// Sin is the sine.
func Sin(a *Array) *Array { return unary(OpSin, a) }

// Cos is the cosine.
func Cos(a *Array) *Array { return unary(OpCos, a) }

// Tanh is the hyperbolic tangent.
func Tanh(a *Array) *Array { return unary(OpTanh, a) }

// Sigmoid is 1/(1+e⁻ᵃ).
func Sigmoid(a *Array) *Array { return unary(OpSigmoid, a) }

// Softplus is log(1+eᵃ), stable for large |a|.
func Softplus(a *Array) *Array { return unary(OpSoftplus, a) }

// Erf is the error function.
func Erf(a *Array) *Array { return unary(OpErf, a) }

// Gelu is the exact GELU, a/2·(1+erf(a/√2)).
func Gelu(a *Array) *Array { return unary(OpGelu, a) }

// GeluApprox is the tanh-approximate GELU (gelu_pytorch_tanh).
func GeluApprox(a *Array) *Array { return unary(OpGeluTanh, a) }

// Silu is a·sigmoid(a).
func Silu(a *Array) *Array { return unary(OpSilu, a) }

// Floor rounds down.
func Floor(a *Array) *Array { return unary(OpFloor, a) }

// Ceil rounds up.
func Ceil(a *Array) *Array { return unary(OpCeil, a) }

// Round rounds half to even.
func Round(a *Array) *Array { return unary(OpRound, a) }

// LogicalNot is !a (bool result).
func LogicalNot(a *Array) *Array { return unary(OpLogicalNot, a) }

// IsNaN is true where a is NaN.
func IsNaN(a *Array) *Array {
	if !a.DType().IsFloat() {
		return FullOn(a.be, a.shape, 0, Bool)
	}
	return unary(OpIsNaN, a)
}

// IsInf is true where a is ±Inf.
func IsInf(a *Array) *Array {
	if !a.DType().IsFloat() {
		return FullOn(a.be, a.shape, 0, Bool)
	}
	return unary(OpIsInf, a)
}

// BroadcastShapes returns the NumPy broadcast of shapes, or an error naming them.
func BroadcastShapes(shapes ...[]int) ([]int, bool) {
	n := 0
	for _, s := range shapes {
		n = max(n, len(s))
	}
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := n - len(s)
		for i, d := range s {
			o := out[off+i]
			switch {
			case o == d || d == 1:
			case o == 1:
				out[off+i] = d
			default:
				return nil, false
			}
		}
	}
	return out, true
}

func binaryOp(op BinaryOp, name string, a, b *Array) *Array {
	be := sameBackend(name, a, b)
	shape, ok := BroadcastShapes(a.shape, b.shape)
	if !ok {
		throw(name, ErrShape, "cannot broadcast %v with %v", a.shape, b.shape)
	}
	dt := PromoteTypes(a.dtype, b.dtype)
	switch op {
	case OpDiv, OpPow:
		if !dt.IsFloat() {
			dt = Float32
		}
	case OpLogicalAnd, OpLogicalOr:
		dt = Bool
	case OpBitwiseAnd, OpBitwiseOr, OpBitwiseXor, OpLeftShift, OpRightShift:
		if dt.IsFloat() {
			throw(name, ErrDType, "bitwise op on %s", dt)
		}
	}
	x, y := a, b
	if x.dtype != dt {
		x = AsType(a, dt)
		defer x.Free()
	}
	if y.dtype != dt {
		y = AsType(b, dt)
		defer y.Free()
	}
	return be.Binary(op, x, y, shape)
}

// scalarOp applies op with a Python-style scalar: the result keeps a's dtype
// when a is floating point (as in MLX), else promotes to float32 for
// non-integral scalars.
func scalarOp(op BinaryOp, name string, a *Array, v float64, scalarFirst bool) *Array {
	a.check()
	dt := a.dtype
	if !dt.IsFloat() && (v != float64(int64(v)) || op == OpDiv || op == OpPow) {
		dt = Float32
	}
	if dt == Bool {
		dt = Int32
	}
	s := FullOn(a.be, nil, v, dt)
	defer s.Free()
	if scalarFirst {
		return binaryOp(op, name, s, a)
	}
	return binaryOp(op, name, a, s)
}

// Add is a+b with broadcasting.
func Add(a, b *Array) *Array { return binaryOp(OpAdd, "Add", a, b) }

// Sub is a-b.
func Sub(a, b *Array) *Array { return binaryOp(OpSub, "Sub", a, b) }

// Mul is a·b.
func Mul(a, b *Array) *Array { return binaryOp(OpMul, "Mul", a, b) }

// Div is a/b (true division; integers give float32).
func Div(a, b *Array) *Array { return binaryOp(OpDiv, "Div", a, b) }

// Pow is aᵇ.
func Pow(a, b *Array) *Array { return binaryOp(OpPow, "Pow", a, b) }

// Maximum is the elementwise max (NaN propagates).
func Maximum(a, b *Array) *Array { return binaryOp(OpMaximum, "Maximum", a, b) }

// Minimum is the elementwise min (NaN propagates).
func Minimum(a, b *Array) *Array { return binaryOp(OpMinimum, "Minimum", a, b) }

// Remainder is a mod b with the divisor's sign.
func Remainder(a, b *Array) *Array { return binaryOp(OpRemainder, "Remainder", a, b) }

// FloorDivide is ⌊a/b⌋.
func FloorDivide(a, b *Array) *Array { return binaryOp(OpFloorDivide, "FloorDivide", a, b) }

// Equal is a == b.
func Equal(a, b *Array) *Array { return binaryOp(OpEqual, "Equal", a, b) }

// NotEqual is a != b.
func NotEqual(a, b *Array) *Array { return binaryOp(OpNotEqual, "NotEqual", a, b) }

// Less is a < b.
func Less(a, b *Array) *Array { return binaryOp(OpLess, "Less", a, b) }

// LessEqual is a <= b.
func LessEqual(a, b *Array) *Array { return binaryOp(OpLessEqual, "LessEqual", a, b) }

// Greater is a > b.
func Greater(a, b *Array) *Array { return binaryOp(OpGreater, "Greater", a, b) }

// GreaterEqual is a >= b.
func GreaterEqual(a, b *Array) *Array { return binaryOp(OpGreaterEqual, "GreaterEqual", a, b) }

// LogicalAnd is a && b.
func LogicalAnd(a, b *Array) *Array { return binaryOp(OpLogicalAnd, "LogicalAnd", a, b) }

// LogicalOr is a || b.
func LogicalOr(a, b *Array) *Array { return binaryOp(OpLogicalOr, "LogicalOr", a, b) }

// BitwiseAnd is a & b (integers).
func BitwiseAnd(a, b *Array) *Array { return binaryOp(OpBitwiseAnd, "BitwiseAnd", a, b) }

// BitwiseOr is a | b (integers).
func BitwiseOr(a, b *Array) *Array { return binaryOp(OpBitwiseOr, "BitwiseOr", a, b) }

// BitwiseXor is a ^ b (integers).
func BitwiseXor(a, b *Array) *Array { return binaryOp(OpBitwiseXor, "BitwiseXor", a, b) }

// LeftShift is a << b (integers).
func LeftShift(a, b *Array) *Array { return binaryOp(OpLeftShift, "LeftShift", a, b) }

// RightShift is a >> b (integers).
func RightShift(a, b *Array) *Array { return binaryOp(OpRightShift, "RightShift", a, b) }

// AddScalar is a+v.
func AddScalar(a *Array, v float64) *Array { return scalarOp(OpAdd, "AddScalar", a, v, false) }

// SubScalar is a-v.
func SubScalar(a *Array, v float64) *Array { return scalarOp(OpSub, "SubScalar", a, v, false) }

// MulScalar is a·v.
func MulScalar(a *Array, v float64) *Array { return scalarOp(OpMul, "MulScalar", a, v, false) }

// DivScalar is a/v.
func DivScalar(a *Array, v float64) *Array { return scalarOp(OpDiv, "DivScalar", a, v, false) }

// PowScalar is aᵛ.
func PowScalar(a *Array, v float64) *Array { return scalarOp(OpPow, "PowScalar", a, v, false) }

// MaximumScalar is max(a, v).
func MaximumScalar(a *Array, v float64) *Array {
	return scalarOp(OpMaximum, "MaximumScalar", a, v, false)
}

// MinimumScalar is min(a, v).
func MinimumScalar(a *Array, v float64) *Array {
	return scalarOp(OpMinimum, "MinimumScalar", a, v, false)
}

// Where selects a where cond is true, else b, with broadcasting.
func Where(cond, a, b *Array) *Array {
	be := sameBackend("Where", cond, a, b)
	shape, ok := BroadcastShapes(cond.shape, a.shape, b.shape)
	if !ok {
		throw("Where", ErrShape, "cannot broadcast %v, %v and %v", cond.shape, a.shape, b.shape)
	}
	dt := PromoteTypes(a.dtype, b.dtype)
	c, x, y := cond, a, b
	if c.dtype != Bool {
		c = AsType(cond, Bool)
		defer c.Free()
	}
	if x.dtype != dt {
		x = AsType(a, dt)
		defer x.Free()
	}
	if y.dtype != dt {
		y = AsType(b, dt)
		defer y.Free()
	}
	return be.Where(c, x, y, shape)
}

// WhereScalar selects a where cond, else the scalar v (in a's dtype).
func WhereScalar(cond, a *Array, v float64) *Array {
	s := scalarLike(a, v)
	defer s.Free()
	return Where(cond, a, s)
}

// AsType converts a to dt. Converting to the same dtype returns a copy-free
// new handle (on the CPU backend a view of the same storage).
func AsType(a *Array, dt DType) *Array {
	a.check()
	checkDType("AsType", dt)
	return a.be.AsType(a, dt)
}

// ---- reductions ----

func normAxes(op string, axes []int, ndim int) []int {
	if axes == nil {
		out := make([]int, ndim)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, len(axes))
	for i, ax := range axes {
		out[i] = normAxis(ax, ndim, op)
	}
	sort.Ints(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			throw(op, ErrArgument, "repeated axis %d", out[i])
		}
	}
	return out
}

func reduce(op ReduceOp, name string, a *Array, axes []int, keep bool) *Array {
	a.check()
	ax := normAxes(name, axes, a.NDim())
	if (op == ReduceMax || op == ReduceMin) && a.Size() > 0 {
		for _, i := range ax {
			if a.shape[i] == 0 {
				throw(name, ErrArgument, "%s of an empty axis", name)
			}
		}
	}
	in := a
	if (op == ReduceLogSumExp) && !a.dtype.IsFloat() {
		in = AsType(a, Float32)
		defer in.Free()
	}
	return a.be.Reduce(op, in, ax, keep)
}

// Sum adds over axes (nil = all). As in MLX, bool sums give int32 and uint8 sums
// uint32; other dtypes keep theirs.
func Sum(a *Array, axes []int, keepDims bool) *Array {
	return reduce(ReduceSum, "Sum", a, axes, keepDims)
}

// Mean averages over axes (nil = all).
func Mean(a *Array, axes []int, keepDims bool) *Array {
	return reduce(ReduceMean, "Mean", a, axes, keepDims)
}

// Prod multiplies over axes (nil = all).
func Prod(a *Array, axes []int, keepDims bool) *Array {
	return reduce(ReduceProd, "Prod", a, axes, keepDims)
}

// Max is the maximum over axes (nil = all).
func Max(a *Array, axes []int, keepDims bool) *Array {
	return reduce(ReduceMax, "Max", a, axes, keepDims)
}

// Min is the minimum over axes (nil = all).
func Min(a *Array, axes []int, keepDims bool) *Array {
	return reduce(ReduceMin, "Min", a, axes, keepDims)
}

// Any is true where any element over axes is non-zero.
func Any(a *Array, axes []int, keepDims bool) *Array {
	return reduce(ReduceAny, "Any", a, axes, keepDims)
}

// All is true where every element over axes is non-zero.
func All(a *Array, axes []int, keepDims bool) *Array {
	return reduce(ReduceAll, "All", a, axes, keepDims)
}

// LogSumExp is log(Σ eᵃ) over axes, computed stably.
func LogSumExp(a *Array, axes []int, keepDims bool) *Array {
	return reduce(ReduceLogSumExp, "LogSumExp", a, axes, keepDims)
}

func argReduce(op ArgReduceOp, name string, a *Array, axis int, keep bool) *Array {
	a.check()
	ax := normAxis(axis, a.NDim(), name)
	if a.shape[ax] == 0 {
		throw(name, ErrArgument, "%s of an empty axis", name)
	}
	return a.be.ArgReduce(op, a, ax, keep)
}

// Argmax returns int32 indices of the maximum along axis (first on ties).
func Argmax(a *Array, axis int, keepDims bool) *Array {
	return argReduce(ArgMax, "Argmax", a, axis, keepDims)
}

// Argmin returns int32 indices of the minimum along axis (first on ties).
func Argmin(a *Array, axis int, keepDims bool) *Array {
	return argReduce(ArgMin, "Argmin", a, axis, keepDims)
}

// Softmax along axis, accumulated in float32 ("precise"), in a's dtype.
func Softmax(a *Array, axis int) *Array {
	a.check()
	in := a
	if !a.dtype.IsFloat() {
		in = AsType(a, Float32)
		defer in.Free()
	}
	return a.be.Softmax(in, normAxis(axis, a.NDim(), "Softmax"))
}

// LogSoftmax is a - logsumexp(a) along axis.
func LogSoftmax(a *Array, axis int) *Array {
	lse := LogSumExp(a, []int{axis}, true)
	defer lse.Free()
	return Sub(a, lse)
}

// Cumsum is the running sum along axis.
func Cumsum(a *Array, axis int, reverse, inclusive bool) *Array {
	a.check()
	return a.be.Cumsum(a, normAxis(axis, a.NDim(), "Cumsum"), reverse, inclusive)
}

// Sort sorts ascending along axis.
func Sort(a *Array, axis int) *Array {
	a.check()
	return a.be.Sort(a, normAxis(axis, a.NDim(), "Sort"))
}

// Argsort returns int32 indices that sort a ascending along axis (stable).
func Argsort(a *Array, axis int) *Array {
	a.check()
	return a.be.Argsort(a, normAxis(axis, a.NDim(), "Argsort"))
}

// Argpartition returns int32 indices partitioning a around its kth element
// along axis (negative kth counts from the end).
func Argpartition(a *Array, kth, axis int) *Array {
	a.check()
	ax := normAxis(axis, a.NDim(), "Argpartition")
	n := a.shape[ax]
	if kth < 0 {
		kth += n
	}
	if kth < 0 || kth >= n {
		throw("Argpartition", ErrArgument, "kth %d out of range for axis of %d", kth, n)
	}
	return a.be.Argpartition(a, kth, ax)
}

// TopK returns the k largest values along axis, largest first, and their
// int32 indices (ties keep the lower index first).
func TopK(a *Array, k, axis int) (values, indices *Array) {
	a.check()
	ax := normAxis(axis, a.NDim(), "TopK")
	n := a.shape[ax]
	if k < 0 || k > n {
		throw("TopK", ErrArgument, "k=%d for axis of %d", k, n)
	}
	s := NewScope()
	defer s.Close()
	neg := Neg(a)
	order := Argsort(neg, ax)
	start := make([]int, a.NDim())
	stop := slices.Clone(a.shape)
	stop[ax] = k
	indices = Slice(order, start, stop, nil)
	idx := Contiguous(indices)
	values = TakeAlongAxis(a, idx, ax)
	s.Keep(idx, values)
	return values, idx
}

// ---- matmul ----

// Matmul is the matrix product over the last two dims with NumPy batch
// broadcasting; 1-D operands are promoted as in NumPy and the added dim removed.
func Matmul(a, b *Array) *Array {
	be := sameBackend("Matmul", a, b)
	if a.NDim() == 0 || b.NDim() == 0 {
		throw("Matmul", ErrShape, "scalar operand %v @ %v", a.shape, b.shape)
	}
	x, y := a, b
	squeezeA, squeezeB := false, false
	if x.NDim() == 1 {
		x = ExpandDims(a, 0)
		defer x.Free()
		squeezeA = true
	}
	if y.NDim() == 1 {
		y = ExpandDims(b, 1)
		defer y.Free()
		squeezeB = true
	}
	m, k := x.shape[x.NDim()-2], x.shape[x.NDim()-1]
	k2, n := y.shape[y.NDim()-2], y.shape[y.NDim()-1]
	if k != k2 {
		throw("Matmul", ErrShape, "%v @ %v: inner dims %d and %d differ", a.shape, b.shape, k, k2)
	}
	batch, ok := BroadcastShapes(x.shape[:x.NDim()-2], y.shape[:y.NDim()-2])
	if !ok {
		throw("Matmul", ErrShape, "batch dims of %v and %v do not broadcast", a.shape, b.shape)
	}
	dt := PromoteTypes(x.dtype, y.dtype)
	if !dt.IsFloat() {
		throw("Matmul", ErrDType, "integer matmul (%s)", dt)
	}
	if x.dtype != dt {
		x = AsType(x, dt)
		defer x.Free()
	}
	if y.dtype != dt {
		y = AsType(y, dt)
		defer y.Free()
	}
	shape := append(slices.Clone(batch), m, n)
	out := be.Matmul(x, y, shape)
	if squeezeA || squeezeB {
		final := slices.Clone(batch)
		if !squeezeA {
			final = append(final, m)
		}
		if !squeezeB {
			final = append(final, n)
		}
		r := Reshape(out, final...)
		out.Free()
		return r
	}
	return out
}
