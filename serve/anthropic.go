package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// messagesRequest is Anthropic's POST /v1/messages body.
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	Messages      json.RawMessage `json:"messages"`
	System        json.RawMessage `json:"system"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Stream        *bool           `json:"stream"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	Thinking      *struct {
		Type string `json:"type"`
	} `json:"thinking"`
}

// anthropicError writes Anthropic's error shape, which its SDK parses.
func anthropicError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, message: err.Error()}
	}
	typ := map[int]string{400: "invalid_request_error", 404: "not_found_error", 405: "invalid_request_error",
		413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}[ae.status]
	if typ == "" {
		typ = "api_error"
	}
	if ae.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, ae.status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": ae.message}})
}

// anthropicBlock is one content block of a message.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	Thinking  string          `json:"thinking"`
}

// blocks decodes content: a string or a list of blocks.
func blocks(raw json.RawMessage, param string) ([]anthropicBlock, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	}
	var bs []anthropicBlock
	if err := json.Unmarshal(raw, &bs); err != nil {
		return nil, badRequest(param, "%s must be a string or a list of content blocks", param)
	}
	return bs, nil
}

// anthropicMessages converts Anthropic messages (and system) to the
// OpenAI-style messages chat templates read.
func anthropicMessages(system, raw json.RawMessage) ([]templateMessage, error) {
	var out []templateMessage
	if !absent(system) {
		bs, err := blocks(system, "system")
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for _, bl := range bs {
			b.WriteString(bl.Text)
		}
		out = append(out, templateMessage{"role": "system", "content": b.String()})
	}
	if absent(raw) {
		return nil, badRequest("messages", "messages is required")
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, badRequest("messages", "messages must be a list of {role, content}")
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, badRequest(param+".role", "role must be user or assistant, got %q", m.Role)
		}
		bs, err := blocks(m.Content, param+".content")
		if err != nil {
			return nil, err
		}
		var text, thinking strings.Builder
		var calls []any
		for k, b := range bs {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "thinking":
				thinking.WriteString(b.Thinking)
			case "redacted_thinking":
			case "tool_use":
				args := b.Input
				if absent(args) {
					args = json.RawMessage("{}")
				}
				calls = append(calls, map[string]any{"id": b.ID, "type": "function", "function": map[string]any{"name": b.Name, "arguments": args}})
			case "tool_result":
				res := ""
				if len(b.Content) > 0 {
					rb, err := blocks(b.Content, fmt.Sprintf("%s.content[%d].content", param, k))
					if err != nil {
						return nil, err
					}
					for _, r := range rb {
						res += r.Text
					}
				}
				out = append(out, templateMessage{"role": "tool", "tool_call_id": b.ToolUseID, "content": res})
			default:
				return nil, badRequest(fmt.Sprintf("%s.content[%d].type", param, k), "content blocks of type %q are unsupported", b.Type)
			}
		}
		if text.Len() > 0 || len(calls) > 0 || thinking.Len() > 0 || m.Role == "assistant" {
			msg := templateMessage{"role": m.Role, "content": text.String()}
			if len(calls) > 0 {
				msg["tool_calls"] = calls
			}
			if thinking.Len() > 0 {
				msg["reasoning_content"] = thinking.String()
			}
			out = append(out, msg)
		}
	}
	return out, nil
}

// anthropicTools converts Anthropic tool definitions to OpenAI's shape.
func anthropicTools(raw, choice json.RawMessage) ([]json.RawMessage, error) {
	if absent(raw) {
		return nil, nil
	}
	var tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, badRequest("tools", "tools must be a list of {name, description, input_schema}")
	}
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if !absent(choice) {
		if err := json.Unmarshal(choice, &tc); err != nil {
			return nil, badRequest("tool_choice", "tool_choice must be {type: auto | any | tool | none}")
		}
	}
	if tc.Type == "none" {
		return nil, nil
	}
	type fn struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var out []json.RawMessage
	for i, t := range tools {
		if t.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d].name", i), "a tool needs a name")
		}
		if tc.Type == "tool" && tc.Name != t.Name {
			continue
		}
		b, _ := json.Marshal(tool{Type: "function", Function: fn{t.Name, t.Description, t.InputSchema}})
		out = append(out, b)
	}
	if tc.Type == "tool" && len(out) == 0 {
		return nil, badRequest("tool_choice", "tool_choice names %q, which is not among the tools", tc.Name)
	}
	return out, nil
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if err := readJSON(r, &req); err != nil {
		anthropicError(w, err)
		return
	}
	pl, parser, err := s.messagesPlan(&req)
	if err != nil {
		anthropicError(w, err)
		return
	}
	id := newCallID("msg_")
	if pl.stream {
		s.streamMessages(w, r, pl, parser, id)
		return
	}
	res, err := s.collect(r.Context(), pl)
	if err != nil {
		anthropicError(w, err)
		return
	}
	d := parser.Feed(res.text)
	d.add(parser.Finish())
	var content []any
	if d.reasoning != "" {
		content = append(content, map[string]any{"type": "thinking", "thinking": d.reasoning, "signature": ""})
	}
	if d.content != "" || len(d.calls) == 0 {
		content = append(content, map[string]any{"type": "text", "text": d.content})
	}
	for _, c := range d.calls {
		content = append(content, map[string]any{"type": "tool_use", "id": "toolu_" + strings.TrimPrefix(c.ID, "call_"), "name": c.Name, "input": json.RawMessage(c.Arguments)})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": s.cfg.ModelID, "content": content,
		"stop_reason": stopReason(res.outcome, len(d.calls) > 0), "stop_sequence": stopSeq(res.outcome),
		"usage": anthropicUsage(res.outcome),
	})
}

