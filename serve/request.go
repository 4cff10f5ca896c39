package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// samplingFields are the request fields shared by the OpenAI endpoints.
type samplingFields struct {
	Model                 string             `json:"model"`
	MaxTokens             *int               `json:"max_tokens"`
	MaxCompletionTokens   *int               `json:"max_completion_tokens"`
	Temperature           *float64           `json:"temperature"`
	TopP                  *float64           `json:"top_p"`
	TopK                  *int               `json:"top_k"`
	MinP                  *float64           `json:"min_p"`
	Seed                  *int64             `json:"seed"`
	RepetitionPenalty     *float64           `json:"repetition_penalty"`
	RepetitionContextSize *int               `json:"repetition_context_size"`
	PresencePenalty       *float64           `json:"presence_penalty"`
	FrequencyPenalty      *float64           `json:"frequency_penalty"`
	LogitBias             map[string]float64 `json:"logit_bias"`
	TopLogprobs           *int               `json:"top_logprobs"`
	Stop                  json.RawMessage    `json:"stop"`
	N                     *int               `json:"n"`
	Stream                *bool              `json:"stream"`
	StreamOptions         *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat json.RawMessage `json:"response_format"`
	// StructuredOutputs is the vLLM-style constraint: {json | regex | choice | grammar}.
	StructuredOutputs json.RawMessage `json:"structured_outputs"`
}

// readJSON reads the body into v, mapping failures to 400 / 413.
func readJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &apiError{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("the request body exceeds %d bytes", mb.Limit), typ: "invalid_request_error", code: "request_too_large"}
		}
		return badRequest("", "reading the request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return badRequest("", "the request body is empty; want a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te) && te.Field == "":
			return badRequest("", "the request body must be a JSON object, not %s", te.Value)
		case errors.As(err, &te):
			field := strings.TrimPrefix(te.Field, "samplingFields.") // embedded fields are the request's own
			return badRequest(field, "wrong type for %s: got %s, want %s", field, te.Value, jsonKind(te.Type.String()))
		case errors.As(err, &se):
			return badRequest("", "invalid JSON at offset %d: %v", se.Offset, err)
		default:
			return badRequest("", "invalid request: %v", err)
		}
	}
	return nil
}

// jsonKind names a Go type as a JSON kind for error messages.
func jsonKind(goType string) string {
	goType = strings.TrimPrefix(goType, "*")
	switch {
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return "an integer"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "map") || strings.HasPrefix(goType, "struct"):
		return "an object"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	}
	return goType
}

// absent reports whether a raw JSON field was left out or is null.
func absent(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// parseStop accepts null, a string or a list of strings.
func parseStop(raw json.RawMessage, param string) ([]string, error) {
	if absent(raw) {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest(param, "%s must be a string or a list of strings", param)
	}
	return many, nil
}

// plan is a validated generation request.
type plan struct {
	prompt     []int32
	promptText string
	opts       generate.Options
	stops      []string
	stream     bool
	usage      bool // stream_options.include_usage
	logprobs   bool
	topLP      int
}

// samplerParams layers the request's sampling fields over the server's
// defaults and validates them.
func (s *Server) samplerParams(f *samplingFields) (sampler.Params, error) {
	d := s.cfg.Sampling
	var p sampler.Params
	pickF := func(v, def *float64) float64 {
		if v != nil {
			return *v
		}
		if def != nil {
			return *def
		}
		return 0
	}
	p.Temperature = pickF(f.Temperature, d.Temperature)
	p.TopP = pickF(f.TopP, d.TopP)
	p.MinP = pickF(f.MinP, d.MinP)
	p.RepetitionPenalty = pickF(f.RepetitionPenalty, d.RepetitionPenalty)
	switch {
	case f.TopK != nil:
		p.TopK = *f.TopK
	case d.TopK != nil:
		p.TopK = *d.TopK
	}
	if p.TopK < 0 && f.TopK != nil {
		if *f.TopK == -1 { // vLLM and mlx-lm spell "off" as -1
			p.TopK = 0
		}
	}
	if f.RepetitionContextSize != nil {
		if *f.RepetitionContextSize <= 0 {
			return p, badRequest("repetition_context_size", "repetition_context_size must be ≥ 1")
		}
		p.RepetitionContextSize = *f.RepetitionContextSize
	}
	for _, pen := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"presence_penalty", f.PresencePenalty, &p.PresencePenalty}, {"frequency_penalty", f.FrequencyPenalty, &p.FrequencyPenalty}} {
		if pen.v == nil {
			continue
		}
		if *pen.v < -2 || *pen.v > 2 {
			return p, badRequest(pen.name, "%s must be in [-2, 2], got %v", pen.name, *pen.v)
		}
		*pen.dst = *pen.v
	}
	if f.Seed != nil {
		seed := uint64(*f.Seed)
		p.Seed = &seed
	}
	if len(f.LogitBias) > 0 {
		p.LogitBias = map[int]float64{}
		for k, v := range f.LogitBias {
			id, err := strconv.Atoi(k)
			if err != nil {
				return p, badRequest("logit_bias", "logit_bias keys must be token ids, got %q", k)
			}
			if v < -100 || v > 100 {
				return p, badRequest("logit_bias", "logit_bias values must be in [-100, 100], got %v for token %d", v, id)
			}
			p.LogitBias[id] = v
		}
	}
	if err := p.Validate(s.cfg.Model.VocabSize()); err != nil {
		var pe *sampler.ParamError
		if errors.As(err, &pe) {
			return p, badRequest(pe.Field, "invalid %s: %v", pe.Field, err)
		}
		return p, badRequest("", "%v", err)
	}
	return p, nil
}

