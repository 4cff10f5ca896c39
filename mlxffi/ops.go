package mlxffi

import (
	"math"
	"runtime"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

var unaryFns = map[tensor.UnaryOp]*fnUnary{
	tensor.OpNeg:        &mlx_negative,
	tensor.OpAbs:        &mlx_abs,
	tensor.OpSign:       &mlx_sign,
	tensor.OpSquare:     &mlx_square,
	tensor.OpSqrt:       &mlx_sqrt,
	tensor.OpRsqrt:      &mlx_rsqrt,
	tensor.OpReciprocal: &mlx_reciprocal,
	tensor.OpExp:        &mlx_exp,
	tensor.OpLog:        &mlx_log,
	tensor.OpLog1p:      &mlx_log1p,
	tensor.OpSin:        &mlx_sin,
	tensor.OpCos:        &mlx_cos,
	tensor.OpTanh:       &mlx_tanh,
	tensor.OpSigmoid:    &mlx_sigmoid,
	tensor.OpErf:        &mlx_erf,
	tensor.OpFloor:      &mlx_floor,
	tensor.OpCeil:       &mlx_ceil,
	tensor.OpLogicalNot: &mlx_logical_not,
	tensor.OpIsNaN:      &mlx_isnan,
	tensor.OpIsInf:      &mlx_isinf,
}

// Unary maps each op to its MLX primitive; the composite ones (Softplus,
// the GELUs, SiLU) are built in float32 and rounded once at the end, so
// 16-bit inputs see one rounding as the tensor API specifies.
func (be *Backend) Unary(op tensor.UnaryOp, a *tensor.Array) *tensor.Array {
	return be.do1("Unary", func(c *cx) uintptr {
		x := hOf(a)
		if f, ok := unaryFns[op]; ok {
			return c.un(*f, x)
		}
		if op == tensor.OpRound {
			var r uintptr
			ck(mlx_round(&r, x, 0, c.s))
			return c.t(r)
		}
		m := mlx_array_dtype(x)
		xf := c.astype(x, mFloat32)
		var y uintptr
		switch op {
		case tensor.OpSoftplus: // log(1+e^x) = logaddexp(x, 0), stable both ways
			y = c.bin(mlx_logaddexp, xf, c.fscalar(0))
		case tensor.OpSilu:
			y = c.bin(mlx_multiply, xf, c.un(mlx_sigmoid, xf))
		case tensor.OpGelu:
			e := c.un(mlx_erf, c.bin(mlx_multiply, xf, c.fscalar(float32(1/math.Sqrt2))))
			y = c.bin(mlx_multiply, c.bin(mlx_multiply, xf, c.fscalar(0.5)), c.bin(mlx_add, e, c.fscalar(1)))
		case tensor.OpGeluTanh:
			x3 := c.bin(mlx_multiply, c.un(mlx_square, xf), xf)
			inner := c.bin(mlx_add, xf, c.bin(mlx_multiply, x3, c.fscalar(0.044715)))
			t := c.un(mlx_tanh, c.bin(mlx_multiply, inner, c.fscalar(float32(math.Sqrt(2/math.Pi)))))
			y = c.bin(mlx_multiply, c.bin(mlx_multiply, xf, c.fscalar(0.5)), c.bin(mlx_add, t, c.fscalar(1)))
		default:
			panic(&Error{Msg: "unknown unary op"})
		}
		return c.astype(y, m)
	})
}

var binaryFns = map[tensor.BinaryOp]*fnBinary{
	tensor.OpAdd:          &mlx_add,
	tensor.OpSub:          &mlx_subtract,
	tensor.OpMul:          &mlx_multiply,
	tensor.OpDiv:          &mlx_divide,
	tensor.OpPow:          &mlx_power,
	tensor.OpMaximum:      &mlx_maximum,
	tensor.OpMinimum:      &mlx_minimum,
	tensor.OpRemainder:    &mlx_remainder,
	tensor.OpFloorDivide:  &mlx_floor_divide,
	tensor.OpEqual:        &mlx_equal,
	tensor.OpNotEqual:     &mlx_not_equal,
	tensor.OpLess:         &mlx_less,
	tensor.OpLessEqual:    &mlx_less_equal,
	tensor.OpGreater:      &mlx_greater,
	tensor.OpGreaterEqual: &mlx_greater_equal,
	tensor.OpLogicalAnd:   &mlx_logical_and,
	tensor.OpLogicalOr:    &mlx_logical_or,
	tensor.OpBitwiseAnd:   &mlx_bitwise_and,
	tensor.OpBitwiseOr:    &mlx_bitwise_or,
	tensor.OpBitwiseXor:   &mlx_bitwise_xor,
	tensor.OpLeftShift:    &mlx_left_shift,
	tensor.OpRightShift:   &mlx_right_shift,
}

// Binary applies an MLX elementwise op; MLX broadcasts to the same shape
// the tensor API computed.
func (be *Backend) Binary(op tensor.BinaryOp, a, b *tensor.Array, shape []int) *tensor.Array {
	return be.do1("Binary", func(c *cx) uintptr {
		f, ok := binaryFns[op]
		if !ok {
			panic(&Error{Msg: "unknown binary op"})
		}
		x, y := hOf(a), hOf(b)
		if op == tensor.OpRemainder || op == tensor.OpFloorDivide {
			switch m := mlx_array_dtype(x); m {
			case mFloat16, mBFloat16:
				// MLX skips the divisor-sign fix-up for 16-bit floats
				return c.astype(c.bin(*f, c.astype(x, mFloat32), c.astype(y, mFloat32)), m)
			case mInt32, mInt64:
				if op == tensor.OpFloorDivide {
					// MLX truncates; (a - a mod b) / b is exact, so
					// truncating it is flooring
					r := c.bin(mlx_remainder, x, y)
					return c.bin(mlx_floor_divide, c.bin(mlx_subtract, x, r), y)
				}
			}
		}
		return c.bin(*f, x, y)
	})
}

// Where is mlx_where.
func (be *Backend) Where(cond, a, b *tensor.Array, shape []int) *tensor.Array {
	return be.do1("Where", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_where(&r, hOf(cond), hOf(a), hOf(b), c.s))
		return c.t(r)
	})
}

