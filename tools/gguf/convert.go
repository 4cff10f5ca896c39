package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/safetensors"
)

// llamaConfig is the part of a Hugging Face Llama config.json the GGUF
// metadata needs.
type llamaConfig struct {
	ModelType     string          `json:"model_type"`
	Hidden        int             `json:"hidden_size"`
	FFN           int             `json:"intermediate_size"`
	Layers        int             `json:"num_hidden_layers"`
	Heads         int             `json:"num_attention_heads"`
	KVHeads       int             `json:"num_key_value_heads"`
	HeadDim       int             `json:"head_dim"`
	Vocab         int             `json:"vocab_size"`
	RMSEps        float64         `json:"rms_norm_eps"`
	RopeTheta     float64         `json:"rope_theta"`
	MaxPositions  int             `json:"max_position_embeddings"`
	TieEmbeddings bool            `json:"tie_word_embeddings"`
	BOS           json.RawMessage `json:"bos_token_id"`
	EOS           json.RawMessage `json:"eos_token_id"`
	Quantization  json.RawMessage `json:"quantization"`
	RopeScaling   json.RawMessage `json:"rope_scaling"`
}

func readLlamaConfig(dir string) (*llamaConfig, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	c := &llamaConfig{RMSEps: 1e-5, RopeTheta: 10000, MaxPositions: 4096}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	switch {
	case c.ModelType != "llama":
		return nil, fmt.Errorf("config.json: model_type %q; this converter writes Llama checkpoints only", c.ModelType)
	case len(c.Quantization) > 0 && string(c.Quantization) != "null":
		return nil, errors.New("config.json: the checkpoint is already quantized; convert the float checkpoint")
	case len(c.RopeScaling) > 0 && string(c.RopeScaling) != "null":
		return nil, errors.New("config.json: rope_scaling is not supported by this converter")
	case c.Hidden <= 0 || c.FFN <= 0 || c.Layers <= 0 || c.Heads <= 0 || c.Vocab <= 0:
		return nil, errors.New("config.json: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads and vocab_size must be positive")
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.Heads%c.KVHeads != 0 || c.HeadDim%2 != 0 {
		return nil, fmt.Errorf("config.json: %d heads over %d KV heads of dim %d cannot be laid out", c.Heads, c.KVHeads, c.HeadDim)
	}
	return c, nil
}

// firstID reads a token id that config.json gives as a number or a list.
func firstID(raw json.RawMessage, def uint32) uint32 {
	var one int64
	if json.Unmarshal(raw, &one) == nil && one >= 0 {
		return uint32(one)
	}
	var many []int64
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 && many[0] >= 0 {
		return uint32(many[0])
	}
	return def
}

// ropePermute reorders the rows of a query or key projection from Hugging
// Face's rotary layout, which rotates dimension i with i + d/2 within each
// head, to the interleaved one llama.cpp's Llama graph uses, which rotates
// 2j with 2j+1: new row 2j+k of a head is old row k*d/2 + j. The model
// computes the same function either way; only the pairing of rows changes.
func ropePermute(src []float32, rows, cols, heads int) []float32 {
	out := make([]float32, len(src))
	d := rows / heads
	for h := range heads {
		for j := range d / 2 {
			for k := range 2 {
				dst := (h*d + 2*j + k) * cols
				from := (h*d + k*d/2 + j) * cols
				copy(out[dst:dst+cols], src[from:from+cols])
			}
		}
	}
	return out
}

// toF32 widens a safetensors tensor's elements to float32.
func toF32(info safetensors.TensorInfo, b []byte) ([]float32, error) {
	n := info.NumElements()
	out := make([]float32, n)
	switch info.DType {
	case tensor.Float32:
		for i := range n {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case tensor.Float16:
		for i := range n {
			out[i] = tensor.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case tensor.BFloat16:
		for i := range n {
			out[i] = tensor.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	default:
		return nil, fmt.Errorf("tensor %q has dtype %s; the converter reads F32, F16 and BF16", info.Name, info.RawDType)
	}
	return out, nil
}

// encode writes float32 values as F32 or F16.
func encode(w io.Writer, v []float32, t GGMLType) error {
	const chunk = 1 << 16
	var buf []byte
	for start := 0; start < len(v); start += chunk {
		part := v[start:min(start+chunk, len(v))]
		switch t {
		case TypeF32:
			buf = buf[:0]
			for _, f := range part {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(f))
			}
		case TypeF16:
			buf = buf[:0]
			for _, f := range part {
				buf = binary.LittleEndian.AppendUint16(buf, tensor.F32ToF16(f))
			}
		default:
			return fmt.Errorf("cannot encode %s", t)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// ConvertOptions are the knobs of ConvertLlama.
type ConvertOptions struct {
	// Type is the element type of the matrices (F16 or F32); norms are
	// always F32, as llama.cpp's own converter writes them.
	Type GGMLType
	// Name is general.name; the folder's base name when empty.
	Name string
}

// tensorMap is the Hugging Face name of each GGUF tensor of one layer.
var layerTensors = []struct{ gguf, hf string }{
	{"attn_norm.weight", "input_layernorm.weight"},
	{"attn_q.weight", "self_attn.q_proj.weight"},
	{"attn_k.weight", "self_attn.k_proj.weight"},
	{"attn_v.weight", "self_attn.v_proj.weight"},
	{"attn_output.weight", "self_attn.o_proj.weight"},
	{"ffn_norm.weight", "post_attention_layernorm.weight"},
	{"ffn_gate.weight", "mlp.gate_proj.weight"},
	{"ffn_up.weight", "mlp.up_proj.weight"},
	{"ffn_down.weight", "mlp.down_proj.weight"},
}

// ConvertLlama writes the Llama checkpoint in dir (config.json,
// safetensors, tokenizer.json) as a GGUF file at out, atomically.
func ConvertLlama(dir, out string, opt ConvertOptions) error {
	if opt.Type != TypeF16 && opt.Type != TypeF32 {
		return fmt.Errorf("element type %s: the converter writes F16 or F32", opt.Type)
	}
	cfg, err := readLlamaConfig(dir)
	if err != nil {
		return err
	}
	voc, err := readVocab(dir, cfg.Vocab)
	if err != nil {
		return err
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	name := opt.Name
	if name == "" {
		name = filepath.Base(filepath.Clean(dir))
	}
	fileType := uint32(1) // mostly F16
	if opt.Type == TypeF32 {
		fileType = 0
	}
	kvs := []KV{
		{"general.architecture", "llama"},
		{"general.name", name},
		{"general.file_type", fileType},
		{"general.alignment", uint32(defaultAlignment)},
		{"llama.context_length", uint32(cfg.MaxPositions)},
		{"llama.embedding_length", uint32(cfg.Hidden)},
		{"llama.block_count", uint32(cfg.Layers)},
		{"llama.feed_forward_length", uint32(cfg.FFN)},
		{"llama.attention.head_count", uint32(cfg.Heads)},
		{"llama.attention.head_count_kv", uint32(cfg.KVHeads)},
		{"llama.attention.key_length", uint32(cfg.HeadDim)},
		{"llama.attention.value_length", uint32(cfg.HeadDim)},
		{"llama.rope.dimension_count", uint32(cfg.HeadDim)},
		{"llama.rope.freq_base", float32(cfg.RopeTheta)},
		{"llama.attention.layer_norm_rms_epsilon", float32(cfg.RMSEps)},
		{"llama.vocab_size", uint32(cfg.Vocab)},
	}
	kvs = append(kvs, voc.metadata(firstID(cfg.BOS, 1), firstID(cfg.EOS, 2))...)

	// spec builds the descriptor of one tensor from its safetensors source,
	// checking the shape against the config before anything is written.
	spec := func(ggufName, hfName string, rows, cols int, permuteHeads int) (TensorSpec, error) {
		info, err := st.Info(hfName)
		if err != nil {
			return TensorSpec{}, err
		}
		want := []int{rows, cols}
		if cols == 0 {
			want = []int{rows}
		}
		if fmt.Sprint(info.Shape) != fmt.Sprint(want) {
			return TensorSpec{}, fmt.Errorf("tensor %q has shape %v, the config implies %v", hfName, info.Shape, want)
		}
		t := opt.Type
		dims := []uint64{uint64(cols), uint64(rows)}
		if cols == 0 {
			t, dims = TypeF32, []uint64{uint64(rows)}
		}
		return TensorSpec{Name: ggufName, Type: t, Dims: dims, Write: func(w io.Writer) error {
			b, err := st.Bytes(hfName)
			if err != nil {
				return err
			}
			v, err := toF32(info, b)
			if err != nil {
				return err
			}
			if permuteHeads > 0 {
				v = ropePermute(v, rows, cols, permuteHeads)
			}
			return encode(w, v, t)
		}}, nil
	}
	var tensors []TensorSpec
	add := func(ggufName, hfName string, rows, cols, permuteHeads int) error {
		s, err := spec(ggufName, hfName, rows, cols, permuteHeads)
		if err == nil {
			tensors = append(tensors, s)
		}
		return err
	}
	qRows, kvRows := cfg.Heads*cfg.HeadDim, cfg.KVHeads*cfg.HeadDim
	if err := add("token_embd.weight", "model.embed_tokens.weight", cfg.Vocab, cfg.Hidden, 0); err != nil {
		return err
	}
	if err := add("output_norm.weight", "model.norm.weight", cfg.Hidden, 0, 0); err != nil {
		return err
	}
	if !cfg.TieEmbeddings {
		if err := add("output.weight", "lm_head.weight", cfg.Vocab, cfg.Hidden, 0); err != nil {
			return err
		}
	}
	for l := range cfg.Layers {
		for _, lt := range layerTensors {
			rows, cols, perm := cfg.Hidden, cfg.Hidden, 0
			switch lt.gguf {
			case "attn_norm.weight", "ffn_norm.weight":
				cols = 0
			case "attn_q.weight":
				rows, perm = qRows, cfg.Heads
			case "attn_k.weight":
				rows, perm = kvRows, cfg.KVHeads
			case "attn_v.weight":
				rows = kvRows
			case "attn_output.weight":
				cols = qRows
			case "ffn_gate.weight", "ffn_up.weight":
				rows = cfg.FFN
			case "ffn_down.weight":
				cols = cfg.FFN
			}
			if err := add(fmt.Sprintf("blk.%d.%s", l, lt.gguf), fmt.Sprintf("model.layers.%d.%s", l, lt.hf), rows, cols, perm); err != nil {
				return err
			}
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".gguf-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := WriteFile(tmp, kvs, tensors); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

// vocab is a SentencePiece-style vocabulary read from tokenizer.json.
type vocab struct {
	tokens []string
	types  []int32
	unk    int32
}

// llama.cpp's token types.
const (
	tokNormal  = 1
	tokUnknown = 2
	tokControl = 3
	tokUnused  = 5
	tokByte    = 6
)

// readVocab reads tokenizer.json's BPE vocabulary and added tokens into a
// list of n pieces ordered by id. Ids the tokenizer does not name become
// unused "<pad_N>" pieces, so the list covers the embedding rows.
func readVocab(dir string, n int) (*vocab, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, fmt.Errorf("a GGUF file needs the vocabulary: %w", err)
	}
	var tj struct {
		Model struct {
			Type  string           `json:"type"`
			Vocab map[string]int64 `json:"vocab"`
			Unk   *string          `json:"unk_token"`
		} `json:"model"`
		Added []struct {
			ID      int64  `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer.json: model type %q; the converter writes SentencePiece-style BPE vocabularies", tj.Model.Type)
	}
	v := &vocab{tokens: make([]string, n), types: make([]int32, n)}
	set := func(id int64, piece string, typ int32) error {
		if id < 0 || id >= int64(n) {
			return fmt.Errorf("tokenizer.json: token %q has id %d outside the vocabulary of %d", piece, id, n)
		}
		v.tokens[id], v.types[id] = piece, typ
		return nil
	}
	for piece, id := range tj.Model.Vocab {
		typ := int32(tokNormal)
		if len(piece) == 6 && strings.HasPrefix(piece, "<0x") && strings.HasSuffix(piece, ">") {
			typ = tokByte
		}
		if err := set(id, piece, typ); err != nil {
			return nil, err
		}
	}
	for _, a := range tj.Added {
		typ := int32(tokNormal)
		if a.Special {
			typ = tokControl
		}
		if err := set(a.ID, a.Content, typ); err != nil {
			return nil, err
		}
	}
	v.unk = -1
	if tj.Model.Unk != nil {
		if id, ok := tj.Model.Vocab[*tj.Model.Unk]; ok {
			v.types[id], v.unk = tokUnknown, int32(id)
		}
	}
	seen := map[string]int{}
	for i := range v.tokens {
		if v.types[i] == 0 {
			v.tokens[i], v.types[i] = fmt.Sprintf("<pad_%d>", i), tokUnused
		}
		if j, dup := seen[v.tokens[i]]; dup {
			return nil, fmt.Errorf("tokenizer.json: piece %q has ids %d and %d", v.tokens[i], j, i)
		}
		seen[v.tokens[i]] = i
	}
	return v, nil
}

// metadata is the tokenizer part of the GGUF metadata. The scores rank
// pieces by id, the order a SentencePiece BPE vocabulary is stored in.
func (v *vocab) metadata(bos, eos uint32) []KV {
	scores := make([]float32, len(v.tokens))
	for i := range scores {
		scores[i] = -float32(i)
	}
	kvs := []KV{
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", v.tokens},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", v.types},
		{"tokenizer.ggml.bos_token_id", bos},
		{"tokenizer.ggml.eos_token_id", eos},
		{"tokenizer.ggml.add_bos_token", false},
	}
	if v.unk >= 0 {
		kvs = append(kvs, KV{"tokenizer.ggml.unknown_token_id", uint32(v.unk)})
	}
	return kvs
}
