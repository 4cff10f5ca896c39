package main

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// TestGenerateImageWithAdapter: `mlxgo generate --image --adapter-path`
// on the multimodal Gemma 4 fixture applies the adapter to the text model
// (the towers run as they are): the greedy continuation of the image
// prompt changes from the base model's, and equals that of the checkpoint
// `mlxgo fuse` merged the adapter into.
func TestGenerateImageWithAdapter(t *testing.T) {
	pr := mmPrompts(t)["image"]
	src := filepath.Join(mmFixture, "f32")
	ad := t.TempDir()
	writeMMAdapter(t, src, ad)
	gen := func(model string, extra ...string) []int {
		t.Helper()
		args := append([]string{"generate", "--model", model, "--backend", "cpu",
			"--prompt-ids", idList(pr.IDs), "--image", filepath.Join(mmFixture, "media", pr.Image+".png"),
			"--max-tokens", strconv.Itoa(len(pr.Greedy)), "--json", "--ignore-eos"}, extra...)
		code, out, errs := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: code %d: %s", extra, code, errs)
		}
		var res struct {
			IDs []int `json:"ids"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return res.IDs
	}
	adapted := gen(src, "--adapter-path", ad)
	if slices.Equal(adapted, pr.Greedy) {
		t.Fatalf("the adapter does not change the image prompt's greedy continuation (%v)", adapted)
	}
	fused := filepath.Join(t.TempDir(), "fused")
	if code, _, errs := run(t, "fuse", "--model", src, "--adapter-path", ad, "--save-path", fused); code != 0 {
		t.Fatalf("fuse: code %d: %s", code, errs)
	}
	if got := gen(fused); !slices.Equal(got, adapted) {
		t.Errorf("fused checkpoint with the image: %v, unmerged adapter %v", got, adapted)
	}
}

// writeMMAdapter writes a seeded rank-4 PEFT adapter on the text model's
// q_proj and o_proj of the checkpoint in src.
func writeMMAdapter(t *testing.T, src, dst string) {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewSource(9))
	f32 := func(n int) []byte {
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(0.3*r.NormFloat64())))
		}
		return b
	}
	re := regexp.MustCompile(`language_model\..*layers\.\d+\.self_attn\.(q|o)_proj\.weight$`)
	var ts []safetensors.Tensor
	for _, n := range f.Names() {
		if !re.MatchString(n) {
			continue
		}
		info, _ := f.Info(n)
		out, in := info.Shape[0], info.Shape[1]
		mod := "base_model.model." + strings.TrimSuffix(n, ".weight")
		ts = append(ts,
			safetensors.Tensor{Name: mod + ".lora_A.weight", DType: tensor.Float32, Shape: []int{4, in}, Data: f32(4 * in)},
			safetensors.Tensor{Name: mod + ".lora_B.weight", DType: tensor.Float32, Shape: []int{out, 4}, Data: f32(4 * out)})
	}
	if len(ts) == 0 {
		t.Fatal("the fixture has no text-model q_proj/o_proj")
	}
	if err := safetensors.Write(filepath.Join(dst, "adapter_model.safetensors"), ts, nil); err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{"peft_type": "LORA", "r": 4, "lora_alpha": 4, "target_modules": []string{"q_proj", "o_proj"}})
	if err := os.WriteFile(filepath.Join(dst, "adapter_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}