func stopReason(o outcome, calls bool) string {
	switch {
	case calls:
		return "tool_use"
	case o.reason == "length":
		return "max_tokens"
	case o.stopStr != "":
		return "stop_sequence"
	}
	return "end_turn"
}

func stopSeq(o outcome) any {
	if o.stopStr == "" {
		return nil
	}
	return o.stopStr
}

func anthropicUsage(o outcome) map[string]any {
	return map[string]any{
		"input_tokens": o.stats.PromptTokens - o.stats.CachedTokens, "output_tokens": o.stats.GeneratedTokens,
		"cache_read_input_tokens": o.stats.CachedTokens, "cache_creation_input_tokens": 0,
	}
}

func (s *Server) messagesPlan(req *messagesRequest) (*plan, *outputParser, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, nil, err
	}
	if req.MaxTokens == nil {
		return nil, nil, badRequest("max_tokens", "max_tokens is required")
	}
	msgs, err := anthropicMessages(req.System, req.Messages)
	if err != nil {
		return nil, nil, err
	}
	tools, err := anthropicTools(req.Tools, req.ToolChoice)
	if err != nil {
		return nil, nil, err
	}
	var kwargs map[string]any
	if req.Thinking != nil {
		kwargs = map[string]any{"enable_thinking": req.Thinking.Type == "enabled"}
	}
	text, err := s.renderChat(msgs, tools, kwargs)
	if err != nil {
		return nil, nil, err
	}
	pl := &plan{promptText: text, prompt: s.encodePrompt(text, true)}
	if err := s.checkPrompt(pl.prompt, "messages"); err != nil {
		return nil, nil, err
	}
	f := samplingFields{Model: req.Model, MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Stream: req.Stream}
	if len(req.StopSequences) > 0 {
		f.Stop, _ = json.Marshal(req.StopSequences)
	}
	if err := s.commonPlan(&f, pl, false, 0); err != nil {
		return nil, nil, err
	}
	return pl, newOutputParser(s.format, len(tools) > 0, s.format.promptOpensThinking(text)), nil
}

func (s *Server) streamMessages(w http.ResponseWriter, r *http.Request, pl *plan, parser *outputParser, id string) {
	ctx := r.Context()
	j, err := s.start(ctx, pl)
	if err != nil {
		anthropicError(w, err)
		return
	}
	out := newSSE(w)
	start := map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": s.cfg.ModelID, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": len(pl.prompt), "output_tokens": 0},
	}}
	if out.send("message_start", start) != nil {
		return
	}
	index, open := -1, "" // the open block's index and type
	closeBlock := func() error {
		if open == "" {
			return nil
		}
		open = ""
		return out.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
	}
	openBlock := func(typ string, block map[string]any) error {
		if err := closeBlock(); err != nil {
			return err
		}
		index++
		open = typ
		return out.send("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": block})
	}
	calls := 0
	emit := func(d delta) error {
		if d.reasoning != "" {
			if open != "thinking" {
				if err := openBlock("thinking", map[string]any{"type": "thinking", "thinking": ""}); err != nil {
					return err
				}
			}
			if err := out.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "thinking_delta", "thinking": d.reasoning}}); err != nil {
				return err
			}
		}
		if d.content != "" {
			if open != "text" {
				if err := openBlock("text", map[string]any{"type": "text", "text": ""}); err != nil {
					return err
				}
			}
			if err := out.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "text_delta", "text": d.content}}); err != nil {
				return err
			}
		}
		for _, c := range d.calls {
			calls++
			if err := openBlock("tool_use", map[string]any{"type": "tool_use", "id": "toolu_" + strings.TrimPrefix(c.ID, "call_"), "name": c.Name, "input": map[string]any{}}); err != nil {
				return err
			}
			if err := out.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index, "delta": map[string]any{"type": "input_json_delta", "partial_json": c.Arguments}}); err != nil {
				return err
			}
			if err := closeBlock(); err != nil {
				return err
			}
		}
		return nil
	}
	for ev := range events(ctx, j) {
		if ev.text != "" && emit(parser.Feed(ev.text)) != nil {
			return
		}
		if ev.done == nil {
			continue
		}
		if ev.done.err != nil {
			_ = out.send("error", map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": genError(ev.done.err).message}})
			return
		}
		if emit(parser.Finish()) != nil {
			return
		}
		if index < 0 { // always at least one (possibly empty) text block
			if openBlock("text", map[string]any{"type": "text", "text": ""}) != nil {
				return
			}
		}
		if closeBlock() != nil {
			return
		}
		_ = out.send("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stopReason(*ev.done, calls > 0), "stop_sequence": stopSeq(*ev.done)},
			"usage": anthropicUsage(*ev.done)})
		_ = out.send("message_stop", map[string]any{"type": "message_stop"})
	}
}