// AsType is mlx_astype (a static_cast per element: C semantics). The same
// dtype gives a new handle to the same MLX array.
func (be *Backend) AsType(a *tensor.Array, dt tensor.DType) *tensor.Array {
	return be.do1("AsType", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_astype(&r, hOf(a), toMLX(dt), c.s))
		return c.t(r)
	})
}

var reduceFns = map[tensor.ReduceOp]*fnAxes{
	tensor.ReduceSum:       &mlx_sum_axes,
	tensor.ReduceMean:      &mlx_mean_axes,
	tensor.ReduceProd:      &mlx_prod_axes,
	tensor.ReduceMax:       &mlx_max_axes,
	tensor.ReduceMin:       &mlx_min_axes,
	tensor.ReduceAny:       &mlx_any_axes,
	tensor.ReduceAll:       &mlx_all_axes,
	tensor.ReduceLogSumExp: &mlx_logsumexp_axes,
}

// Reduce is MLX's reduction over axes (MLX picks the result dtype: sums of
// small integers widen to int32/uint32, means of integers are float32).
func (be *Backend) Reduce(op tensor.ReduceOp, a *tensor.Array, axes []int, keepDims bool) *tensor.Array {
	if a.Size() == 0 {
		if z := be.emptyReduce(op, a, axes, keepDims); z != nil {
			return z
		}
	}
	return be.do1("Reduce", func(c *cx) uintptr {
		x := hOf(a)
		switch op {
		case tensor.ReduceSum, tensor.ReduceMean, tensor.ReduceProd, tensor.ReduceLogSumExp:
			if m := mlx_array_dtype(x); m == mFloat16 || m == mBFloat16 {
				// accumulate in float32, round once
				return c.astype(c.reduce(op, c.astype(x, mFloat32), a.Shape(), axes, keepDims), m)
			}
		}
		return c.reduce(op, x, a.Shape(), axes, keepDims)
	})
}

