package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/quant"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tokenizer"
)

func init() {
	register(&command{
		name:    "convert",
		summary: "convert a Hugging Face checkpoint to an MLX (quantized) one",
		run:     runConvert,
	})
}

// runConvert wraps quant.Convert. Overrides are MODULE=BITS[:GROUP] or
// MODULE=false, MODULE matching a suffix of the module path
// ("lm_head", "mlp.gate", "model.embed_tokens").
func runConvert(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fl := newFlags("convert", stderr)
	src := fl.String("hf-path", "", "source folder (HF safetensors checkpoint) (required)")
	dst := fl.String("mlx-path", "", "destination folder (required)")
	quantize := fl.BoolP("quantize", "q", false, "quantize linear and embedding weights")
	dequant := fl.BoolP("dequantize", "d", false, "expand an MLX-quantized checkpoint back to floating point (--dtype sets the type)")
	bits := fl.Int("q-bits", 4, "bits per weight")
	group := fl.Int("q-group-size", 64, "quantization group size")
	dtype := fl.String("dtype", "", "float type of unquantized weights (float16, bfloat16, float32; default: as stored)")
	var overrides []string
	fl.StringArrayVar(&overrides, "q-override", nil, "per-module quantization, MODULE=BITS[:GROUP] or MODULE=false (repeatable)")
	backend := fl.String("backend", "cpu", "compute backend for quantizing and GPTQ calibration: cpu, mlx, or auto")
	method := fl.String("q-method", quant.MethodRTN, "rounding: rtn (min–max per group, as mlx-lm) or gptq (error-compensating, calibrated)")
	var cal calibFlags
	fl.StringVar(&cal.file, "calib-file", "", "gptq: calibration text (plain text, or JSON lines with a \"text\" field); default: text sampled from the model itself")
	fl.IntVar(&cal.samples, "calib-samples", 32, "gptq: number of calibration sequences")
	fl.IntVar(&cal.seqLen, "calib-seq-len", 256, "gptq: tokens per calibration sequence")
	fl.Uint64Var(&cal.seed, "calib-seed", 0, "gptq: seed for sampling calibration text from the model")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "Usage: mlxgo convert --hf-path SRC --mlx-path DST [-q] [--q-bits 4] [--q-group-size 64] [--q-override lm_head=8] [--q-method gptq [--calib-file F]]")
		fl.PrintDefaults()
	}
	if err := parseFlags(fl, args); err != nil {
		return err
	}
	if *src == "" || *dst == "" {
		return fmt.Errorf("%w: --hf-path and --mlx-path are required", errUsage)
	}
	opts := quant.ConvertOptions{Quantize: *quantize, Spec: tensor.QuantSpec{Bits: *bits, GroupSize: *group}}
	if *dtype != "" {
		dt, err := tensor.ParseDType(*dtype)
		if err != nil || !dt.IsFloat() {
			return fmt.Errorf("%w: --dtype %q", errUsage, *dtype)
		}
		opts.DType = dt
	}
	if *dequant {
		if *quantize {
			return fmt.Errorf("%w: --dequantize and --quantize exclude each other", errUsage)
		}
		if err := quant.Dequantize(*src, *dst, opts.DType); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "wrote %s\n", *dst)
		return err
	}
	for _, o := range overrides {
		mod, val, ok := strings.Cut(o, "=")
		if !ok || mod == "" {
			return fmt.Errorf("%w: --q-override %q (want MODULE=BITS[:GROUP] or MODULE=false)", errUsage, o)
		}
		if val == "false" {
			opts.Overrides = append(opts.Overrides, quant.Override{Match: mod})
			continue
		}
		b, g, _ := strings.Cut(val, ":")
		spec := &tensor.QuantSpec{GroupSize: *group}
		var err error
		if spec.Bits, err = strconv.Atoi(b); err != nil {
			return fmt.Errorf("%w: --q-override %q: bits %q", errUsage, o, b)
		}
		if g != "" {
			if spec.GroupSize, err = strconv.Atoi(g); err != nil {
				return fmt.Errorf("%w: --q-override %q: group size %q", errUsage, o, g)
			}
		}
		opts.Overrides = append(opts.Overrides, quant.Override{Match: mod, Spec: spec})
	}
	be, err := chooseBackend(*backend, stderr)
	if err != nil {
		return err
	}
	opts.Backend = be
	switch *method {
	case quant.MethodRTN:
	case quant.MethodGPTQ:
		if !*quantize {
			return fmt.Errorf("%w: --q-method gptq needs -q", errUsage)
		}
		if cal.samples < 1 || cal.seqLen < 2 {
			return fmt.Errorf("%w: --calib-samples must be ≥ 1 and --calib-seq-len ≥ 2", errUsage)
		}
		seqs, err := calibration(*src, cal, be, stderr)
		if err != nil {
			return err
		}
		opts.Method, opts.Calibration = quant.MethodGPTQ, seqs
	default:
		return fmt.Errorf("%w: --q-method %q (want rtn or gptq)", errUsage, *method)
	}
	if err := quant.Convert(*src, *dst, opts); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "wrote %s\n", *dst)
	return err
}

