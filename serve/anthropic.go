package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// writeAnthropicError writes Anthropic's error shape, which its SDK parses.
func writeAnthropicError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{status: http.StatusInternalServerError, message: err.Error()}
	}
	typ := map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
		405: "invalid_request_error", 408: "timeout_error", 413: "request_too_large", 415: "invalid_request_error",
		429: "rate_limit_error", 503: "overloaded_error"}[ae.status]
	if typ == "" {
		typ = "api_error"
	}
	if ae.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	msg := ae.message
	if ae.status >= 500 {
		msg = scrubPaths(msg)
	}
	writeJSON(w, ae.status, newAnthropicError(typ, msg))
}

func newAnthropicError(typ, message string) anthropicError {
	e := anthropicError{Type: "error"}
	e.Error.Type, e.Error.Message = typ, message
	return e
}

// blocks decodes an anthropicContent.
func blocks(raw json.RawMessage, param string) (anthropicContent, error) {
	var c anthropicContent
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, badRequest(param, "%s must be a string or a list of content blocks", param)
	}
	return c, nil
}

// anthropicMessages converts Anthropic messages (and system) to the
// OpenAI-style messages chat templates read: a message's tool_use blocks
// become its tool_calls, each tool_result block a tool message.
func anthropicMessages(system, raw json.RawMessage) ([]templateMessage, error) {
	return anthropicMessagesMedia(system, raw, nil)
}

