package cpu

import "github.com/mlxgo/mlxgo/tensor"

// TODO(indexing/fused helper): replace these stubs with real kernels and delete this file.

// Take is not implemented yet.
func (be *Backend) Take(a, indices *tensor.Array, axis int) *tensor.Array { notYet("Take"); return nil }

// TakeAlongAxis is not implemented yet.
func (be *Backend) TakeAlongAxis(a, indices *tensor.Array, axis int) *tensor.Array {
	notYet("TakeAlongAxis")
	return nil
}

// PutAlongAxis is not implemented yet.
func (be *Backend) PutAlongAxis(a, indices, values *tensor.Array, axis int) *tensor.Array {
	notYet("PutAlongAxis")
	return nil
}

// RMSNorm is not implemented yet.
func (be *Backend) RMSNorm(x, w *tensor.Array, eps float32) *tensor.Array {
	notYet("RMSNorm")
	return nil
}

// LayerNorm is not implemented yet.
func (be *Backend) LayerNorm(x, w, b *tensor.Array, eps float32) *tensor.Array {
	notYet("LayerNorm")
	return nil
}

// RoPE is not implemented yet.
func (be *Backend) RoPE(x *tensor.Array, o tensor.RoPEOptions) *tensor.Array {
	notYet("RoPE")
	return nil
}

// SDPA is not implemented yet.
func (be *Backend) SDPA(q, k, v *tensor.Array, o tensor.SDPAOptions) *tensor.Array {
	notYet("SDPA")
	return nil
}

// RandomBits is not implemented yet.
func (be *Backend) RandomBits(key *tensor.Array, shape []int) *tensor.Array {
	notYet("RandomBits")
	return nil
}
