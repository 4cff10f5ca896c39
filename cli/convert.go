package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

func init() {
	register(&command{
		name:    "convert",
		summary: "convert a Hugging Face checkpoint to an MLX (quantized) one",
		run:     runConvert,
	})
}

// runConvert wraps model.Convert. Overrides are MODULE=BITS[:GROUP] or
// MODULE=false, MODULE matching a suffix of the module path
// ("lm_head", "mlp.gate", "model.embed_tokens").
func runConvert(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fl := newFlags("convert", stderr)
	src := fl.String("hf-path", "", "source folder (HF safetensors checkpoint) (required)")
	dst := fl.String("mlx-path", "", "destination folder (required)")
	quant := fl.BoolP("quantize", "q", false, "quantize linear and embedding weights")
	bits := fl.Int("q-bits", 4, "bits per weight")
	group := fl.Int("q-group-size", 64, "quantization group size")
	dtype := fl.String("dtype", "", "float type of unquantized weights (float16, bfloat16, float32; default: as stored)")
	var overrides []string
	fl.StringArrayVar(&overrides, "q-override", nil, "per-module quantization, MODULE=BITS[:GROUP] or MODULE=false (repeatable)")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo convert --hf-path SRC --mlx-path DST [-q] [--q-bits 4] [--q-group-size 64] [--q-override lm_head=8]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	if *src == "" || *dst == "" {
		return fmt.Errorf("%w: --hf-path and --mlx-path are required", errUsage)
	}
	opts := model.ConvertOptions{Quantize: *quant, Bits: *bits, GroupSize: *group}
	if *dtype != "" {
		dt, err := tensor.ParseDType(*dtype)
		if err != nil || !dt.IsFloat() {
			return fmt.Errorf("%w: --dtype %q", errUsage, *dtype)
		}
		opts.DType = dt
	}
	for _, o := range overrides {
		mod, val, ok := strings.Cut(o, "=")
		if !ok || mod == "" {
			return fmt.Errorf("%w: --q-override %q (want MODULE=BITS[:GROUP] or MODULE=false)", errUsage, o)
		}
		if val == "false" {
			opts.Overrides = append(opts.Overrides, model.Override{Match: mod})
			continue
		}
		b, g, _ := strings.Cut(val, ":")
		spec := &model.QuantSpec{GroupSize: *group}
		var err error
		if spec.Bits, err = strconv.Atoi(b); err != nil {
			return fmt.Errorf("%w: --q-override %q: bits %q", errUsage, o, b)
		}
		if g != "" {
			if spec.GroupSize, err = strconv.Atoi(g); err != nil {
				return fmt.Errorf("%w: --q-override %q: group size %q", errUsage, o, g)
			}
		}
		opts.Overrides = append(opts.Overrides, model.Override{Match: mod, Spec: spec})
	}
	if err := model.Convert(*src, *dst, opts); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "wrote %s\n", *dst)
	return err
}