// anthropicMessagesMedia is anthropicMessages reading image blocks into
// c (media.go); a nil c refuses them.
func anthropicMessagesMedia(system, raw json.RawMessage, c *mediaCollector) ([]templateMessage, error) {
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
	var msgs []anthropicMessage
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
		var calls []templateToolCall
		for k, b := range bs {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "thinking":
				thinking.WriteString(b.Thinking)
			case "redacted_thinking":
			case "image":
				ph, err := c.anthropicImage(b, fmt.Sprintf("%s.content[%d]", param, k))
				if err != nil {
					return nil, err
				}
				text.WriteString(ph)
			case "tool_use":
				args := b.Input
				if absent(args) {
					args = json.RawMessage("{}")
				}
				calls = append(calls, templateToolCall{ID: b.ID, Type: "function", Function: templateFunction{Name: b.Name, Arguments: args}})
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

// anthropicTools converts Anthropic tool definitions to OpenAI's shape and
// reads tool_choice: any and tool force a call, none drops the tools.
func anthropicTools(raw, choice json.RawMessage) ([]json.RawMessage, []toolDef, toolChoiceMode, error) {
	var mode toolChoiceMode
	var tc anthropicToolChoice
	if !absent(choice) {
		if err := json.Unmarshal(choice, &tc); err != nil {
			return nil, nil, mode, badRequest("tool_choice", "tool_choice must be {type: auto | any | tool | none}")
		}
		switch tc.Type {
		case "auto", "none":
		case "any":
			mode.forced = true
		case "tool":
			if tc.Name == "" {
				return nil, nil, mode, badRequest("tool_choice.name", "tool_choice of type tool needs a name")
			}
			mode.forced = true
		default:
			return nil, nil, mode, badRequest("tool_choice.type", "tool_choice.type must be auto, any, tool or none, got %q", tc.Type)
		}
		mode.single = tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse
	}
	if absent(raw) {
		if mode.forced {
			return nil, nil, mode, badRequest("tool_choice", "tool_choice %q needs tools", tc.Type)
		}
		return nil, nil, mode, nil
	}
	var tools []anthropicTool
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, nil, mode, badRequest("tools", "tools must be a list of {name, description, input_schema}")
	}
	if tc.Type == "none" {
		return nil, nil, toolChoiceMode{}, nil
	}
	var out []json.RawMessage
	var defs []toolDef
	for i, t := range tools {
		if t.Name == "" {
			return nil, nil, mode, badRequest(fmt.Sprintf("tools[%d].name", i), "a tool needs a name")
		}
		if tc.Type == "tool" && tc.Name != t.Name {
			continue
		}
		b, _ := json.Marshal(functionTool{Type: "function", Function: functionDef{Name: t.Name, Description: t.Description, Parameters: t.InputSchema}})
		out = append(out, b)
		defs = append(defs, toolDef{name: t.Name, params: t.InputSchema})
	}
	if tc.Type == "tool" && len(out) == 0 {
		return nil, nil, mode, badRequest("tool_choice", "tool_choice names %q, which is not among the tools", tc.Name)
	}
	return out, defs, mode, nil
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if err := readJSON(r, &req); err != nil {
		writeAnthropicError(w, err)
		return
	}
	pl, parser, err := s.messagesPlan(&req)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	id := newCallID("msg_")
	if pl.stream {
		s.streamMessages(w, r, pl, parser, id)
		return
	}
	res, err := s.collect(r.Context(), pl)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	d := parser.Feed(res.text)
	d.add(parser.Finish())
	var content []contentBlock
	if d.reasoning != "" {
		content = append(content, thinkingBlock{Type: "thinking", Thinking: d.reasoning, Signature: new("")})
	}
	if d.content != "" || len(d.calls) == 0 {
		content = append(content, textBlock{Type: "text", Text: d.content})
	}
	for _, c := range d.calls {
		content = append(content, toolUseBlock{Type: "tool_use", ID: toolUseID(c), Name: c.Name, Input: json.RawMessage(c.Arguments)})
	}
	writeJSON(w, http.StatusOK, anthropicResponse{ID: id, Type: "message", Role: "assistant", Model: s.cfg.ModelID,
		Content: content, StopReason: new(stopReason(res.outcome, len(d.calls) > 0)), StopSequence: stopSeq(res.outcome),
		Usage: messagesUsage(res.outcome)})
}

// toolUseID is a parsed call's id in Anthropic's style.
func toolUseID(c toolCall) string { return "toolu_" + strings.TrimPrefix(c.ID, "call_") }

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

// stopSeq is the stop sequence that ended a generation (nil: none did).
func stopSeq(o outcome) *string {
	if o.stopStr == "" {
		return nil
	}
	return &o.stopStr
}

// messagesUsage is an outcome's Anthropic usage.
func messagesUsage(o outcome) anthropicUsage {
	return anthropicUsage{InputTokens: o.stats.PromptTokens - o.stats.CachedTokens, OutputTokens: o.stats.GeneratedTokens,
		CacheReadInputTokens: new(o.stats.CachedTokens), CacheCreationInputTokens: new(0), Lane: o.lane, Speculation: o.stats.Speculation}
}

// messagesPrompt renders and encodes a messages request's prompt (what
// count_tokens counts).
func (s *Server) messagesPrompt(req *messagesRequest) (string, []int32, []toolDef, toolChoiceMode, *planMedia, error) {
	var mode toolChoiceMode
	if err := s.checkModel(req.Model); err != nil {
		return "", nil, nil, mode, nil, err
	}
	mc := s.mediaCollector()
	msgs, err := anthropicMessagesMedia(req.System, req.Messages, mc)
	if err != nil {
		return "", nil, nil, mode, nil, err
	}
	tools, defs, mode, err := anthropicTools(req.Tools, req.ToolChoice)
	if err != nil {
		return "", nil, nil, mode, nil, err
	}
	var kwargs map[string]any
	if req.Thinking != nil {
		kwargs = map[string]any{"enable_thinking": req.Thinking.Type == "enabled"}
	}
	text, err := s.renderChat(msgs, tools, kwargs)
	if err != nil {
		return "", nil, nil, mode, nil, err
	}
	ids, err := s.encodePromptChecked(text, true, "messages")
	if err != nil {
		return "", nil, nil, mode, nil, err
	}
	ids, pm, err := s.expandMedia(ids, mc, "messages")
	if err != nil {
		return "", nil, nil, mode, nil, err
	}
	if err := s.checkPrompt(ids, "messages"); err != nil {
		return "", nil, nil, mode, nil, err
	}
	return text, ids, defs, mode, pm, nil
}

func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	var req messagesRequest
	if err := readJSON(r, &req); err != nil {
		writeAnthropicError(w, err)
		return
	}
	_, ids, _, _, _, err := s.messagesPrompt(&req)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, countTokensResponse{InputTokens: len(ids)})
}

func (s *Server) messagesPlan(req *messagesRequest) (*plan, *outputParser, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, nil, err
	}
	if req.MaxTokens == nil {
		return nil, nil, badRequest("max_tokens", "max_tokens is required")
	}
	text, ids, defs, mode, pm, err := s.messagesPrompt(req)
	if err != nil {
		return nil, nil, err
	}
	pl := &plan{promptText: text, prompt: ids, media: pm}
	f := samplingFields{Model: req.Model, MaxTokens: req.MaxTokens, Temperature: req.Temperature, TopP: req.TopP, TopK: req.TopK, Stream: req.Stream, Adapter: req.Adapter}
	if len(req.StopSequences) > 0 {
		f.Stop, _ = json.Marshal(req.StopSequences)
	}
	if err := checkRanges(&f, 1); err != nil {
		return nil, nil, err
	}
	if req.TopK != nil && *req.TopK < 0 {
		return nil, nil, badRequest("top_k", "top_k must be ≥ 0, got %d", *req.TopK)
	}
	if err := s.commonPlan(&f, pl, false, 0); err != nil {
		return nil, nil, err
	}
	parser, err := s.toolPlan(pl, defs, mode, text)
	return pl, parser, err
}

