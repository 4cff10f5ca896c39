package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// The OpenAI Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}). A request is translated into a chat request, so
// that prompt building, tools, tool_choice enforcement, structured output
// and sampling are the chat route's (chatPlan); errors name the
// Responses members. The reply is parsed by the same output parser and
// laid out as output items: reasoning, a message, function calls.

func (*responsesRequest) checkFields(m map[string]json.RawMessage) error {
	if err := refuseFields(m, "conversation", "prompt", "reasoning", "max_tool_calls", "top_logprobs"); err != nil {
		return err
	}
	if raw := m["background"]; !absent(raw) && string(raw) != "false" {
		return badRequest("background", "background responses are not supported by this server")
	}
	if raw := m["include"]; !absent(raw) {
		var inc []string
		if json.Unmarshal(raw, &inc) != nil || len(inc) > 0 {
			return badRequest("include", "include is not supported by this server")
		}
	}
	return nil
}

// responsesPrep is a validated Responses request: its plan and output
// parser, the conversation the reply continues (instructions aside) and
// the response object as it stands before the reply.
type responsesPrep struct {
	pl      *plan
	parser  *outputParser
	history []templateMessage
	obj     responseObject
	store   bool
}

// errResponseNotFound is the 404 for an unknown, expired or unstored id.
func errResponseNotFound(id, param string) error {
	if len(id) > 64 {
		id = id[:64] + "…"
	}
	return &apiError{status: http.StatusNotFound, message: fmt.Sprintf("no response found with id %q (unknown, expired, or created with store: false)", id),
		typ: "invalid_request_error", param: param, code: "response_not_found"}
}

// responsesParams maps the chat members chatPlan's errors name to the
// Responses members they came from.
var responsesParams = [][2]string{
	{"response_format.json_schema.schema", "text.format.schema"},
	{"response_format.type", "text.format.type"},
	{"response_format", "text.format"},
	{"max_tokens", "max_output_tokens"},
	{"messages", "input"},
}

// responsesError renames a chat error's param (and its mention in the
// message) to the Responses member.
func responsesError(err error) error {
	var ae *apiError
	if !errors.As(err, &ae) {
		return err
	}
	for _, p := range responsesParams {
		if ae.param == p[0] || strings.HasPrefix(ae.param, p[0]+".") || strings.HasPrefix(ae.param, p[0]+"[") {
			c := *ae
			c.param = p[1] + strings.TrimPrefix(ae.param, p[0])
			if p[0] != "messages" {
				c.message = strings.ReplaceAll(c.message, p[0], p[1])
			}
			return &c
		}
	}
	return err
}

func (s *Server) responsesPlan(req *responsesRequest) (*responsesPrep, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, err
	}
	var history []templateMessage
	var prevID *string
	if id := req.PreviousResponseID; id != nil && *id != "" {
		prev, ok := s.responses.get(*id)
		if !ok {
			return nil, errResponseNotFound(*id, "previous_response_id")
		}
		history, prevID = slices.Clone(prev.history), id
	}
	in, err := responsesInput(req.Input, history)
	if err != nil {
		return nil, err
	}
	history = append(history, in...)
	tools, choice, err := responsesTools(req.Tools, req.ToolChoice)
	if err != nil {
		return nil, err
	}
	rf, format, err := responsesFormat(req.Text)
	if err != nil {
		return nil, err
	}
	if req.Truncation != nil && *req.Truncation != "disabled" {
		return nil, badRequest("truncation", "truncation %q is not supported (only disabled)", *req.Truncation)
	}
	msgs := history
	if req.Instructions != nil && *req.Instructions != "" {
		msgs = append([]templateMessage{{"role": "system", "content": *req.Instructions}}, history...)
	}
	raw, err := json.Marshal(msgs)
	if err != nil {
		return nil, badRequest("input", "the conversation cannot be encoded: %v", err)
	}
	creq := chatRequest{samplingFields: samplingFields{Model: req.Model, MaxTokens: req.MaxOutputTokens, Temperature: req.Temperature,
		TopP: req.TopP, TopK: req.TopK, MinP: req.MinP, Seed: req.Seed, RepetitionPenalty: req.RepetitionPenalty,
		Stream: req.Stream, ResponseFormat: rf, Adapter: req.Adapter}, Messages: raw, Tools: tools, ToolChoice: choice, ParallelToolCalls: req.ParallelToolCalls}
	pl, parser, err := s.chatPlan(&creq)
	if err != nil {
		return nil, responsesError(err)
	}
	rp := &responsesPrep{pl: pl, parser: parser, history: history, store: req.Store == nil || *req.Store}
	rp.obj = responseObject{ID: newCallID("resp_"), Object: "response", CreatedAt: time.Now().Unix(), Status: "in_progress",
		Instructions: req.Instructions, MaxOutputTokens: req.MaxOutputTokens, Model: s.cfg.ModelID, Output: []any{},
		ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls, PreviousResponseID: prevID, Store: rp.store,
		Temperature: pickDefault(req.Temperature, s.cfg.Sampling.Temperature), TopP: pickDefault(req.TopP, s.cfg.Sampling.TopP),
		Text: responseTextOut{Format: format}, ToolChoice: json.RawMessage(`"auto"`), Tools: []json.RawMessage{}, Truncation: "disabled",
		Metadata: req.Metadata}
	if !absent(req.ToolChoice) {
		rp.obj.ToolChoice = req.ToolChoice
	}
	if !absent(req.Tools) {
		_ = json.Unmarshal(req.Tools, &rp.obj.Tools)
	}
	if rp.obj.Metadata == nil {
		rp.obj.Metadata = map[string]string{}
	}
	return rp, nil
}

