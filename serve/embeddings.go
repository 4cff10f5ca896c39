package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/tensor"
)

// POST /v1/embeddings: vectors from the served model's final hidden
// states (generate.Model.Forward's output, after the final norm and
// before the logits), pooled over the input's tokens (Config.
// EmbeddingPooling: the mean by default, or the last token's state for
// models trained that way, such as Qwen3-Embedding) and L2-normalized.
// Each input runs on the engine goroutine, in its turn between
// generation steps, with fresh caches: inputs never share a pass, so a
// batch of inputs gets exactly what each input alone gets.

// Pooling modes of Config.EmbeddingPooling.
const (
	PoolMean = "mean" // the mean of every token's state (the default)
	PoolLast = "last" // the last token's state
)

// Bounds of one embeddings request; more is a 400.
const (
	maxEmbeddingInputs = 128
	maxEmbeddingTokens = 8192  // per input (and at most the context length)
	maxEmbeddingTotal  = 65536 // over all inputs
)

// embeddingsRequest is POST /v1/embeddings' body.
type embeddingsRequest struct {
	Model string `json:"model"`
	// Input is a completionPrompt: a string, a list of strings, a list of
	// token ids or a list of such lists.
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"` // float (default) or base64
	Dimensions     *int            `json:"dimensions"`
	User           *string         `json:"user"`
}

// embeddingList is POST /v1/embeddings' reply.
type embeddingList struct {
	Object string            `json:"object"` // "list"
	Data   []embeddingObject `json:"data"`
	Model  string            `json:"model"`
	Usage  embeddingUsage    `json:"usage"`
}

// embeddingObject is one input's vector: a list of numbers, or with
// encoding_format base64 the little-endian float32 bytes in base64.
type embeddingObject struct {
	Object    string `json:"object"` // "embedding"
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"`
}

// embeddingUsage counts the input tokens.
type embeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingsRequest
	err := readJSON(r, &req)
	var out *embeddingList
	if err == nil {
		out, err = s.embeddings(r.Context(), &req)
	}
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// embeddings validates a request, computes its vectors and lays out the
// reply.
func (s *Server) embeddings(ctx context.Context, req *embeddingsRequest) (*embeddingList, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, err
	}
	inputs, total, err := s.embeddingInputs(req.Input)
	if err != nil {
		return nil, err
	}
	b64 := false
	if f := req.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			b64 = true
		default:
			return nil, badRequest("encoding_format", "encoding_format must be float or base64, got %q", *f)
		}
	}
	if d := req.Dimensions; d != nil && (*d < 1 || s.cfg.MatryoshkaMinDims > 0 && *d < s.cfg.MatryoshkaMinDims) {
		return nil, badRequest("dimensions", "dimensions must be ≥ %d, got %d", max(1, s.cfg.MatryoshkaMinDims), *d)
	}
	vecs, err := s.embed(ctx, inputs)
	if err != nil {
		return nil, err
	}
	if d := req.Dimensions; d != nil && len(vecs) > 0 {
		full := len(vecs[0])
		switch {
		case *d > full:
			return nil, badRequest("dimensions", "dimensions %d exceeds the model's embedding width %d", *d, full)
		case *d < full && s.cfg.MatryoshkaMinDims <= 0:
			return nil, badRequest("dimensions", "this model's embeddings cannot be shortened (only dimensions %d; the server enables shorter ones for Matryoshka-trained models)", full)
		case *d < full:
			for i, v := range vecs {
				vecs[i] = normalize(v[:*d])
			}
		}
	}
	out := &embeddingList{Object: "list", Data: make([]embeddingObject, len(vecs)), Model: s.cfg.ModelID, Usage: embeddingUsage{PromptTokens: total, TotalTokens: total}}
	for i, v := range vecs {
		var e any = v
		if b64 {
			e = encodeFloats(v)
		}
		out.Data[i] = embeddingObject{Object: "embedding", Index: i, Embedding: e}
	}
	return out, nil
}