// pairwiseMin is the reduced length from which float sums are done in two
// stages: MLX's CPU reduction accumulates serially, whose error grows with
// the length, while summing blocks and then the block sums keeps it small.
const (
	pairwiseMin   = 1 << 13
	pairwiseBlock = 1 << 10
)

func (c *cx) reduce(op tensor.ReduceOp, x uintptr, shape, axes []int, keep bool) uintptr {
	n := 1
	for _, ax := range axes {
		n *= shape[ax]
	}
	if (op == tensor.ReduceSum || op == tensor.ReduceMean) && n >= pairwiseMin && mlx_array_dtype(x) == mFloat32 {
		return c.pairwiseSum(op, x, shape, axes, keep, n)
	}
	ax := ints32(axes)
	var r uintptr
	ck((*reduceFns[op])(&r, x, first(ax), uint64(len(ax)), keep, c.s))
	return c.t(r)
}

// pairwiseSum sums (or averages) float32 x over axes in two stages: the
// reduced axes are moved last and flattened to n values, which are summed
// in blocks whose sums are then summed, plus the ragged tail.
func (c *cx) pairwiseSum(op tensor.ReduceOp, x uintptr, shape, axes []int, keep bool, n int) uintptr {
	reduced := make([]bool, len(shape))
	for _, ax := range axes {
		reduced[ax] = true
	}
	var perm, kept, keptKeep []int
	for i, d := range shape {
		if !reduced[i] {
			perm = append(perm, i)
			kept = append(kept, d)
			keptKeep = append(keptKeep, d)
		} else {
			keptKeep = append(keptKeep, 1)
		}
	}
	perm = append(perm, axes...)
	p := ints32(perm)
	var t uintptr
	ck(mlx_transpose_axes(&t, x, first(p), uint64(len(p)), c.s))
	c.t(t)
	flat := c.reshape(t, append(append([]int{}, kept...), n))
	last := []int32{-1}
	sumLast := func(h uintptr) uintptr {
		var r uintptr
		ck(mlx_sum_axes(&r, h, &last[0], 1, false, c.s))
		return c.t(r)
	}
	q := n / pairwiseBlock
	nd := len(kept)
	start := make([]int, nd+1)
	stop := append(append([]int{}, kept...), q*pairwiseBlock)
	step := make([]int, nd+1)
	for i := range step {
		step[i] = 1
	}
	head := c.slice(flat, start, stop, step)
	blocks := c.reshape(head, append(append([]int{}, kept...), q, pairwiseBlock))
	total := sumLast(sumLast(blocks))
	if q*pairwiseBlock < n {
		start[nd], stop[nd] = q*pairwiseBlock, n
		total = c.bin(mlx_add, total, sumLast(c.slice(flat, start, stop, step)))
	}
	if op == tensor.ReduceMean {
		total = c.bin(mlx_divide, total, c.fscalar(float32(n)))
	}
	if keep {
		total = c.reshape(total, keptKeep)
	}
	return total
}

func (c *cx) reshape(h uintptr, shape []int) uintptr {
	sh := ints32(shape)
	var r uintptr
	ck(mlx_reshape(&r, h, first(sh), uint64(len(sh)), c.s))
	return c.t(r)
}

func (c *cx) slice(h uintptr, start, stop, step []int) uintptr {
	s0, s1, st := ints32(start), ints32(stop), ints32(step)
	n := uint64(len(s0))
	var r uintptr
	ck(mlx_slice(&r, h, first(s0), n, first(s1), n, first(st), n, c.s))
	return c.t(r)
}