// pickDefault is a sampling value as a response reports it: the
// request's, else the server's default, else 1 (OpenAI's).
func pickDefault(v, def *float64) float64 {
	switch {
	case v != nil:
		return *v
	case def != nil:
		return *def
	}
	return 1
}

// responsesInput turns input (a string, or a list of message,
// function_call, function_call_output and reasoning items) into chat
// messages. prior is the conversation of previous_response_id, whose
// calls name the functions of function_call_output items.
func responsesInput(raw json.RawMessage, prior []templateMessage) ([]templateMessage, error) {
	if absent(raw) {
		return nil, badRequest("input", "input is required")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []templateMessage{{"role": "user", "content": one}}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input", "input must be a string or a list of items")
	}
	if len(items) == 0 {
		return nil, badRequest("input", "input must not be an empty list")
	}
	names := map[string]string{} // call_id → function name
	for _, m := range prior {
		calls, _ := m["tool_calls"].([]templateToolCall)
		for _, c := range calls {
			names[c.ID] = c.Function.Name
		}
	}
	var out []templateMessage
	reasoning := "" // a reasoning item's text, for the assistant message after it
	assistant := func() templateMessage {
		if n := len(out); n > 0 && out[n-1]["role"] == "assistant" {
			return out[n-1]
		}
		m := templateMessage{"role": "assistant", "content": ""}
		out = append(out, m)
		return m
	}
	for i, rawItem := range items {
		param := fmt.Sprintf("input[%d]", i)
		var it responseItemIn
		if err := json.Unmarshal(rawItem, &it); err != nil {
			return nil, badRequest(param, "an input item must be an object {type, …} with string members")
		}
		switch it.Type {
		case "", "message":
			var content any
			var err error
			if it.Role == "assistant" {
				content, err = responsesContent(it.Content, param+".content")
			} else {
				content, err = responsesMessageContent(it.Content, param+".content")
			}
			if err != nil {
				return nil, err
			}
			text, _ := content.(string)
			switch it.Role {
			case "user", "system":
				out = append(out, templateMessage{"role": it.Role, "content": content})
			case "developer":
				out = append(out, templateMessage{"role": "system", "content": content})
			case "assistant":
				m := templateMessage{"role": "assistant", "content": text}
				if reasoning != "" {
					m["reasoning_content"], reasoning = reasoning, ""
				}
				out = append(out, m)
			case "":
				return nil, badRequest(param+".role", "a message item needs a role")
			default:
				return nil, badRequest(param+".role", "unknown role %q (want user, system, developer or assistant)", it.Role)
			}
		case "function_call":
			if it.Name == "" {
				return nil, badRequest(param+".name", "a function_call item needs a name")
			}
			if it.CallID == "" {
				return nil, badRequest(param+".call_id", "a function_call item needs a call_id")
			}
			args, err := callArguments(it.Arguments, param+".arguments")
			if err != nil {
				return nil, err
			}
			names[it.CallID] = it.Name
			m := assistant()
			if reasoning != "" {
				m["reasoning_content"], reasoning = reasoning, ""
			}
			calls, _ := m["tool_calls"].([]templateToolCall)
			m["tool_calls"] = append(calls, templateToolCall{ID: it.CallID, Type: "function", Function: templateFunction{Name: it.Name, Arguments: args}})
		case "function_call_output":
			if it.CallID == "" {
				return nil, badRequest(param+".call_id", "a function_call_output item needs a call_id")
			}
			text, err := responsesContent(it.Output, param+".output")
			if err != nil {
				return nil, err
			}
			m := templateMessage{"role": "tool", "tool_call_id": it.CallID, "content": text}
			if name, ok := names[it.CallID]; ok {
				m["name"] = name
			}
			out = append(out, m)
		case "reasoning":
			for _, p := range it.Summary {
				reasoning += p.Text
			}
			var parts []struct {
				Text string `json:"text"`
			}
			if !absent(it.Content) && json.Unmarshal(it.Content, &parts) != nil {
				return nil, badRequest(param+".content", "a reasoning item's content must be a list of {type: reasoning_text, text}")
			}
			for _, p := range parts {
				reasoning += p.Text
			}
		case "item_reference":
			return nil, badRequest(param+".type", "item_reference inputs are unsupported; send the items, or use previous_response_id")
		default:
			return nil, badRequest(param+".type", "input items of type %q are unsupported (want message, function_call, function_call_output or reasoning)", it.Type)
		}
	}
	return out, nil
}