// commonPlan validates the fields every OpenAI endpoint shares and fills
// what it can of a plan (the prompt is set by the caller before).
func (s *Server) commonPlan(f *samplingFields, pl *plan, logprobs bool, topLP int) error {
	if err := s.checkModel(f.Model); err != nil {
		return err
	}
	if f.N != nil && *f.N != 1 {
		return badRequest("n", "only n = 1 is supported, got %d", *f.N)
	}
	pl.stream = f.Stream != nil && *f.Stream
	if f.StreamOptions != nil {
		if !pl.stream {
			return badRequest("stream_options", "stream_options is only allowed when stream is true")
		}
		pl.usage = f.StreamOptions.IncludeUsage != nil && *f.StreamOptions.IncludeUsage
	}
	stops, err := parseStop(f.Stop, "stop")
	if err != nil {
		return err
	}
	pl.stops = stops
	if topLP < 0 || topLP > 20 {
		return badRequest("top_logprobs", "top_logprobs must be in [0, 20], got %d", topLP)
	}
	pl.logprobs, pl.topLP = logprobs, topLP
	params, err := s.samplerParams(f)
	if err != nil {
		return err
	}
	params.Logprobs, params.TopLogprobs = logprobs, topLP
	maxTok := f.MaxCompletionTokens
	if maxTok == nil {
		maxTok = f.MaxTokens
	}
	param := "max_tokens"
	if f.MaxCompletionTokens != nil {
		param = "max_completion_tokens"
	}
	if maxTok != nil && *maxTok < 1 {
		return badRequest(param, "%s must be ≥ 1, got %d", param, *maxTok)
	}
	n := s.cfg.MaxTokens
	if maxTok != nil {
		n = *maxTok
	}
	if c := s.cfg.ContextLength; c > 0 {
		switch {
		case len(pl.prompt) >= c:
			return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("the prompt is %d tokens; the model's context is %d", len(pl.prompt), c), typ: "invalid_request_error", param: "messages", code: "context_length_exceeded"}
		case maxTok != nil && len(pl.prompt)+n > c:
			return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("the prompt (%d tokens) plus %s (%d) exceed the model's context of %d tokens", len(pl.prompt), param, n, c), typ: "invalid_request_error", param: param, code: "context_length_exceeded"}
		case len(pl.prompt)+n > c:
			n = c - len(pl.prompt)
		}
	}
	g, err := s.constraint(f.ResponseFormat, f.StructuredOutputs)
	if err != nil {
		return err
	}
	pl.opts = generate.Options{MaxTokens: n, EOS: s.cfg.EOS, PrefillChunkSize: s.cfg.PrefillChunkSize,
		Sampler: params, Grammar: g, Backend: s.cfg.Backend, Memory: s.cfg.Memory}
	return nil
}

// encodePrompt tokenizes rendered text; like mlx-lm, BOS is added only when
// the text does not already start with it.
func (s *Server) encodePrompt(text string, addSpecial bool) []int32 {
	if bos := s.cfg.Tokenizer.Config.SpecialTokens["bos_token"]; bos != "" && strings.HasPrefix(text, bos) {
		addSpecial = false
	}
	ids := s.cfg.Tokenizer.Encode(text, addSpecial)
	out := make([]int32, len(ids))
	for i, v := range ids {
		out[i] = int32(v)
	}
	return out
}

// checkPrompt rejects empty prompts and ids the model does not have.
func (s *Server) checkPrompt(ids []int32, param string) error {
	if len(ids) == 0 {
		return badRequest(param, "the prompt is empty (encodes to no tokens)")
	}
	v := s.cfg.Model.VocabSize()
	for _, id := range ids {
		if id < 0 || int(id) >= v {
			return badRequest(param, "token id %d is outside the vocabulary [0, %d)", id, v)
		}
	}
	return nil
}

// renderChat applies the chat template (or a plain layout without one).
func (s *Server) renderChat(msgs []map[string]any, tools []json.RawMessage, kwargs map[string]any) (string, error) {
	kw := map[string]any{}
	for k, v := range s.cfg.TemplateKwargs {
		kw[k] = v
	}
	for k, v := range kwargs {
		kw[k] = v
	}
	if s.cfg.Template == nil {
		var b strings.Builder
		for _, m := range msgs {
			c, _ := m["content"].(string)
			fmt.Fprintf(&b, "%s: %s\n", m["role"], c)
		}
		b.WriteString("assistant:")
		return b.String(), nil
	}
	var t any
	if len(tools) > 0 {
		t = tools
	}
	out, err := s.cfg.Template.Render(tokenizer.ChatRequest{Messages: msgs, Tools: t, AddGenerationPrompt: true, Kwargs: kw})
	if err != nil {
		var te *tokenizer.TemplateError
		if errors.As(err, &te) {
			return "", badRequest("messages", "the chat template rejected the request: %s", te.Message)
		}
		return "", badRequest("messages", "chat template: %v", err)
	}
	return out, nil
}
