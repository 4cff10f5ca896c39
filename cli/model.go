package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/mlxffi"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// chooseBackend opens the backend the --backend flag names; auto prefers
// MLX and falls back to the CPU backend when libmlxc is not installed.
// The generation loop takes peak memory and cache clearing from the
// backend itself when it has them (the MLX backend does), so callers pass
// no generate.MemoryInfo.
func chooseBackend(name string, stderr io.Writer) (tensor.Backend, error) {
	switch name {
	case "cpu":
		return tensor.Open("cpu")
	case "mlx", "auto":
		be, err := mlxffi.Open()
		if err == nil {
			return be, nil
		}
		if name == "mlx" {
			return nil, err
		}
		if !errors.Is(err, mlxffi.ErrNotFound) {
			fmt.Fprintf(stderr, "mlxgo: MLX unavailable (%v); using the CPU backend\n", err)
		}
		return tensor.Open("cpu")
	default:
		return nil, fmt.Errorf("%w: --backend %q (want cpu, mlx or auto)", errUsage, name)
	}
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
	return m, be, nil
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