// callArguments reads a function_call item's arguments: a JSON string
// holding an object (an object itself is accepted too).
func callArguments(raw json.RawMessage, param string) (json.RawMessage, error) {
	if absent(raw) {
		return json.RawMessage("{}"), nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return raw, nil // already JSON
	}
	if strings.TrimSpace(s) == "" {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid([]byte(s)) {
		return nil, badRequest(param, "arguments must be JSON text")
	}
	return json.RawMessage(s), nil
}

// responsesContent flattens an item's content (or a function_call_output's
// output) to text: a string, or a list of text parts (input_text,
// output_text, refusal).
func responsesContent(raw json.RawMessage, param string) (string, error) {
	if absent(raw) {
		return "", badRequest(param, "%s is required", param)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "%s must be a string or a list of content parts", param)
	}
	var b strings.Builder
	for k, p := range parts {
		text, err := responsesTextPart(p, fmt.Sprintf("%s[%d]", param, k))
		if err != nil {
			return "", err
		}
		b.WriteString(text)
	}
	return b.String(), nil
}

// responsesTextPart reads one text part (input_text, output_text, text or
// refusal) of a content list; param names the part.
func responsesTextPart(p map[string]json.RawMessage, param string) (string, error) {
	var typ string
	_ = json.Unmarshal(p["type"], &typ)
	member := "text"
	switch typ {
	case "input_text", "output_text", "text":
	case "refusal":
		member = "refusal"
	case "":
		return "", badRequest(param+".type", "a content part needs a type")
	default:
		return "", badRequest(param+".type", "content parts of type %q are unsupported (this server reads text only)", typ)
	}
	var text string
	if err := json.Unmarshal(p[member], &text); err != nil {
		return "", badRequest(param+"."+member, "a %s part needs a string %s", typ, member)
	}
	return text, nil
}

