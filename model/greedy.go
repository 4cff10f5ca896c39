package model

import (
	"encoding/binary"
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// Greedy decodes up to maxTokens tokens after prompt by argmax, through
// fresh caches: the prompt is prefilled in chunks of at most chunk tokens
// (0: all at once), then one token per step. It stops early after a token
// for which stop returns true (that token is included). It is the
// reference decoding loop for parity checks and `mlxgo generate --temp 0`;
// the generate package owns the full sampler loop.
func Greedy(m Model, prompt []int32, maxTokens, chunk int, stop func(id int32) bool) (out []int32, err error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("model: greedy decoding needs a non-empty prompt")
	}
	caches := m.MakeCaches()
	defer FreeCaches(caches)
	be := backendOf(m)
	var last int32
	step := func(ids []int32) error {
		sc := tensor.NewScope()
		defer sc.Close()
		var in *tensor.Array
		if err := tensor.Try(func() { in = int32s(be, ids, 1, len(ids)) }); err != nil {
			return err
		}
		h, err := m.Forward(in, caches, nil)
		if err != nil {
			return err
		}
		var lastH *tensor.Array
		if err := tensor.Try(func() { lastH = tensor.SliceAxis(h, 1, len(ids)-1, len(ids)) }); err != nil {
			return err
		}
		logits, err := m.Logits(lastH)
		if err != nil {
			return err
		}
		return tensor.Try(func() {
			b := tensor.AsType(tensor.Argmax(logits, -1, false), tensor.Int32).Bytes()
			last = int32(binary.LittleEndian.Uint32(b))
		})
	}
	if chunk <= 0 {
		chunk = len(prompt)
	}
	for i := 0; i < len(prompt); i += chunk {
		if err := step(prompt[i:min(i+chunk, len(prompt))]); err != nil {
			return nil, err
		}
	}
	for len(out) < maxTokens {
		out = append(out, last)
		if (stop != nil && stop(last)) || len(out) == maxTokens {
			break
		}
		if err := step([]int32{last}); err != nil {
			return out, err
		}
	}
	return out, nil
}
