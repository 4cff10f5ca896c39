package main

import (
	"fmt"
	"io"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// adapterUsage is the help of --adapter-path, shared by the verbs that
// take it.
const adapterUsage = "LoRA adapter folder (PEFT or mlx-lm format) applied unmerged to every pass; repeatable, residuals added in the order given"

// loadModelAdapters is loadModel with the LoRA adapters in the folders
// given mounted and applied to every pass (in order); without adapters it
// is loadModel. It says on stderr what it mounted.
func loadModelAdapters(dir, backend string, copyWeights bool, adapters []string, stderr io.Writer) (model.Model, tensor.Backend, error) {
	if len(adapters) == 0 {
		return loadModel(dir, backend, copyWeights, stderr)
	}
	be, err := chooseBackend(backend, stderr)
	if err != nil {
		return nil, nil, err
	}
	tensor.SetDefault(be)
	m, err := lora.Open(dir, &model.LoadOptions{Backend: be, Copy: copyWeights}, adapters...)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range m.Host().IDs() {
		mt, _ := m.Host().Mounted(id)
		fmt.Fprintf(stderr, "mlxgo: adapter %s\n", lora.Describe(mt))
	}
	prepackInt8(m, be, stderr)
	return m, be, nil
}