// responsesMessageContent is a user, system or developer message item's
// content for the chat route: text as responsesContent reads it or, when
// the list holds input_image (or input_audio) parts, the list in chat's
// shape — text parts, and image_url ({url}) and input_audio parts — for
// chatPlan's media collector to read (media.go), which also answers the
// 400s for media the model cannot take.
func responsesMessageContent(raw json.RawMessage, param string) (any, error) {
	var parts []map[string]json.RawMessage
	if absent(raw) || json.Unmarshal(raw, &parts) != nil || !slices.ContainsFunc(parts, func(p map[string]json.RawMessage) bool {
		var typ string
		_ = json.Unmarshal(p["type"], &typ)
		return typ == "input_image" || typ == "input_audio"
	}) {
		return responsesContent(raw, param)
	}
	out := make([]map[string]any, 0, len(parts))
	for k, p := range parts {
		kp := fmt.Sprintf("%s[%d]", param, k)
		var typ string
		_ = json.Unmarshal(p["type"], &typ)
		switch typ {
		case "input_image":
			if !absent(p["file_id"]) {
				return nil, badRequest(kp+".file_id", "input_image file_id is unsupported (this server has no files API): send image_url as a data: URL")
			}
			var url string
			if json.Unmarshal(p["image_url"], &url) != nil || url == "" {
				var obj struct {
					URL string `json:"url"`
				}
				if json.Unmarshal(p["image_url"], &obj) != nil || obj.URL == "" {
					return nil, badRequest(kp+".image_url", "an input_image part needs image_url: \"data:image/...;base64,...\"")
				}
				url = obj.URL
			}
			out = append(out, map[string]any{"type": "image_url", "image_url": map[string]string{"url": url}})
		case "input_audio":
			out = append(out, map[string]any{"type": "input_audio", "input_audio": p["input_audio"]})
		default:
			text, err := responsesTextPart(p, kp)
			if err != nil {
				return nil, err
			}
			out = append(out, map[string]any{"type": "text", "text": text})
		}
	}
	return out, nil
}

// responsesTools converts function tools ({type: function, name,
// description, parameters, strict}) and tool_choice to the chat shapes.
func responsesTools(raw, choice json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	var tools json.RawMessage
	if !absent(raw) {
		var list []map[string]json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, nil, badRequest("tools", "tools must be a list of {type: function, name, parameters}")
		}
		chat := make([]map[string]any, len(list))
		for i, t := range list {
			var typ, name string
			_ = json.Unmarshal(t["type"], &typ)
			if typ != "function" {
				return nil, nil, badRequest(fmt.Sprintf("tools[%d].type", i), "unsupported tool type %q (this server runs function tools only)", typ)
			}
			if json.Unmarshal(t["name"], &name) != nil || name == "" {
				return nil, nil, badRequest(fmt.Sprintf("tools[%d].name", i), "a function tool needs a name")
			}
			fn := map[string]json.RawMessage{}
			for _, k := range []string{"name", "description", "parameters", "strict"} {
				if !absent(t[k]) {
					fn[k] = t[k]
				}
			}
			chat[i] = map[string]any{"type": "function", "function": fn}
		}
		tools, _ = json.Marshal(chat)
	}
	if absent(choice) {
		return tools, nil, nil
	}
	var mode string
	if json.Unmarshal(choice, &mode) == nil {
		return tools, choice, nil
	}
	var named struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(choice, &named) != nil || named.Type != "function" || named.Name == "" {
		return nil, nil, badRequest("tool_choice", "tool_choice must be none, auto, required or {type: function, name}")
	}
	c, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": named.Name}})
	return tools, c, nil
}

// responsesFormat converts text.format to chat's response_format; it also
// returns the format the response reports.
func responsesFormat(raw json.RawMessage) (json.RawMessage, json.RawMessage, error) {
	plain := json.RawMessage(`{"type":"text"}`)
	if absent(raw) {
		return nil, plain, nil
	}
	var t struct {
		Format    json.RawMessage `json:"format"`
		Verbosity json.RawMessage `json:"verbosity"`
	}
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, nil, badRequest("text", "text must be {format: {type: text | json_object | json_schema}}")
	}
	if !absent(t.Verbosity) {
		return nil, nil, badRequest("text.verbosity", "text.verbosity is not supported by this server")
	}
	if absent(t.Format) {
		return nil, plain, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}
	if err := json.Unmarshal(t.Format, &f); err != nil {
		return nil, nil, badRequest("text.format", "text.format must be {type: text | json_object | json_schema, …}")
	}
	var rf any
	switch f.Type {
	case "text":
		return nil, t.Format, nil
	case "json_object":
		rf = map[string]string{"type": "json_object"}
	case "json_schema":
		if absent(f.Schema) {
			return nil, nil, badRequest("text.format.schema", "a json_schema format needs a schema")
		}
		rf = map[string]any{"type": "json_schema", "json_schema": jsonSchemaFormat{Name: f.Name, Schema: f.Schema, Strict: f.Strict}}
	default:
		return nil, nil, badRequest("text.format.type", "unsupported text.format type %q (want text, json_object or json_schema)", f.Type)
	}
	b, _ := json.Marshal(rf)
	return b, t.Format, nil
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	if err := readJSON(r, &req); err != nil {
		s.writeAPIError(w, err)
		return
	}
	rp, err := s.responsesPlan(&req)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	if rp.pl.stream {
		s.streamResponse(w, r, rp)
		return
	}
	res, err := s.collect(r.Context(), rp.pl)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	b := &outputBuilder{}
	d := rp.parser.Feed(res.text)
	d.add(rp.parser.Finish())
	_ = b.add(d)
	obj, _ := s.finishResponse(rp, b, res.outcome)
	writeJSON(w, http.StatusOK, obj)
}

