// Package modeltest holds helpers for tests of models: a reference
// greedy decoder that parity tests compare against HF's tokens. It is
// test support, not an API for generating text: that is the generate
// package's loop, the only decoding loop in production code.
package modeltest

import (
	"encoding/binary"
	"fmt"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// Greedy decodes up to maxTokens tokens after prompt by argmax, through
// fresh caches: the prompt is prefilled in chunks of at most chunk tokens
// (0: all at once), then one token per step. It stops early after a token
// for which stop returns true (that token is included). It is the
// reference decoding loop parity checks compare with HF's greedy tokens:
// the smallest loop that exercises prefill chunks and cached steps.
func Greedy(m model.Model, prompt []int32, maxTokens, chunk int, stop func(id int32) bool) (out []int32, err error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("modeltest: greedy decoding needs a non-empty prompt")
	}
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
	be := tensor.Default()
	if l, ok := m.(*model.Loaded); ok {
		be = l.Backend()
	}
	var last int32
	step := func(ids []int32) error {
		sc := tensor.NewScope()
		defer sc.Close()
		var in *tensor.Array
		if err := tensor.Try(func() { in = int32s(be, ids) }); err != nil {
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

// int32s makes the [1, len(ids)] int32 input of ids on be.
func int32s(be tensor.Backend, ids []int32) *tensor.Array {
	raw := make([]byte, 4*len(ids))
	for i, x := range ids {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(x))
	}
	return tensor.FromBytesOn(be, raw, []int{1, len(ids)}, tensor.Int32, false)
}
