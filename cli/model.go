package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/mlxffi"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tokenizer"
	"github.com/spf13/pflag"
)

// pickBackend resolves a --backend name to "cpu" or "mlx". Explicit names
// are taken as given. auto asks hasGPU, and picks MLX only when MLX has a
// GPU device: MLX on its CPU device decodes slower than the pure-Go CPU
// backend, so a libmlxc built without Metal or CUDA is no reason to use
// it. why says, for auto, what decided the choice.
func pickBackend(name string, hasGPU func() (bool, error)) (pick, why string, err error) {
	switch name {
	case "cpu", "mlx":
		return name, "", nil
	case "auto":
		gpu, err := hasGPU()
		switch {
		case errors.Is(err, mlxffi.ErrNotFound):
			return "cpu", "libmlxc not found", nil
		case err != nil:
			return "cpu", fmt.Sprintf("MLX unavailable: %v", err), nil
		case !gpu:
			return "cpu", "MLX has no GPU device", nil
		}
		return "mlx", "MLX has a GPU device", nil
	}
	return "", "", fmt.Errorf("%w: --backend %q (want cpu, mlx or auto)", errUsage, name)
}

// chooseBackend opens the backend the --backend flag names (see
// pickBackend); for auto it says on stderr which one it picked and why.
// The generation loop takes peak memory and cache clearing from the
// backend itself when it has them (the MLX backend does), so callers pass
// no generate.MemoryInfo.
func chooseBackend(name string, stderr io.Writer) (tensor.Backend, error) {
	pick, why, err := pickBackend(name, mlxffi.HasGPU)
	if err != nil {
		return nil, err
	}
	if pick == "mlx" {
		be, err := mlxffi.Open()
		switch {
		case err == nil:
			if why != "" {
				fmt.Fprintf(stderr, "mlxgo: using the MLX backend (%s)\n", why)
			}
			return be, nil
		case name == "mlx":
			return nil, err
		}
		why = fmt.Sprintf("MLX unavailable: %v", err)
	}
	if why != "" {
		fmt.Fprintf(stderr, "mlxgo: using the CPU backend (%s)\n", why)
	}
	// the switch is process-wide: set it from this verb's flag either way,
	// so that an earlier verb run in the same process does not leave it on
	cpu.SetInt8Activations(int8Activations && cpu.Int8ActivationsSupported())
	if int8Activations {
		if cpu.Int8ActivationsSupported() {
			fmt.Fprintln(stderr, "mlxgo: int8 activations for 4- and 8-bit weights (--int8-activations)")
			if cpu.AMXInt8() {
				fmt.Fprintln(stderr, "mlxgo: prefill products on AMX-INT8 tiles (MLXGO_AMX=1)")
			} else if os.Getenv("MLXGO_AMX") == "1" {
				fmt.Fprintf(stderr, "mlxgo: MLXGO_AMX=1: no AMX here (%s)\n", cpu.AMXStatus())
			}
		} else {
			fmt.Fprintln(stderr, "mlxgo: --int8-activations: this CPU has no AVX512_VNNI; float activations are used")
		}
	}
	return tensor.Open("cpu")
}

// int8Activations is --int8-activations (see int8Flag).
var int8Activations bool

// int8Flag registers --int8-activations on a verb's flags.
func int8Flag(fl *pflag.FlagSet) {
	fl.BoolVar(&int8Activations, "int8-activations", os.Getenv("MLXGO_INT8_ACTIVATIONS") == "1",
		"CPU backend: quantize activations to int8 per weight group for 4- and 8-bit weights (AVX512_VNNI; faster, not bit-identical to the float path; rows stay batch-invariant; default on when MLXGO_INT8_ACTIVATIONS=1)")
}

// loadModel opens the --backend backend, makes it the default one, and
// loads the model in dir on it (copyWeights: --copy-weights).
func loadModel(dir, backend string, copyWeights bool, stderr io.Writer) (model.Model, tensor.Backend, error) {
	be, err := chooseBackend(backend, stderr)
	if err != nil {
		return nil, nil, err
	}
	tensor.SetDefault(be)
	m, err := model.Load(dir, &model.LoadOptions{Backend: be, Copy: copyWeights})
	if err != nil {
		return nil, nil, err
	}
	prepackInt8(m, be, stderr)
	return m, be, nil
}

// prepackInt8, when int8 activations are on for the CPU backend be, runs
// one token through m so that every quantized weight the
// text path reads is repacked for the int8 kernels now, at load, rather
// than inside the first request (seconds on a 1B model); weights only
// some inputs reach (MoE experts, vision and audio towers) are still
// packed on first use. A failure is reported and leaves that to the first
// request.
func prepackInt8(m model.Model, be tensor.Backend, stderr io.Writer) {
	if be.Name() != "cpu" || !cpu.Int8Activations() {
		return
	}
	t0 := time.Now()
	n0, b0 := cpu.Int8Packs() // another model's (a speculative target's) packs
	var ferr error
	err := tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		caches := m.MakeCaches()
		defer model.FreeCaches(caches)
		h, err := m.Forward(tensor.FromInt32([]int32{0}, []int{1, 1}), caches, nil)
		if err != nil {
			ferr = err
			return
		}
		_, ferr = m.Logits(h) // the scope frees what the pass made
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo: int8 repack at load failed (%v); weights are repacked on first use\n", err)
		return
	}
	n, b := cpu.Int8Packs()
	fmt.Fprintf(stderr, "mlxgo: int8: %d weight matrices repacked at load (%s) in %.2f s\n", n-n0, fmtBytes(b-b0), time.Since(t0).Seconds())
}

// eosIDs are the ids that end generation: the model's EOS ids, then the
// tokenizer's (generation_config.json's) ones it lacks; tok may be nil.
func eosIDs(modelEOS []int, tok *tokenizer.Tokenizer) []int {
	ids := slices.Clone(modelEOS)
	if tok != nil {
		for _, id := range tok.Config.EOSTokenIDs {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// encodePrompt tokenizes prompt text; like mlx-lm, the tokenizer's special
// tokens (BOS) are added unless the text already starts with the BOS
// token, as a rendered chat template usually does; always is for raw
// prompts, which get them whatever they start with.
func encodePrompt(tok *tokenizer.Tokenizer, text string, always bool) []int32 {
	bos := tok.Config.SpecialTokens["bos_token"]
	return toInt32s(tok.Encode(text, always || bos == "" || !strings.HasPrefix(text, bos)))
}

// toInt32s converts token ids to the generation loop's int32s.
func toInt32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}