// streamResponse streams a response as the Responses events, numbered
// in sequence: response.created and response.in_progress (sent with the
// engine's first event, so that a request that fails at once gets a plain
// error), then each output item's added, part, delta and done events, and
// response.completed (response.incomplete when max_output_tokens cut it;
// an error event and response.failed when generation fails).
func (s *Server) streamResponse(w http.ResponseWriter, r *http.Request, rp *responsesPrep) {
	ctx := r.Context()
	j, err := s.start(ctx, rp.pl)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	var out *sse
	seq := 0
	emit := func(ev responseEvent) error {
		ev.SequenceNumber = seq
		seq++
		return out.send(ev.Type, ev)
	}
	b := &outputBuilder{emit: emit}
	for ev := range events(ctx, j) {
		if out == nil {
			if ev.done != nil && ev.done.err != nil {
				s.writeAPIError(w, genError(ev.done.err))
				return
			}
			out = newSSE(w)
			created := rp.obj
			if emit(responseEvent{Type: "response.created", Response: &created}) != nil ||
				emit(responseEvent{Type: "response.in_progress", Response: &created}) != nil {
				return
			}
		}
		if ev.text != "" && b.add(rp.parser.Feed(ev.text)) != nil {
			return
		}
		if ev.done == nil {
			continue
		}
		if ev.done.err != nil {
			ae := genError(ev.done.err)
			msg := scrubPaths(ae.message)
			code := ae.code
			if code == "" {
				code = "server_error"
			}
			_ = emit(responseEvent{Type: "error", Code: &code, Message: msg})
			failed := rp.obj
			failed.Status, failed.Error = "failed", &responseError{Code: code, Message: msg}
			_ = emit(responseEvent{Type: "response.failed", Response: &failed})
			return
		}
		if b.add(rp.parser.Finish()) != nil {
			return
		}
		obj, err := s.finishResponse(rp, b, *ev.done)
		if err != nil {
			return
		}
		typ := "response.completed"
		if obj.Status == "incomplete" {
			typ = "response.incomplete"
		}
		_ = emit(responseEvent{Type: typ, Response: obj})
	}
}

// finishResponse closes the output, fills in status and usage, stores the
// response when asked to, and returns it.
func (s *Server) finishResponse(rp *responsesPrep, b *outputBuilder, o outcome) (*responseObject, error) {
	obj := rp.obj
	obj.Status = "completed"
	if o.reason == "length" {
		obj.Status = "incomplete"
		obj.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	}
	if len(b.items) == 0 {
		if err := b.text(""); err != nil { // always one (maybe empty) message
			return nil, err
		}
	}
	if err := b.close(obj.Status); err != nil {
		return nil, err
	}
	obj.Output = b.items
	u := &responseUsage{InputTokens: o.stats.PromptTokens, OutputTokens: o.stats.GeneratedTokens, TotalTokens: o.stats.PromptTokens + o.stats.GeneratedTokens}
	u.InputTokensDetails.CachedTokens = o.stats.CachedTokens
	u.Speculation = o.stats.Speculation
	if b.reply.reasoning != "" {
		u.OutputTokensDetails.ReasoningTokens = min(len(s.cfg.Tokenizer.Encode(b.reply.reasoning, false)), o.stats.GeneratedTokens)
	}
	obj.Usage = u
	if rp.store {
		s.storeResponse(&obj, append(slices.Clip(rp.history), b.assistantMessage()))
	}
	return &obj, nil
}

