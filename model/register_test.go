package model_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/model"
)

// TestRegisterDuplicatePanics: a second registration of a name, model_type
// or architectures entry panics naming it, and leaves the registry as it was.
func TestRegisterDuplicatePanics(t *testing.T) {
	before := model.Supported()
	cases := []struct {
		arch model.Arch
		want []string // substrings of the panic message
	}{
		{model.Arch{Name: "llama", ModelTypes: []string{"not_a_model_type"}}, []string{`"llama"`, "twice"}},
		{model.Arch{Name: "llama_clone", ModelTypes: []string{"smollm"}}, []string{`"llama_clone"`, `"smollm"`, `"llama"`}},
		{model.Arch{Name: "qwen3_clone", Architectures: []string{"Qwen3ForCausalLM"}}, []string{`"qwen3_clone"`, `"Qwen3ForCausalLM"`, `"qwen3"`}},
	}
	for _, c := range cases {
		t.Run(c.arch.Name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("no panic")
				}
				msg := fmt.Sprint(r)
				for _, w := range c.want {
					if !strings.Contains(msg, w) {
						t.Errorf("panic %q does not name %s", msg, w)
					}
				}
			}()
			model.Register(c.arch)
		})
	}
	if after := model.Supported(); !slices.Equal(after, before) {
		t.Fatalf("registry changed by failed registrations: %v, was %v", after, before)
	}
}
