package cpu

import "github.com/mlxgo/mlxgo/tensor"

// TODO(elementwise helper): replace these stubs with real kernels and delete this file.

func notYet(op string) { panic(&tensor.Error{Op: op, Err: tensor.ErrBackend}) }

// Unary is not implemented yet.
func (be *Backend) Unary(op tensor.UnaryOp, a *tensor.Array) *tensor.Array {
	notYet("Unary")
	return nil
}

// Binary is not implemented yet.
func (be *Backend) Binary(op tensor.BinaryOp, a, b *tensor.Array, shape []int) *tensor.Array {
	notYet("Binary")
	return nil
}

// Where is not implemented yet.
func (be *Backend) Where(cond, a, b *tensor.Array, shape []int) *tensor.Array {
	notYet("Where")
	return nil
}

// AsType is not implemented yet.
func (be *Backend) AsType(a *tensor.Array, dt tensor.DType) *tensor.Array {
	notYet("AsType")
	return nil
}

// Reduce is not implemented yet.
func (be *Backend) Reduce(op tensor.ReduceOp, a *tensor.Array, axes []int, keepDims bool) *tensor.Array {
	notYet("Reduce")
	return nil
}

// ArgReduce is not implemented yet.
func (be *Backend) ArgReduce(op tensor.ArgReduceOp, a *tensor.Array, axis int, keepDims bool) *tensor.Array {
	notYet("ArgReduce")
	return nil
}

// Softmax is not implemented yet.
func (be *Backend) Softmax(a *tensor.Array, axis int) *tensor.Array { notYet("Softmax"); return nil }

// Cumsum is not implemented yet.
func (be *Backend) Cumsum(a *tensor.Array, axis int, reverse, inclusive bool) *tensor.Array {
	notYet("Cumsum")
	return nil
}

// Sort is not implemented yet.
func (be *Backend) Sort(a *tensor.Array, axis int) *tensor.Array { notYet("Sort"); return nil }

// Argsort is not implemented yet.
func (be *Backend) Argsort(a *tensor.Array, axis int) *tensor.Array { notYet("Argsort"); return nil }

// Argpartition is not implemented yet.
func (be *Backend) Argpartition(a *tensor.Array, kth, axis int) *tensor.Array {
	notYet("Argpartition")
	return nil
}