// storeResponse keeps a finished response (its body and conversation)
// for GET and previous_response_id.
func (s *Server) storeResponse(obj *responseObject, history []templateMessage) {
	body, err := json.Marshal(obj)
	if err != nil {
		return
	}
	hist, err := json.Marshal(history)
	if err != nil {
		return
	}
	s.responses.put(&storedResponse{id: obj.ID, body: body, history: history, bytes: len(body) + len(hist)})
}

// handleResponse answers GET (the stored response) and DELETE on
// /v1/responses/{id}.
func (s *Server) handleResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		e, ok := s.responses.get(id)
		if !ok {
			s.writeAPIError(w, errResponseNotFound(id, "response_id"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(append(e.body, '\n'))
	case http.MethodDelete:
		if !s.responses.delete(id) {
			s.writeAPIError(w, errResponseNotFound(id, "response_id"))
			return
		}
		writeJSON(w, http.StatusOK, deletedResponse{ID: id, Object: "response", Deleted: true})
	default:
		w.Header().Set("Allow", "GET, DELETE")
		s.writeAPIError(w, &apiError{status: http.StatusMethodNotAllowed, message: fmt.Sprintf("method %s not allowed on %s (use GET or DELETE)", r.Method, r.URL.Path),
			typ: "invalid_request_error", code: "method_not_allowed"})
	}
}

// outputBuilder lays parsed output out as a response's items, sending
// each item's stream events when emit is set. Text and reasoning items
// stay open while their text grows; a call is one whole item.
type outputBuilder struct {
	items []any
	open  any // the *messageItem or *reasoningItem still growing, or nil
	emit  func(responseEvent) error
	reply delta // all output, for the stored conversation
}

func (b *outputBuilder) send(ev responseEvent) error {
	if b.emit == nil {
		return nil
	}
	return b.emit(ev)
}

// add lays out a piece of parsed output: reasoning, then text, then calls.
func (b *outputBuilder) add(d delta) error {
	b.reply.add(d)
	if d.reasoning != "" {
		if err := b.think(d.reasoning); err != nil {
			return err
		}
	}
	if d.content != "" {
		if err := b.text(d.content); err != nil {
			return err
		}
	}
	for _, c := range d.calls {
		if err := b.call(c); err != nil {
			return err
		}
	}
	return nil
}

// start appends an item and sends output_item.added; it returns the
// item's index.
func (b *outputBuilder) start(item any) (int, error) {
	idx := len(b.items)
	b.items = append(b.items, item)
	return idx, b.send(responseEvent{Type: "response.output_item.added", OutputIndex: new(idx), Item: item})
}

var noLogprobs = json.RawMessage("[]")

// text adds to the open message, opening one first if need be.
func (b *outputBuilder) text(t string) error {
	m, ok := b.open.(*messageItem)
	if !ok {
		if err := b.close("completed"); err != nil {
			return err
		}
		m = &messageItem{Type: "message", ID: newCallID("msg_"), Status: "in_progress", Role: "assistant", Content: []*outputText{}}
		if _, err := b.start(m); err != nil {
			return err
		}
		p := &outputText{Type: "output_text", Annotations: []json.RawMessage{}}
		m.Content = append(m.Content, p)
		if err := b.send(responseEvent{Type: "response.content_part.added", ItemID: m.ID, OutputIndex: new(len(b.items) - 1), ContentIndex: new(0), Part: p}); err != nil {
			return err
		}
		b.open = m
	}
	if t == "" {
		return nil
	}
	m.Content[0].Text += t
	return b.send(responseEvent{Type: "response.output_text.delta", ItemID: m.ID, OutputIndex: new(len(b.items) - 1), ContentIndex: new(0), Delta: &t, Logprobs: noLogprobs})
}

// think adds to the open reasoning item, opening one first if need be.
func (b *outputBuilder) think(t string) error {
	ri, ok := b.open.(*reasoningItem)
	if !ok {
		if err := b.close("completed"); err != nil {
			return err
		}
		p := &reasoningText{Type: "reasoning_text"}
		ri = &reasoningItem{Type: "reasoning", ID: newCallID("rs_"), Summary: []json.RawMessage{}, Content: []*reasoningText{}}
		if _, err := b.start(ri); err != nil {
			return err
		}
		ri.Content = append(ri.Content, p)
		if err := b.send(responseEvent{Type: "response.content_part.added", ItemID: ri.ID, OutputIndex: new(len(b.items) - 1), ContentIndex: new(0), Part: p}); err != nil {
			return err
		}
		b.open = ri
	}
	ri.Content[0].Text += t
	return b.send(responseEvent{Type: "response.reasoning_text.delta", ItemID: ri.ID, OutputIndex: new(len(b.items) - 1), ContentIndex: new(0), Delta: &t})
}

// call adds one whole function call item.
func (b *outputBuilder) call(c toolCall) error {
	if err := b.close("completed"); err != nil {
		return err
	}
	fc := &functionCallItem{Type: "function_call", ID: "fc_" + strings.TrimPrefix(c.ID, "call_"), CallID: c.ID, Name: c.Name, Status: "in_progress"}
	idx, err := b.start(fc)
	if err != nil {
		return err
	}
	fc.Arguments = c.Arguments
	args := c.Arguments
	if err := b.send(responseEvent{Type: "response.function_call_arguments.delta", ItemID: fc.ID, OutputIndex: new(idx), Delta: &args}); err != nil {
		return err
	}
	if err := b.send(responseEvent{Type: "response.function_call_arguments.done", ItemID: fc.ID, OutputIndex: new(idx), Name: c.Name, Arguments: &args}); err != nil {
		return err
	}
	fc.Status = "completed"
	return b.send(responseEvent{Type: "response.output_item.done", OutputIndex: new(idx), Item: fc})
}

// close ends the open item with status (completed, or incomplete when
// the output was cut), sending its done events.
func (b *outputBuilder) close(status string) error {
	idx := len(b.items) - 1
	switch it := b.open.(type) {
	case *messageItem:
		p := it.Content[0]
		if err := b.send(responseEvent{Type: "response.output_text.done", ItemID: it.ID, OutputIndex: new(idx), ContentIndex: new(0), Text: &p.Text, Logprobs: noLogprobs}); err != nil {
			return err
		}
		if err := b.send(responseEvent{Type: "response.content_part.done", ItemID: it.ID, OutputIndex: new(idx), ContentIndex: new(0), Part: p}); err != nil {
			return err
		}
		it.Status = status
	case *reasoningItem:
		p := it.Content[0]
		if err := b.send(responseEvent{Type: "response.reasoning_text.done", ItemID: it.ID, OutputIndex: new(idx), ContentIndex: new(0), Text: &p.Text}); err != nil {
			return err
		}
		if err := b.send(responseEvent{Type: "response.content_part.done", ItemID: it.ID, OutputIndex: new(idx), ContentIndex: new(0), Part: p}); err != nil {
			return err
		}
		it.Status = status
	default:
		return nil
	}
	b.open = nil
	return b.send(responseEvent{Type: "response.output_item.done", OutputIndex: new(idx), Item: b.items[idx]})
}

// assistantMessage is the reply as a chat message, for the conversation
// a later previous_response_id continues.
func (b *outputBuilder) assistantMessage() templateMessage {
	m := templateMessage{"role": "assistant", "content": b.reply.content}
	if b.reply.reasoning != "" {
		m["reasoning_content"] = b.reply.reasoning
	}
	if len(b.reply.calls) > 0 {
		calls := make([]templateToolCall, len(b.reply.calls))
		for i, c := range b.reply.calls {
			args := json.RawMessage(c.Arguments)
			if !json.Valid(args) {
				args, _ = json.Marshal(c.Arguments)
			}
			calls[i] = templateToolCall{ID: c.ID, Type: "function", Function: templateFunction{Name: c.Name, Arguments: args}}
		}
		m["tool_calls"] = calls
	}
	return m
}
