// Package quant makes quantized checkpoints: Convert (an HF checkpoint to
// an MLX one, restacked and optionally affine-quantized by plain min–max
// rounding or by GPTQ against calibration text), Dequantize (back to
// floating point), and SampleSequences (calibration text drawn from the
// model itself). Loading and running quantized checkpoints is the model
// package's; this one only writes them. GPTQ observes each layer's inputs
// by standing in for the layers as the float model loads
// (model.LoadOptions.Wrap), so the inference types carry nothing for it.
package quant