// reducedShape is a's shape after reducing axes.
func reducedShape(shape, axes []int, keep bool) []int {
	var out []int
	for i, d := range shape {
		if slices.Contains(axes, i) {
			if keep {
				out = append(out, 1)
			}
			continue
		}
		out = append(out, d)
	}
	return out
}

// emptyReduce answers the reductions of an empty array that MLX refuses
// (max, min and logsumexp of zero-size arrays); nil means MLX can do it.
func (be *Backend) emptyReduce(op tensor.ReduceOp, a *tensor.Array, axes []int, keep bool) *tensor.Array {
	shape := reducedShape(a.Shape(), axes, keep)
	switch op {
	case tensor.ReduceMax, tensor.ReduceMin: // the API lets only empty results through
		return be.Full(shape, 0, a.DType())
	case tensor.ReduceLogSumExp:
		return be.Full(shape, math.Inf(-1), a.DType())
	}
	return nil
}

// ArgReduce returns int32 indices (MLX's are uint32).
func (be *Backend) ArgReduce(op tensor.ArgReduceOp, a *tensor.Array, axis int, keepDims bool) *tensor.Array {
	if a.Size() == 0 { // only an empty result can get here
		return be.Full(reducedShape(a.Shape(), []int{axis}, keepDims), 0, tensor.Int32)
	}
	return be.do1("ArgReduce", func(c *cx) uintptr {
		f := mlx_argmax_axis
		if op == tensor.ArgMin {
			f = mlx_argmin_axis
		}
		var r uintptr
		ck(f(&r, hOf(a), int32(axis), keepDims, c.s))
		return c.astype(c.t(r), mInt32)
	})
}

// Softmax is MLX's precise softmax (float32 accumulation).
func (be *Backend) Softmax(a *tensor.Array, axis int) *tensor.Array {
	return be.do1("Softmax", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_softmax_axis(&r, hOf(a), int32(axis), true, c.s))
		return c.t(r)
	})
}

// Cumsum is mlx_cumsum.
func (be *Backend) Cumsum(a *tensor.Array, axis int, reverse, inclusive bool) *tensor.Array {
	if a.Size() == 0 { // MLX's CPU scan divides by the axis length
		return be.Contiguous(a)
	}
	return be.do1("Cumsum", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_cumsum(&r, hOf(a), int32(axis), reverse, inclusive, c.s))
		return c.t(r)
	})
}

// Sort is mlx_sort (NaN-aware: NaNs sort last).
func (be *Backend) Sort(a *tensor.Array, axis int) *tensor.Array {
	if a.Size() == 0 { // MLX's CPU sort divides by the axis length
		return be.Contiguous(a)
	}
	return be.do1("Sort", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_sort_axis(&r, hOf(a), int32(axis), c.s))
		return c.t(r)
	})
}

// Argsort is MLX's stable argsort, as int32.
func (be *Backend) Argsort(a *tensor.Array, axis int) *tensor.Array {
	if a.Size() == 0 {
		return be.Full(a.Shape(), 0, tensor.Int32)
	}
	return be.do1("Argsort", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_argsort_axis(&r, hOf(a), int32(axis), c.s))
		return c.astype(c.t(r), mInt32)
	})
}

// Argpartition is mlx_argpartition, as int32.
func (be *Backend) Argpartition(a *tensor.Array, kth, axis int) *tensor.Array {
	if a.Size() == 0 {
		return be.Full(a.Shape(), 0, tensor.Int32)
	}
	return be.do1("Argpartition", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_argpartition_axis(&r, hOf(a), int32(kth), int32(axis), c.s))
		return c.astype(c.t(r), mInt32)
	})
}

// Matmul is mlx_matmul (which reads transposed views without copying).
func (be *Backend) Matmul(a, b *tensor.Array, shape []int) *tensor.Array {
	if z := be.zeroSized(shape, a.Shape()[a.NDim()-1], a.DType()); z != nil {
		return z
	}
	return be.do1("Matmul", func(c *cx) uintptr { return c.bin(mlx_matmul, hOf(a), hOf(b)) })
}

