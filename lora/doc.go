// Package lora mounts LoRA adapters on a loaded model and applies them
// unmerged: each adapted layer computes its base output and adds, for
// every adapter a pass selects, the low-rank residual scale·B·A·x (A [r, in], B [out, r]), in the
// order given. Base weights (plain or affine-quantized) are never
// rewritten, so the adapters a pass applies change from one call to the
// next at no cost, and rows of one batch may each apply their own set
// (Selection.Spans), on dense layers and expert banks alike: the base
// matmul runs once over all rows and every row adds its own pairs'
// terms through tensor.LowRankGather.
//
// Adapters are read in Hugging Face PEFT's format (adapter_config.json +
// adapter_model.safetensors: r, lora_alpha, use_rslora, rank_pattern,
// alpha_pattern, target_modules, and target_parameters on transformers 5's
// fused expert tensors gate_up_proj and down_proj, which become pairs of
// the gate, up and down expert banks) and in mlx-lm's (adapter_config.json's
// lora_parameters + adapters.safetensors, lora_a [in, r], lora_b [r,
// out], expert banks [E·r, in] and [E, out, r]). DoRA and embedding
// adapters are refused with model.ErrUnsupported.
//
// The hook is model.LoadOptions.Wrap: a Host stands in for every
// projection and expert bank as the model loads; Mount checks an adapter
// against those layers (the error names the module and the shapes that do
// not fit); Model runs passes with a Selection. Fuse writes a checkpoint
// with the adapters merged into the weights.
package lora