func (s *Server) streamMessages(w http.ResponseWriter, r *http.Request, pl *plan, parser *outputParser, id string) {
	ctx := r.Context()
	j, err := s.start(ctx, pl)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	var out *sse
	// message_start waits for the engine's first event, which says how
	// much of the prompt the cache supplied: its usage then agrees with
	// message_delta's.
	begin := func(cached int) error {
		out = newSSE(w)
		start := messageStartEvent{Type: "message_start", Message: anthropicResponse{ID: id, Type: "message", Role: "assistant",
			Model: s.cfg.ModelID, Content: []contentBlock{}, Usage: anthropicUsage{InputTokens: len(pl.prompt) - cached,
				CacheReadInputTokens: new(cached), CacheCreationInputTokens: new(0)}}}
		return out.send("message_start", start)
	}
	index, open := -1, "" // the open block's index and type
	closeBlock := func() error {
		if open == "" {
			return nil
		}
		open = ""
		return out.send("content_block_stop", blockStopEvent{Type: "content_block_stop", Index: index})
	}
	openBlock := func(typ string, block contentBlock) error {
		if err := closeBlock(); err != nil {
			return err
		}
		index++
		open = typ
		return out.send("content_block_start", blockStartEvent{Type: "content_block_start", Index: index, ContentBlock: block})
	}
	sendDelta := func(d blockDelta) error {
		return out.send("content_block_delta", blockDeltaEvent{Type: "content_block_delta", Index: index, Delta: d})
	}
	calls := 0
	emit := func(d delta) error {
		if d.reasoning != "" {
			if open != "thinking" {
				if err := openBlock("thinking", thinkingBlock{Type: "thinking"}); err != nil {
					return err
				}
			}
			if err := sendDelta(thinkingDelta{Type: "thinking_delta", Thinking: d.reasoning}); err != nil {
				return err
			}
		}
		if d.content != "" {
			if open != "text" {
				if err := openBlock("text", textBlock{Type: "text"}); err != nil {
					return err
				}
			}
			if err := sendDelta(textDelta{Type: "text_delta", Text: d.content}); err != nil {
				return err
			}
		}
		for _, c := range d.calls {
			calls++
			if err := openBlock("tool_use", toolUseBlock{Type: "tool_use", ID: toolUseID(c), Name: c.Name, Input: json.RawMessage("{}")}); err != nil {
				return err
			}
			if err := sendDelta(inputJSONDelta{Type: "input_json_delta", PartialJSON: c.Arguments}); err != nil {
				return err
			}
			if err := closeBlock(); err != nil {
				return err
			}
		}
		return nil
	}
	for ev := range events(ctx, j) {
		if out == nil {
			if ev.done != nil && ev.done.err != nil { // failed before it started: a plain error
				writeAnthropicError(w, genError(ev.done.err))
				return
			}
			cached := 0
			if ev.cached != nil {
				cached = *ev.cached
			}
			if begin(cached) != nil {
				return
			}
		}
		if ev.text != "" && emit(parser.Feed(ev.text)) != nil {
			return
		}
		if ev.done == nil {
			continue
		}
		if ev.done.err != nil {
			if ev.done.reason != "" { // a row cut off at shutdown: the message ends, then the error says why
				if closeBlock() != nil {
					return
				}
				md := messageDeltaEvent{Type: "message_delta", Usage: messagesUsage(*ev.done)}
				md.Delta.StopReason = stopReason(*ev.done, calls > 0)
				if out.send("message_delta", md) != nil {
					return
				}
			}
			_ = out.send("error", newAnthropicError("api_error", scrubPaths(genError(ev.done.err).message)))
			return
		}
		if emit(parser.Finish()) != nil {
			return
		}
		if index < 0 { // always at least one (possibly empty) text block
			if openBlock("text", textBlock{Type: "text"}) != nil {
				return
			}
		}
		if closeBlock() != nil {
			return
		}
		md := messageDeltaEvent{Type: "message_delta", Usage: messagesUsage(*ev.done)}
		md.Delta.StopReason, md.Delta.StopSequence = stopReason(*ev.done, calls > 0), stopSeq(*ev.done)
		_ = out.send("message_delta", md)
		_ = out.send("message_stop", messageStopEvent{Type: "message_stop"})
	}
}