// zeroSized answers products MLX's CPU kernels cannot take (they divide
// by zero on empty operands): an empty result, or zeros when the inner
// dimension is empty. It returns nil when MLX can compute the product.
func (be *Backend) zeroSized(shape []int, inner int, dt tensor.DType) *tensor.Array {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n == 0 || inner == 0 {
		return be.Full(shape, 0, dt)
	}
	return nil
}

// Take is mlx_take along an axis.
func (be *Backend) Take(a, indices *tensor.Array, axis int) *tensor.Array {
	return be.do1("Take", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_take_axis(&r, hOf(a), hOf(indices), int32(axis), c.s))
		return c.t(r)
	})
}

// TakeAlongAxis is mlx_take_along_axis.
func (be *Backend) TakeAlongAxis(a, indices *tensor.Array, axis int) *tensor.Array {
	return be.do1("TakeAlongAxis", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_take_along_axis(&r, hOf(a), hOf(indices), int32(axis), c.s))
		return c.t(r)
	})
}

// PutAlongAxis is mlx_put_along_axis.
func (be *Backend) PutAlongAxis(a, indices, values *tensor.Array, axis int) *tensor.Array {
	return be.do1("PutAlongAxis", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_put_along_axis(&r, hOf(a), hOf(indices), hOf(values), int32(axis), c.s))
		return c.t(r)
	})
}

func (be *Backend) shapeOp(op string, f fnShape, a *tensor.Array, v []int) *tensor.Array {
	sh := ints32(v)
	return be.do1(op, func(c *cx) uintptr {
		var r uintptr
		ck(f(&r, hOf(a), first(sh), uint64(len(sh)), c.s))
		return c.t(r)
	})
}

// Reshape is mlx_reshape.
func (be *Backend) Reshape(a *tensor.Array, shape []int) *tensor.Array {
	return be.shapeOp("Reshape", mlx_reshape, a, shape)
}

// Transpose is mlx_transpose (a strided view in MLX).
func (be *Backend) Transpose(a *tensor.Array, perm []int) *tensor.Array {
	return be.shapeOp("Transpose", mlx_transpose_axes, a, perm)
}

// BroadcastTo is mlx_broadcast_to.
func (be *Backend) BroadcastTo(a *tensor.Array, shape []int) *tensor.Array {
	return be.shapeOp("BroadcastTo", mlx_broadcast_to, a, shape)
}

// Slice is mlx_slice with explicit strides.
func (be *Backend) Slice(a *tensor.Array, start, stop, step []int) *tensor.Array {
	s0, s1, st := ints32(start), ints32(stop), ints32(step)
	n := uint64(len(s0))
	return be.do1("Slice", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_slice(&r, hOf(a), first(s0), n, first(s1), n, first(st), n, c.s))
		return c.t(r)
	})
}

func (c *cx) sliceUpdate(a, u uintptr, start, stop, step []int) uintptr {
	s0, s1, st := ints32(start), ints32(stop), ints32(step)
	n := uint64(len(s0))
	var r uintptr
	ck(mlx_slice_update(&r, a, u, first(s0), n, first(s1), n, first(st), n, c.s))
	return c.t(r)
}

// SliceUpdate is mlx_slice_update.
func (be *Backend) SliceUpdate(a, update *tensor.Array, start, stop, step []int) *tensor.Array {
	return be.do1("SliceUpdate", func(c *cx) uintptr {
		return c.sliceUpdate(hOf(a), hOf(update), start, stop, step)
	})
}

// SliceAssign builds the updated array with mlx_slice_update and puts it
// in dst's place (the old handle is freed); arrays that shared dst's
// storage keep the graph node they had, so they keep the old values.
func (be *Backend) SliceAssign(dst, update *tensor.Array, start, stop, step []int) {
	be.run("SliceAssign", func(c *cx) {
		old := hOf(dst)
		r := c.keep(c.sliceUpdate(old, hOf(update), start, stop, step))
		dst.SetImpl(&handle{h: r})
		mlx_array_free(old)
	})
}