// embeddingInputs tokenizes and bounds a request's inputs; it returns
// them and their total token count.
func (s *Server) embeddingInputs(raw json.RawMessage) ([][]int32, int, error) {
	if absent(raw) {
		return nil, 0, badRequest("input", "input is required")
	}
	var p completionPrompt
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, 0, badRequest("input", "input must be a string, a list of strings, a list of token ids or a list of such lists")
	}
	n := max(len(p.Texts), len(p.Tokens))
	if n == 0 {
		return nil, 0, badRequest("input", "input must not be an empty list")
	}
	if n > maxEmbeddingInputs {
		return nil, 0, badRequest("input", "at most %d inputs per request, got %d", maxEmbeddingInputs, n)
	}
	limit := maxEmbeddingTokens
	if c := s.cfg.ContextLength; c > 0 {
		limit = min(limit, c)
	}
	out := make([][]int32, 0, n)
	total := 0
	for i := range n {
		param := "input"
		if n > 1 {
			param = fmt.Sprintf("input[%d]", i)
		}
		var ids []int32
		if p.Tokens != nil {
			ids = p.Tokens[i]
		} else {
			if p.Texts[i] == "" {
				return nil, 0, badRequest(param, "an input must not be an empty string")
			}
			var err error
			if ids, err = s.encodePromptChecked(p.Texts[i], true, param); err != nil {
				return nil, 0, err
			}
		}
		if err := s.checkPrompt(ids, param); err != nil {
			return nil, 0, err
		}
		if len(ids) > limit {
			return nil, 0, &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("the input is %d tokens; at most %d per input", len(ids), limit),
				typ: "invalid_request_error", param: param, code: "context_length_exceeded"}
		}
		if total += len(ids); total > maxEmbeddingTotal {
			return nil, 0, badRequest("input", "the inputs are more than %d tokens together", maxEmbeddingTotal)
		}
		out = append(out, ids)
	}
	return out, total, nil
}

// embed computes the inputs' vectors on the engine goroutine (a job whose
// fn runs the forward passes in the job's turn, never beside generation).
func (s *Server) embed(ctx context.Context, inputs [][]int32) ([][]float32, error) {
	var vecs [][]float32
	j := &job{ctx: ctx, out: newSink()}
	j.fn = func() {
		var err error
		vecs, err = s.embedAll(ctx, inputs)
		j.out.push(event{done: &outcome{err: err}})
	}
	if err := s.eng.submit(j); err != nil {
		return nil, err
	}
	for ev := range events(ctx, j) {
		if ev.done == nil {
			continue
		}
		if ev.done.err != nil {
			return nil, embedError(ev.done.err)
		}
		return vecs, nil // the done event orders fn's write before this read
	}
	return nil, ctx.Err() // the client left
}

// embedError maps a failed embedding to an API error.
func embedError(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &apiError{status: http.StatusInternalServerError, message: "embedding failed: " + err.Error(), typ: "server_error"}
}

