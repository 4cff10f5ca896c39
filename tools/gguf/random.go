package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// LlamaShape is the size of a random Llama checkpoint.
type LlamaShape struct {
	Hidden, Layers, Heads, KVHeads, HeadDim, FFN, Vocab int
}

// Llama1B is the 1B-shaped Llama of the repository's benchmarks (generate
// and model bench tests): hidden 2048, 16 layers, GQA 32/8, FFN 8192,
// vocabulary 32000.
var Llama1B = LlamaShape{Hidden: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, FFN: 8192, Vocab: 32000}

// specialPieces are the first ids of the synthetic vocabulary, as in
// Llama 2's SentencePiece vocabulary: unknown, BOS, EOS.
var specialPieces = []string{"<unk>", "<s>", "</s>"}

// syntheticVocab is a SentencePiece-style vocabulary of n pieces: the
// specials, the word boundary and printable ASCII, then made-up pieces
// "▁t<N>" until n. It has no byte-fallback pieces: a random model emits
// them in any order, and llama-server ends a stream with an error on the
// invalid UTF-8 they then spell, so every piece here is whole text.
func syntheticVocab(n int) ([]string, error) {
	pieces := append([]string(nil), specialPieces...)
	pieces = append(pieces, "▁")
	for c := byte(33); c < 127; c++ {
		pieces = append(pieces, string(rune(c)))
	}
	if n < len(pieces) {
		return nil, fmt.Errorf("a vocabulary of %d is smaller than its %d fixed pieces", n, len(pieces))
	}
	for i := len(pieces); i < n; i++ {
		pieces = append(pieces, fmt.Sprintf("▁t%d", i))
	}
	return pieces, nil
}

// tokenizerJSON is a Hugging Face tokenizer.json for the synthetic
// vocabulary: BPE without merges behind SentencePiece's normalizer and
// decoder. Text encodes to characters (others to <unk>); the
// benchmarks send token ids, so only the id ↔ piece table matters.
func tokenizerJSON(pieces []string) ([]byte, error) {
	vocab := make(map[string]int, len(pieces))
	for i, p := range pieces {
		vocab[p] = i
	}
	var added []map[string]any
	for i, p := range specialPieces {
		added = append(added, map[string]any{"id": i, "content": p, "single_word": false, "lstrip": false,
			"rstrip": false, "normalized": false, "special": true})
	}
	tj := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens": added,
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer":  nil,
		"post_processor": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": []string{}},
	}
	return json.MarshalIndent(tj, "", " ")
}

// WriteRandomLlama writes a Hugging Face-style Llama folder with random
// F16 weights: config.json, model.safetensors, tokenizer.json and
// tokenizer_config.json. Linear and embedding weights are N(0, 0.02²) (the
// usual initializer range, which keeps activations finite through the
// layers), norm weights are 1. The same seed gives the same bytes.
func WriteRandomLlama(dir string, s LlamaShape, seed uint64) error {
	if s.Hidden <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.FFN <= 0 {
		return fmt.Errorf("random llama: every dimension must be positive: %+v", s)
	}
	pieces, err := syntheticVocab(s.Vocab)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(seed, 0x6767756602))
	var tensors []safetensors.Tensor
	f16 := func(name string, shape []int, gen func() float32) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		b := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(b[2*i:], tensor.F32ToF16(gen()))
		}
		tensors = append(tensors, safetensors.Tensor{Name: name, DType: tensor.Float16, Shape: shape, Data: b})
	}
	normal := func() float32 { return float32(0.02 * r.NormFloat64()) }
	one := func() float32 { return 1 }
	f16("model.embed_tokens.weight", []int{s.Vocab, s.Hidden}, normal)
	f16("model.norm.weight", []int{s.Hidden}, one)
	f16("lm_head.weight", []int{s.Vocab, s.Hidden}, normal)
	for l := range s.Layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		f16(p+"input_layernorm.weight", []int{s.Hidden}, one)
		f16(p+"post_attention_layernorm.weight", []int{s.Hidden}, one)
		f16(p+"self_attn.q_proj.weight", []int{s.Heads * s.HeadDim, s.Hidden}, normal)
		f16(p+"self_attn.k_proj.weight", []int{s.KVHeads * s.HeadDim, s.Hidden}, normal)
		f16(p+"self_attn.v_proj.weight", []int{s.KVHeads * s.HeadDim, s.Hidden}, normal)
		f16(p+"self_attn.o_proj.weight", []int{s.Hidden, s.Heads * s.HeadDim}, normal)
		f16(p+"mlp.gate_proj.weight", []int{s.FFN, s.Hidden}, normal)
		f16(p+"mlp.up_proj.weight", []int{s.FFN, s.Hidden}, normal)
		f16(p+"mlp.down_proj.weight", []int{s.Hidden, s.FFN}, normal)
	}
	if err := safetensors.Write(filepath.Join(dir, safetensors.SingleName), tensors, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	cfg := map[string]any{
		"model_type": "llama", "architectures": []string{"LlamaForCausalLM"}, "torch_dtype": "float16",
		"hidden_size": s.Hidden, "intermediate_size": s.FFN, "num_hidden_layers": s.Layers,
		"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.HeadDim,
		"vocab_size": s.Vocab, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
		"rope_theta": 500000.0, "max_position_embeddings": 4096, "bos_token_id": 1, "eos_token_id": 2,
		"hidden_act": "silu",
	}
	tokCfg := map[string]any{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
		"add_bos_token": false, "add_eos_token": false, "model_max_length": 4096}
	tj, err := tokenizerJSON(pieces)
	if err != nil {
		return err
	}
	files := map[string]any{"config.json": cfg, "tokenizer_config.json": tokCfg}
	for name, v := range files {
		raw, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), raw, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "tokenizer.json"), tj, 0o644)
}