// Concatenate is mlx_concatenate.
func (be *Backend) Concatenate(arrs []*tensor.Array, axis int, shape []int) *tensor.Array {
	hs := make([]uintptr, len(arrs))
	for i, a := range arrs {
		hs[i] = hOf(a)
	}
	return be.do1("Concatenate", func(c *cx) uintptr {
		vec := ckHandle(mlx_vector_array_new_data(&hs[0], uint64(len(hs))))
		defer mlx_vector_array_free(vec)
		var r uintptr
		ck(mlx_concatenate_axis(&r, vec, int32(axis), c.s))
		return c.t(r)
	})
}

// Contiguous is mlx_contiguous (row-major only).
func (be *Backend) Contiguous(a *tensor.Array) *tensor.Array {
	return be.do1("Contiguous", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_contiguous(&r, hOf(a), false, c.s))
		return c.t(r)
	})
}

// RMSNorm is mlx_fast_rms_norm.
func (be *Backend) RMSNorm(x, w *tensor.Array, eps float32) *tensor.Array {
	return be.do1("RMSNorm", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_fast_rms_norm(&r, hOf(x), hOf(w), eps, c.s))
		return c.t(r)
	})
}

// LayerNorm is mlx_fast_layer_norm.
func (be *Backend) LayerNorm(x, w, b *tensor.Array, eps float32) *tensor.Array {
	return be.do1("LayerNorm", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_fast_layer_norm(&r, hOf(x), hOf(w), hOf(b), eps, c.s))
		return c.t(r)
	})
}

// RoPE is mlx_fast_rope, or mlx_fast_rope_dynamic with per-batch offsets.
func (be *Backend) RoPE(x *tensor.Array, o tensor.RoPEOptions) *tensor.Array {
	return be.do1("RoPE", func(c *cx) uintptr {
		base := optionalFloat{Value: o.Base, HasValue: o.Freqs == nil}
		scale := o.Scale
		if scale == 0 {
			scale = 1
		}
		var r uintptr
		if o.OffsetArr != nil {
			off := c.astype(hOf(o.OffsetArr), mInt32)
			ck(mlx_fast_rope_dynamic(&r, hOf(x), int32(o.Dims), o.Traditional, base, scale, off, hOf(o.Freqs), c.s))
		} else {
			ck(mlx_fast_rope(&r, hOf(x), int32(o.Dims), o.Traditional, base, scale, int32(o.Offset), hOf(o.Freqs), c.s))
		}
		return c.t(r)
	})
}

