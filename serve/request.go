package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/grammar"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// readJSON reads the body into v, mapping failures to 400 / 413.
func readJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &apiError{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("the request body exceeds %d bytes", mb.Limit), typ: "invalid_request_error", code: "request_too_large"}
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return &apiError{status: http.StatusRequestTimeout, message: "the request body did not arrive in time", typ: "invalid_request_error", code: "request_timeout"}
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
			return badRequest(field, "wrong type for %s: got %s, want %s", field, te.Value, jsonKind(te.Type))
		case errors.As(err, &se):
			return badRequest("", "invalid JSON at offset %d: %v", se.Offset, err)
		default:
			return badRequest("", "invalid request: %v", err)
		}
	}
	if fc, ok := v.(fieldChecker); ok {
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) == nil {
			return fc.checkFields(m)
		}
	}
	return nil
}

// fieldChecker is a request body that refuses members the server does
// not implement, instead of ignoring them: a client asking for them would
// otherwise get a reply that silently lacks what it asked for.
type fieldChecker interface {
	checkFields(members map[string]json.RawMessage) error
}

// refuseFields is the 400 for the first of names present and not null.
func refuseFields(m map[string]json.RawMessage, names ...string) error {
	for _, n := range names {
		if !absent(m[n]) {
			return badRequest(n, "%s is not supported by this server", n)
		}
	}
	return nil
}

func (*chatRequest) checkFields(m map[string]json.RawMessage) error {
	if err := refuseFields(m, "functions", "function_call", "audio", "prediction", "web_search_options"); err != nil {
		return err
	}
	if raw := m["modalities"]; !absent(raw) {
		var mods []string
		if json.Unmarshal(raw, &mods) != nil || len(mods) != 1 || mods[0] != "text" {
			return badRequest("modalities", `modalities other than ["text"] are not supported`)
		}
	}
	return nil
}

func (*messagesRequest) checkFields(m map[string]json.RawMessage) error {
	return refuseFields(m, "mcp_servers", "container")
}

// jsonKind names the JSON kind a Go type decodes from, for error messages.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return t.String()
}

