// Package model loads model configurations and weights (Hugging Face and MLX-quantized) and implements the supported architectures.
package model
