package cpu

import "github.com/mlxgo/mlxgo/tensor"

// TODO(matmul/quant helper): replace these stubs with real kernels and delete this file.

// Matmul is not implemented yet.
func (be *Backend) Matmul(a, b *tensor.Array, shape []int) *tensor.Array {
	notYet("Matmul")
	return nil
}

// Quantize is not implemented yet.
func (be *Backend) Quantize(w *tensor.Array, groupSize, bits int) (wq, scales, biases *tensor.Array) {
	notYet("Quantize")
	return
}

// Dequantize is not implemented yet.
func (be *Backend) Dequantize(wq, scales, biases *tensor.Array, groupSize, bits int, dt tensor.DType) *tensor.Array {
	notYet("Dequantize")
	return nil
}

// QuantizedMatmul is not implemented yet.
func (be *Backend) QuantizedMatmul(x, wq, scales, biases *tensor.Array, transpose bool, groupSize, bits int, shape []int) *tensor.Array {
	notYet("QuantizedMatmul")
	return nil
}

// GatherQMM is not implemented yet.
func (be *Backend) GatherQMM(x, wq, scales, biases, lhsIndices, rhsIndices *tensor.Array, transpose bool, groupSize, bits int, shape []int) *tensor.Array {
	notYet("GatherQMM")
	return nil
}
