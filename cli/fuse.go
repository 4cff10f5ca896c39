package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/quant"
	"github.com/mlxgo/mlxgo/tensor"
)

func init() {
	register(&command{
		name:    "fuse",
		summary: "merge LoRA adapters into a model and write the merged checkpoint",
		run:     runFuse,
	})
}

// runFuse wraps lora.Fuse, as mlx_lm.fuse: the adapters merged into the
// weights, written as an MLX checkpoint; with -q the merged model is then
// quantized (quant.Convert) with --q-bits and --q-group-size.
func runFuse(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fl := newFlags("fuse", stderr)
	modelArg := fl.String("model", "", "model: a folder or a cached repo id (required)")
	var adapters []string
	fl.StringArrayVar(&adapters, "adapter-path", nil, "LoRA adapter folder (PEFT or mlx-lm format); repeatable, merged in the order given (required)")
	dst := fl.String("save-path", "fused_model", "output folder")
	quantize := fl.BoolP("quantize", "q", false, "quantize the merged model (4 bits, groups of 64 unless --q-bits / --q-group-size)")
	bits := fl.Int("q-bits", 4, "bits per weight with -q")
	group := fl.Int("q-group-size", 64, "quantization group size with -q")
	dequant := fl.Bool("de-quantize", false, "write a quantized base's weights in floating point (otherwise adapted quantized layers are quantized again with their own bits)")
	_ = fl.Bool("dequantize", false, "alias of --de-quantize")
	backend := fl.String("backend", "cpu", "compute backend for merging and quantizing: cpu, mlx, or auto")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo fuse --model MODEL --adapter-path DIR [--adapter-path DIR2] [--save-path OUT] [-q [--q-bits 4] [--q-group-size 64]] [--de-quantize]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	if v, _ := fl.GetBool("dequantize"); v {
		*dequant = true
	}
	switch {
	case fl.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fl.Arg(0))
	case *modelArg == "":
		return fmt.Errorf("%w: --model is required", errUsage)
	case len(adapters) == 0:
		return fmt.Errorf("%w: --adapter-path is required", errUsage)
	case *dst == "":
		return fmt.Errorf("%w: --save-path must not be empty", errUsage)
	}
	dir, err := resolveModel(*modelArg)
	if err != nil {
		return err
	}
	be, err := chooseBackend(*backend, stderr)
	if err != nil {
		return err
	}
	tensor.SetDefault(be)
	if !*quantize {
		if err := lora.Fuse(dir, *dst, adapters, lora.FuseOptions{Dequantize: *dequant, Backend: be}); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "wrote %s\n", *dst)
		return err
	}
	// -q: merge in floating point, then quantize the merged model
	tmp, err := os.MkdirTemp("", "mlxgo-fuse-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := lora.Fuse(dir, tmp, adapters, lora.FuseOptions{Dequantize: true, Backend: be}); err != nil {
		return err
	}
	spec := tensor.QuantSpec{Bits: *bits, GroupSize: *group}
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := quant.Convert(tmp, *dst, quant.ConvertOptions{Quantize: true, Spec: spec, Backend: be}); err != nil {
		return err
	}
	if _, err := model.ReadConfig(*dst); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "wrote %s (quantized, %d bits, groups of %d)\n", *dst, *bits, *group)
	return err
}
