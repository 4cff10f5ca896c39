// Package model loads model configurations and weights (Hugging Face and MLX-quantized) and implements the supported architectures.
//
// Memory follows one rule: a function that makes temporary arrays makes
// them inside a tensor.Scope (scoped, or NewScope/Close) and keeps only
// what it returns, so nothing is freed by hand on a forward path; arrays
// that outlive a call (weights, rope tables) are owned by the Weights
// that loaded them (Weights.Own) and freed by Close. Scopes are per
// goroutine (package tensor), so forward passes on different goroutines
// do not adopt each other's arrays.
package model
