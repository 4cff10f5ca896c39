package main

import (
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/spf13/pflag"
)

const kvQuantUsage = "TurboQuant KV cache: turbo (k8v3) or turbo:k<bits>v<bits> (keys 2/4/5/8, values 2/3/4/5/8 bits); turbo-qjl[:k<bits>v<bits>] (keys 3/4/5 bits with a 1-bit residual sketch; default k4v3); from --quantized-kv-start; excludes --kv-bits and --kv-config"

// addKVQuantFlag registers --kv-quant.
func addKVQuantFlag(fl *pflag.FlagSet, s *string) { fl.StringVar(s, "kv-quant", "", kvQuantUsage) }

// parseKVQuantFlag parses --kv-quant ("" is off), refusing it next to
// --kv-bits or --kv-config.
func parseKVQuantFlag(s string, kvBits int, kvConfig string) (*kv.TurboSpec, error) {
	if s == "" {
		return nil, nil
	}
	if kvBits != 0 || kvConfig != "" {
		return nil, fmt.Errorf("%w: --kv-quant cannot be combined with --kv-bits or --kv-config (pick one KV scheme)", errUsage)
	}
	spec, err := kv.ParseKVQuant(s)
	if err != nil {
		return nil, fmt.Errorf("%w: --kv-quant: %v", errUsage, err)
	}
	return &spec, nil
}

// checkKVQuant refuses, before anything is generated, a model with head
// dims the scheme cannot take: it runs one token through fresh caches and
// checks the keys and values each attention layer stored.
func checkKVQuant(m model.Model, spec *kv.TurboSpec) error {
	if spec == nil {
		return nil
	}
	var bad error
	err := tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		caches := m.MakeCaches()
		defer func() {
			for _, c := range caches {
				if c != nil {
					c.Free()
				}
			}
		}()
		if _, err := m.Forward(tensor.FromInt32([]int32{0}, []int{1, 1}), caches, nil); err != nil {
			bad = err
			return
		}
		for i, c := range caches {
			switch c.(type) {
			case *kv.KVCache, *kv.RotatingKVCache:
			default:
				continue
			}
			st := c.State()
			if len(st.Arrays) == 2 {
				if err := spec.Check(st.Arrays[0].Dim(3), st.Arrays[1].Dim(3)); err != nil && bad == nil {
					bad = fmt.Errorf("layer %d: %w", i, err)
				}
			}
			st.Free()
		}
	})
	if err != nil {
		return err
	}
	if bad != nil {
		return fmt.Errorf("--kv-quant %s: %w", spec, bad)
	}
	return nil
}
