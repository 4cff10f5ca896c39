package main

import (
	"fmt"
	"io"

	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// serveAdapterUsage is the help of serve's --adapter.
const serveAdapterUsage = "LoRA adapter folder (PEFT or mlx-lm format) mounted at start as its folder's name; repeatable. Requests that name no adapter get all of them, stacked in the order given; \"adapter\": \"none\" is the base model"

// loadServeModel loads the model the server runs through a LoRA host, so
// that adapters can be mounted at start (the folders given, each as its
// folder's name) and later (POST /v1/adapters), and chosen per request;
// es streams experts as loadModelOpts does.
func loadServeModel(dir, backend string, copyWeights bool, adapters []string, es *model.ExpertStreaming, stderr io.Writer) (*lora.Model, tensor.Backend, error) {
	be, err := chooseBackend(backend, stderr)
	if err != nil {
		return nil, nil, err
	}
	tensor.SetDefault(be)
	m, err := lora.Open(dir, &model.LoadOptions{Backend: be, Copy: copyWeights, Experts: es}, adapters...)
	if err != nil {
		return nil, nil, err
	}
	for _, id := range m.Host().IDs() {
		mt, _ := m.Host().Mounted(id)
		fmt.Fprintf(stderr, "mlxgo: adapter %s\n", lora.Describe(mt))
	}
	if es != nil {
		st, ok := expertStats(m)
		if !ok || st.Experts == 0 {
			fmt.Fprintln(stderr, "mlxgo: --expert-offload: the model has no routed experts; nothing streams")
		} else {
			fmt.Fprintf(stderr, "mlxgo: streaming %d experts (%s) through a %s cache\n", st.Experts, fmtBytes(st.TotalBytes), fmtBytes(st.BudgetBytes))
		}
	}
	prepackInt8(m, be, stderr)
	return m, be, nil
}