// SDPA is mlx_fast_scaled_dot_product_attention. Where the tensor API's
// semantics differ from MLX's, the result is fixed up: rows with no
// visible key (fully masked, or causal rows before the first key) give
// zeros rather than NaN or a uniform average; and where MLX would run its
// unfused fallback (always on the CPU device), half-precision inputs are
// widened to float32 first and the result rounded back, because that
// fallback computes and softmaxes the scores in the input dtype while the
// tensor API asks for float32 scores (its fused kernels do that
// internally). Without this, bfloat16 attention on MLX's CPU differs from
// the CPU backend by a bfloat16 step in about half the outputs, enough to
// flip a near-tied MoE routing decision in the tiny parity fixtures.
func (be *Backend) SDPA(q, k, v *tensor.Array, o tensor.SDPAOptions) *tensor.Array {
	qs, ks := q.Shape(), k.Shape()
	tq, tk := qs[2], ks[2]
	widen := q.DType() != tensor.Float32 && be.sdpaFallback(qs, ks, v.Shape(), o.MaskKind)
	return be.do1("SDPA", func(c *cx) uintptr {
		qh, kh, vh, sinks := hOf(q), hOf(k), hOf(v), hOf(o.Sinks)
		outDT := mlx_array_dtype(qh)
		if widen {
			qh, kh, vh = c.astype(qh, mFloat32), c.astype(kh, mFloat32), c.astype(vh, mFloat32)
			if sinks != 0 {
				sinks = c.astype(sinks, mFloat32)
			}
		}
		mode := ""
		var mask, valid uintptr
		switch o.MaskKind {
		case tensor.MaskCausal:
			mode = "causal"
			if tq > tk { // the first tq-tk rows see no key
				valid = c.causalValid(tq, tk)
			}
		case tensor.MaskArray:
			mode = "array"
			mask = hOf(o.Mask)
			if mlx_array_dtype(mask) == mBool {
				valid = c.anyAxis(mask)
			} else {
				mask = c.astype(mask, mlx_array_dtype(qh))
				var fin uintptr
				ck(mlx_greater(&fin, mask, c.fscalar(float32(math.Inf(-1))), c.s))
				valid = c.anyAxis(c.t(fin))
			}
		}
		var r uintptr
		ck(mlx_fast_scaled_dot_product_attention(&r, qh, kh, vh, o.Scale, mode, mask, sinks, c.s))
		c.t(r)
		if widen {
			r = c.astype(r, outDT)
		}
		if valid == 0 {
			return r
		}
		zero := c.scalar(0, tensor.Float32)
		zero = c.astype(zero, mlx_array_dtype(r))
		var out uintptr
		ck(mlx_where(&out, valid, r, zero, c.s))
		return c.t(out)
	})
}

// sdpaFallback reports whether MLX 0.31 computes this attention with its
// unfused fallback (scores in the input dtype) rather than a fused kernel
// (scores in float32): always on the CPU device; on Metal unless the head
// dimensions and shapes fit its vector kernel (at most 8 queries) or its
// full kernel (more than 8). CUDA's kernels are taken as fused.
func (be *Backend) sdpaFallback(qs, ks, vs []int, mk tensor.MaskKind) bool {
	if be.device == CPU {
		return true
	}
	if runtime.GOOS != "darwin" {
		return false
	}
	hd, tq, tk := qs[3], qs[2], ks[2]
	if vs[3] != hd {
		return true
	}
	gqa := qs[1] / ks[1]
	if tq <= 8 {
		vector := hd == 64 || hd == 96 || hd == 128 || hd == 256
		return !(vector && tq <= tk && tq*gqa <= 32)
	}
	full := hd == 64 || hd == 80 || hd == 128
	maskOK := mk != tensor.MaskCausal || tq <= tk
	return !(full && maskOK)
}

// anyAxis reduces a keep-mask over the key axis: true where a row has at
// least one visible key (shape [..., Tq, 1], broadcasting against the output).
func (c *cx) anyAxis(m uintptr) uintptr {
	ax := []int32{-1}
	var r uintptr
	ck(mlx_any_axes(&r, m, &ax[0], 1, true, c.s))
	return c.t(r)
}

// causalValid is the [Tq, 1] mask of query rows that see a key when the
// queries are aligned to the end of the keys.
func (c *cx) causalValid(tq, tk int) uintptr {
	var r uintptr
	ck(mlx_arange(&r, 0, float64(tq), 1, mInt32, c.s))
	c.t(r)
	var ge uintptr
	ck(mlx_greater_equal(&ge, r, c.scalar(float64(tq-tk), tensor.Int32), c.s))
	c.t(ge)
	sh := []int32{int32(tq), 1}
	var out uintptr
	ck(mlx_reshape(&out, ge, &sh[0], 2, c.s))
	return c.t(out)
}

// Quantize is mlx_quantize in "affine" mode.
func (be *Backend) Quantize(w *tensor.Array, groupSize, bits int) (wq, scales, biases *tensor.Array) {
	be.run("Quantize", func(c *cx) {
		var vec uintptr
		ck(mlx_quantize(&vec, hOf(w), someInt(groupSize), someInt(bits), "affine", 0, c.s))
		defer mlx_vector_array_free(vec)
		if n := mlx_vector_array_size(vec); n != 3 {
			panic(&Error{Msg: "mlx_quantize returned an unexpected number of arrays"})
		}
		get := func(i uint64) uintptr {
			var r uintptr
			ck(mlx_vector_array_get(&r, vec, i))
			return c.t(r)
		}
		h0, h1, h2 := get(0), get(1), get(2)
		wq, scales, biases = c.wrap(h0), c.wrap(h1), c.wrap(h2)
	})
	return
}