// calibFlags are convert's GPTQ calibration settings.
type calibFlags struct {
	file            string
	samples, seqLen int
	seed            uint64
}

// calibration returns GPTQ's calibration sequences for the checkpoint in
// src: windows of the tokenized --calib-file, or, without one, text the
// float model samples itself from its start token (the tokenizer's BOS,
// else config.json's bos or eos id). Each sequence starts with the
// tokenizer's special prefix (BOS) where it has one, as prompts do.
func calibration(src string, c calibFlags, be tensor.Backend, stderr io.Writer) ([][]int32, error) {
	tok, err := tokenizer.Load(src)
	if err != nil && c.file != "" {
		return nil, fmt.Errorf("--calib-file needs the model's tokenizer: %w", err)
	}
	var prefix []int32
	if tok != nil {
		prefix = toInt32s(tok.Encode("", true))
	}
	if c.file == "" {
		start := prefix
		if len(start) == 0 {
			id, ok := startToken(src)
			if !ok {
				return nil, fmt.Errorf("gptq: %s has no BOS or EOS token to start sampling from; pass --calib-file", src)
			}
			start = []int32{id}
		}
		m, err := model.Load(src, &model.LoadOptions{Backend: be, DType: tensor.Float32})
		if err != nil {
			return nil, err
		}
		defer m.Close()
		fmt.Fprintf(stderr, "sampling %d calibration sequences of %d tokens from the model\n", c.samples, c.seqLen)
		return quant.SampleSequences(m, start, c.samples, c.seqLen, c.seed)
	}
	text, err := readCalibText(c.file)
	if err != nil {
		return nil, err
	}
	ids := toInt32s(tok.Encode(text, false))
	body := c.seqLen - len(prefix)
	if body < 1 {
		return nil, fmt.Errorf("%w: --calib-seq-len %d leaves no room after the %d-token prefix", errUsage, c.seqLen, len(prefix))
	}
	if len(ids) < body {
		return nil, fmt.Errorf("gptq: %s has %d tokens, fewer than one %d-token calibration sequence", c.file, len(ids), c.seqLen)
	}
	// evenly spaced windows over the whole text (overlapping when it is short)
	n := c.samples
	seqs := make([][]int32, n)
	for i := range n {
		off := 0
		if n > 1 {
			off = i * (len(ids) - body) / (n - 1)
		}
		seqs[i] = append(append([]int32(nil), prefix...), ids[off:off+body]...)
	}
	return seqs, nil
}

// readCalibText reads a plain-text file, or a JSON-lines file (.jsonl)
// whose objects carry a "text" field, joined by blank lines.
func readCalibText(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(path, ".jsonl") {
		return string(raw), nil
	}
	var parts []string
	for i, line := range strings.Split(string(raw), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var doc struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal([]byte(line), &doc); err != nil || doc.Text == nil {
			return "", fmt.Errorf("%s:%d: want a JSON object with a \"text\" string", path, i+1)
		}
		parts = append(parts, *doc.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

// startToken is config.json's bos_token_id, else its (first) eos_token_id.
func startToken(dir string) (int32, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return 0, false
	}
	var c struct {
		BOS json.RawMessage `json:"bos_token_id"`
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return 0, false
	}
	for _, f := range []json.RawMessage{c.BOS, c.EOS} {
		if len(f) == 0 || string(f) == "null" {
			continue
		}
		var one int32
		if json.Unmarshal(f, &one) == nil {
			return one, true
		}
		var many []int32
		if json.Unmarshal(f, &many) == nil && len(many) > 0 {
			return many[0], true
		}
	}
	return 0, false
}
