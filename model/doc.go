// Package model loads model configurations and weights (Hugging Face and MLX-quantized) and implements the supported architectures.
//
// Llama 3, Qwen3, Qwen3-MoE and Gemma 4 have their own files; the
// Llama-shaped families Mistral, Ministral, Qwen2, Phi-3, SmolLM3,
// OLMo 2, Granite, Starcoder2, Gemma, Gemma 3, GLM-4 and GLM-4.5 (MoE) run on one
// descriptor-driven implementation (generic.go), which refuses a
// checkpoint holding a tensor it does not read. A model_type no file
// registers is refused at load, naming it and listing those that are.
// Qwen3.5 and Qwen3-Next (qwen35.go) mix gated DeltaNet linear attention,
// whose layers keep a kv.RecurrentCache, with gated full attention.
// DeepSeek-V3 and GLM-5 (mla.go) attend through a compressed latent cache
// (kv_lora_rank + qk_rope_head_dim values per token) with the key and
// value projections absorbed; GLM-5 adds DSA's top-k indexer.
//
// Memory follows one rule: a function that makes temporary arrays makes
// them inside a tensor.Scope (scoped, or NewScope/Close) and keeps only
// what it returns, so nothing is freed by hand on a forward path; arrays
// that outlive a call (weights, rope tables) are owned by the Weights
// that loaded them (Weights.Own) and freed by Close. Scopes are per
// goroutine (package tensor), so forward passes on different goroutines
// do not adopt each other's arrays.
package model