// Dequantize is mlx_dequantize in "affine" mode, producing dt.
func (be *Backend) Dequantize(wq, scales, biases *tensor.Array, groupSize, bits int, dt tensor.DType) *tensor.Array {
	return be.do1("Dequantize", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_dequantize(&r, hOf(wq), hOf(scales), hOf(biases), someInt(groupSize), someInt(bits),
			"affine", 0, optionalDType{Value: toMLX(dt), HasValue: true}, c.s))
		return c.t(r)
	})
}

// QuantizedMatmul is mlx_quantized_matmul in "affine" mode.
func (be *Backend) QuantizedMatmul(x, wq, scales, biases *tensor.Array, transpose bool, groupSize, bits int, shape []int) *tensor.Array {
	if z := be.zeroSized(shape, x.Shape()[x.NDim()-1], x.DType()); z != nil {
		return z
	}
	return be.do1("QuantizedMatmul", func(c *cx) uintptr {
		xh, sh, bh, m := c.qmmInputs(hOf(x), hOf(scales), hOf(biases))
		var r uintptr
		ck(mlx_quantized_matmul(&r, xh, hOf(wq), sh, bh, transpose,
			someInt(groupSize), someInt(bits), "affine", c.s))
		return c.astype(c.t(r), m)
	})
}

// GatherQMM is mlx_gather_qmm in "affine" mode (indices not assumed sorted).
func (be *Backend) GatherQMM(x, wq, scales, biases, lhsIndices, rhsIndices *tensor.Array, transpose bool, groupSize, bits int, shape []int) *tensor.Array {
	if z := be.zeroSized(shape, x.Shape()[x.NDim()-1], x.DType()); z != nil {
		return z
	}
	return be.do1("GatherQMM", func(c *cx) uintptr {
		lhs, rhs := hOf(lhsIndices), hOf(rhsIndices)
		if lhs != 0 {
			lhs = c.astype(lhs, mUint32)
		}
		if rhs != 0 {
			rhs = c.astype(rhs, mUint32)
		}
		xh, sh, bh, m := c.qmmInputs(hOf(x), hOf(scales), hOf(biases))
		var r uintptr
		ck(mlx_gather_qmm(&r, xh, hOf(wq), sh, bh, lhs, rhs, transpose,
			someInt(groupSize), someInt(bits), "affine", false, c.s))
		return c.astype(c.t(r), m)
	})
}

// qmmInputs returns the operands of a quantized product and the dtype of
// its result. MLX's CPU kernels accumulate 16-bit products in 16 bits; the
// tensor API computes in float32, so on the CPU device 16-bit operands are
// widened first and the result narrowed once. (MLX's GPU kernels
// accumulate in float32 already and take the operands as they are.)
func (c *cx) qmmInputs(x, scales, biases uintptr) (xh, sh, bh uintptr, m int32) {
	m = mlx_array_dtype(x)
	if c.be.device != CPU || (m != mFloat16 && m != mBFloat16) {
		return x, scales, biases, m
	}
	return c.astype(x, mFloat32), c.astype(scales, mFloat32), c.astype(biases, mFloat32), m
}

// RandomBits is mlx_random_bits with 4-byte words.
func (be *Backend) RandomBits(key *tensor.Array, shape []int) *tensor.Array {
	sh := ints32(shape)
	return be.do1("RandomBits", func(c *cx) uintptr {
		var r uintptr
		ck(mlx_random_bits(&r, first(sh), uint64(len(sh)), 4, hOf(key), c.s))
		return c.t(r)
	})
}