// embedAll embeds each input alone (on the engine goroutine).
func (s *Server) embedAll(ctx context.Context, inputs [][]int32) ([][]float32, error) {
	out := make([][]float32, len(inputs))
	for i, ids := range inputs {
		v, err := s.embedOne(ctx, ids)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// embedOne runs ids through the model in prefill-sized chunks with fresh
// caches and pools the final hidden states: summed per chunk on the
// backend for the mean, the last position's row for last-token pooling
// (each chunk's pass then asks for its last position alone,
// generate.ForwardOutputs).
// The vector is L2-normalized.
func (s *Server) embedOne(ctx context.Context, ids []int32) ([]float32, error) {
	chunk := s.cfg.PrefillChunkSize
	if chunk <= 0 {
		chunk = generate.DefaultPrefillChunkSize
	}
	last := s.cfg.EmbeddingPooling == PoolLast
	var acc []float64
	var ferr error
	err := tensor.Try(func() {
		be := s.cfg.Backend
		if be == nil {
			be = tensor.Default()
		}
		caches := s.cfg.Model.MakeCaches()
		defer freeCaches(caches)
		for off := 0; off < len(ids) && ferr == nil; off += chunk {
			if ferr = ctx.Err(); ferr != nil {
				return
			}
			part := ids[off:min(off+chunk, len(ids))]
			final := off+len(part) == len(ids)
			step := func() {
				sc := tensor.NewScope()
				defer sc.Close()
				in := tensor.FromInt32On(be, part, []int{1, len(part)})
				var h *tensor.Array
				var err error
				want := len(part) // the positions the pass returns
				if last {
					// last-token pooling reads one position of a chunk at most
					h, err = generate.ForwardOutputs(s.cfg.Model, in, caches, []int32{int32(len(part) - 1)})
					want = 1
				} else {
					h, err = s.cfg.Model.Forward(in, caches)
				}
				if err != nil {
					ferr = err
					return
				}
				sh := h.Shape()
				if len(sh) != 3 || sh[1] != want {
					ferr = fmt.Errorf("the model's hidden states have shape %v for %d tokens", sh, len(part))
					return
				}
				var row []float32
				switch {
				case last && !final:
					return
				case last:
					row = tensor.Slice(tensor.AsType(h, tensor.Float32), []int{0, sh[1] - 1, 0}, []int{1, sh[1], sh[2]}, []int{1, 1, 1}).Float32s()
				default:
					row = tensor.Sum(tensor.AsType(h, tensor.Float32), []int{1}, false).Float32s()
				}
				if acc == nil {
					acc = make([]float64, len(row))
				}
				for i, v := range row {
					acc[i] += float64(v)
				}
			}
			if runner, ok := be.(generate.StepRunner); ok {
				runner.Run(step)
			} else {
				step()
			}
		}
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return nil, err
	}
	if s.cfg.Memory != nil {
		_ = s.cfg.Memory.ClearCache()
	}
	out := make([]float32, len(acc))
	for i, v := range acc {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, errors.New("the model's hidden states are not finite")
		}
		out[i] = float32(v) // the mean's divisor cancels in the normalization
	}
	return normalize(out), nil
}

// normalize scales v to unit L2 norm in place (a zero vector stays zero).
func normalize(v []float32) []float32 {
	var ss float64
	for _, x := range v {
		ss += float64(x) * float64(x)
	}
	if ss == 0 {
		return v
	}
	inv := 1 / math.Sqrt(ss)
	for i, x := range v {
		v[i] = float32(float64(x) * inv)
	}
	return v
}

// encodeFloats is encoding_format base64: little-endian float32 bytes.
func encodeFloats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// LoadEmbeddingPooling reads a model folder's sentence-transformers
// pooling (modules.json naming a Pooling module, whose config.json sets
// pooling_mode_lasttoken or pooling_mode_mean_tokens): PoolLast or
// PoolMean, "" when the folder has none. Other modes are an error.
func LoadEmbeddingPooling(dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "modules.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var mods []struct {
		Path string `json:"path"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &mods); err != nil {
		return "", fmt.Errorf("modules.json: %w", err)
	}
	for _, m := range mods {
		if m.Type != "sentence_transformers.models.Pooling" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(m.Path), "config.json"))
		if err != nil {
			return "", fmt.Errorf("the pooling module's config: %w", err)
		}
		var c map[string]any
		if err := json.Unmarshal(raw, &c); err != nil {
			return "", fmt.Errorf("the pooling module's config: %w", err)
		}
		switch {
		case c["pooling_mode_lasttoken"] == true:
			return PoolLast, nil
		case c["pooling_mode_mean_tokens"] == true:
			return PoolMean, nil
		}
		return "", fmt.Errorf("the model's pooling mode is not supported (want mean or last token): %s", raw)
	}
	return "", nil
}
