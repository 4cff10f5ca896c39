package model_test

import (
	"errors"
	"testing"

	"github.com/mlxgo/mlxgo/model"
)

func TestParseConfigQuantization(t *testing.T) {
	c, err := model.ParseConfig([]byte(`{"model_type":"qwen3_moe","eos_token_id":[2,7],
		"quantization_config":{"group_size":32,"bits":4,"mode":"affine",
			"model.layers.0.mlp.gate":{"bits":8},"lm_head":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	q := c.Quant
	if q == nil || q.Bits != 4 || q.GroupSize != 32 {
		t.Fatalf("quant %+v", q)
	}
	if s, ok := q.For("model.layers.0.mlp.gate"); !ok || s.Bits != 8 || s.GroupSize != 32 {
		t.Errorf("override: %+v %v (want 8 bits inheriting group 32)", s, ok)
	}
	if _, ok := q.For("lm_head"); ok {
		t.Error("lm_head: false not honoured")
	}
	if s, ok := q.For("model.layers.1.mlp.up_proj"); !ok || s.Bits != 4 {
		t.Errorf("default: %+v %v", s, ok)
	}
	if len(c.EOS) != 2 || c.EOS[1] != 7 {
		t.Errorf("eos %v", c.EOS)
	}
	for _, bad := range []string{
		`{"quantization":{"bits":4,"group_size":48}}`,
		`{"quantization":{"bits":4,"group_size":64,"mode":"mxfp4"}}`,
		`{"quantization_config":{"quant_method":"fp8"}}`,
	} {
		if _, err := model.ParseConfig([]byte(bad)); !errors.Is(err, model.ErrUnsupported) {
			t.Errorf("%s: error %v, want ErrUnsupported", bad, err)
		}
	}
}