// absent reports whether a raw JSON field was left out or is null.
func absent(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// parseStop decodes a stopList member.
func parseStop(raw json.RawMessage, param string) ([]string, error) {
	if absent(raw) {
		return nil, nil
	}
	var stops stopList
	if err := json.Unmarshal(raw, &stops); err != nil {
		return nil, badRequest(param, "%s must be a string or a list of strings", param)
	}
	return stops, nil
}

// plan is a validated generation request.
type plan struct {
	n          int // choices (n), run one after another
	prompt     []int32
	promptText string
	opts       generate.Options
	stops      []string
	stream     bool
	usage      bool // stream_options.include_usage
	logprobs   bool
	topLP      int
	media      *planMedia // images and audio (media.go); nil for text
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

// maxChoices bounds n.
const maxChoices = 16

// choicePlan is the plan of choice i of an n > 1 request: the same, with
// seed+i when seeded (so that the choices differ) and its own grammar
// matcher.
func (pl *plan) choicePlan(i int) *plan {
	if i == 0 {
		return pl
	}
	c := *pl
	if sd := pl.opts.Sampler.Seed; sd != nil {
		seed := *sd + uint64(i)
		c.opts.Sampler.Seed = &seed
	}
	if m, ok := pl.opts.Grammar.(interface{ Fork() grammar.TokenMatcher }); ok {
		if g, ok := m.Fork().(generate.Grammar); ok {
			c.opts.Grammar = g
		}
	}
	return &c
}

// checkRanges refuses sampling values outside the API's documented
// ranges: temperature in [0, maxTemp] (OpenAI 2, Anthropic 1), top_p in
// (0, 1].
func checkRanges(f *samplingFields, maxTemp float64) error {
	if t := f.Temperature; t != nil && (*t < 0 || *t > maxTemp) {
		return badRequest("temperature", "temperature must be in [0, %g], got %v", maxTemp, *t)
	}
	if p := f.TopP; p != nil && (*p <= 0 || *p > 1) {
		return badRequest("top_p", "top_p must be in (0, 1], got %v", *p)
	}
	return nil
}

// commonPlan validates the fields every OpenAI endpoint shares and fills
// what it can of a plan (the prompt is set by the caller before).
func (s *Server) commonPlan(f *samplingFields, pl *plan, logprobs bool, topLP int) error {
	if err := s.checkModel(f.Model); err != nil {
		return err
	}
	pl.n = 1
	if f.N != nil {
		if *f.N < 1 || *f.N > maxChoices {
			return badRequest("n", "n must be in [1, %d], got %d", maxChoices, *f.N)
		}
		pl.n = *f.N
	}
	pl.stream = f.Stream != nil && *f.Stream
	if pl.stream && pl.n > 1 {
		return badRequest("n", "n > 1 cannot be streamed; leave out stream or n")
	}
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
	set, err := s.parseAdapter(f.Adapter)
	if err != nil {
		return err
	}
	pl.opts = generate.Options{MaxTokens: n, EOS: s.cfg.EOS, PrefillChunkSize: s.cfg.PrefillChunkSize,
		Sampler: params, Grammar: g, Backend: s.cfg.Backend, Memory: s.cfg.Memory, Adapters: set, Speculation: s.cfg.Speculation}
	return nil
}

// precountChunk is the piece size encodePrompt counts an oversized
// prompt's tokens in.
const precountChunk = 64 << 10

// errPromptTooLong is the 400 for a prompt that cannot fit the context.
func (s *Server) errPromptTooLong(n int, param string) error {
	return &apiError{status: http.StatusBadRequest, message: fmt.Sprintf("the prompt is at least %d tokens; the model's context is %d", n, s.cfg.ContextLength),
		typ: "invalid_request_error", param: param, code: "context_length_exceeded"}
}

// encodePromptChecked is encodePrompt with bounded work for oversized
// text: a text longer than a few chunks is first counted chunk by chunk
// (cut at blanks), and refused as soon as the count passes the context by
// more than the chunk boundaries could account for, so a 30 MB prompt
// costs the tokenization of about the context's length, not of 30 MB.
func (s *Server) encodePromptChecked(text string, addSpecial bool, param string) ([]int32, error) {
	c := s.cfg.ContextLength
	if c > 0 && len(text) > 4*precountChunk && len(text) > 2*c {
		n, chunks := 0, 0
		for rest := text; rest != ""; chunks++ {
			cut := min(len(rest), precountChunk)
			if cut < len(rest) {
				if i := strings.LastIndexAny(rest[:cut], " \n"); i > cut/2 {
					cut = i + 1
				}
			}
			n += len(s.cfg.Tokenizer.Encode(rest[:cut], false))
			rest = rest[cut:]
			if n > c+16*(chunks+1) {
				return nil, s.errPromptTooLong(n-16*(chunks+1), param)
			}
		}
	}
	return s.encodePrompt(text, addSpecial), nil
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

// templateMessage is a message as chat templates read it: a dict in
// OpenAI's message shape (role, content as text, tool_calls as
// []templateToolCall, reasoning_content, tool_call_id) plus every other
// member the client sent, passed through unread: that is why it is a map
// and not a wire struct. encoding/json writes its keys sorted, which is the
// order a template's tojson sees.
type templateMessage map[string]any

// templateToolCall is a tool call as chat templates read it: arguments as
// an object, which templates print with tojson or iterate. Its members are
// in alphabetical order like templateMessage's keys, so that a template's
// tojson of a call prints what it printed when calls were maps (the
// rendered prompt, and with it the prompt cache, stays the same).
type templateToolCall struct {
	Function templateFunction `json:"function"`
	ID       string           `json:"id"`
	Type     string           `json:"type"`
}

// templateFunction is a templateToolCall's function.
type templateFunction struct {
	Arguments json.RawMessage `json:"arguments"`
	Name      string          `json:"name"`
}

// renderChat applies the chat template (or a plain layout without one).
func (s *Server) renderChat(msgs []templateMessage, tools []json.RawMessage, kwargs map[string]any) (string, error) {
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
