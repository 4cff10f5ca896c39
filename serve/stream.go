package serve

import (
	"encoding/json"
	"net/http"
	"time"
)

// sse writes server-sent events, flushing each one.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// send writes one event (name "" for OpenAI's unnamed data events).
func (e *sse) send(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.raw(name, b)
}

func (e *sse) raw(name string, data []byte) error {
	buf := make([]byte, 0, len(data)+32)
	if name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, name...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, '\n', '\n')
	if _, err := e.w.Write(buf); err != nil {
		return err
	}
	return e.rc.Flush()
}

// streamError reports a failure after the stream started.
func (e *sse) streamError(err error) {
	ae, ok := err.(*apiError)
	if !ok {
		ae = genError(err)
	}
	_ = e.send("", map[string]any{"error": map[string]any{"message": ae.message, "type": ae.typ, "param": nil, "code": nil}})
}

// openaiStream is an OpenAI event stream, whose chunks all repeat the
// response's id, object, creation time and model.
type openaiStream struct {
	*sse
	id, object, model string
	created           int64
}

func (s *Server) newOpenAIStream(w http.ResponseWriter, id, object string) *openaiStream {
	return &openaiStream{sse: newSSE(w), id: id, object: object, model: s.cfg.ModelID, created: time.Now().Unix()}
}

// chunk is a chunk object holding choices.
func (o *openaiStream) chunk(choices []any) map[string]any {
	return map[string]any{"id": o.id, "object": o.object, "created": o.created, "model": o.model, "choices": choices}
}

// choice sends a chunk of one choice.
func (o *openaiStream) choice(c map[string]any) error { return o.send("", o.chunk([]any{c})) }

// end closes the stream after the job's outcome: an error chunk if it
// failed, else the usage chunk when the request asked for it; then [DONE].
func (o *openaiStream) end(res *outcome, withUsage bool) {
	if res.err != nil {
		o.streamError(res.err)
	} else if withUsage {
		u := o.chunk([]any{})
		u["usage"] = usage(*res)
		if o.send("", u) != nil {
			return
		}
	}
	_ = o.raw("", []byte("[DONE]"))
}

func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, pl *plan, parser *outputParser, id string) {
	ctx := r.Context()
	j, err := s.start(ctx, pl)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	out := s.newOpenAIStream(w, id, "chat.completion.chunk")
	choice := func(delta map[string]any, finish any, logprobs any) error {
		return out.choice(map[string]any{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish})
	}
	if choice(map[string]any{"role": "assistant", "content": ""}, nil, nil) != nil {
		return
	}
	nCalls := 0
	emit := func(d delta, toks []tokenLP) error {
		var lps any
		if pl.logprobs && len(toks) > 0 {
			lps = map[string]any{"content": s.chatLogprobs(toks)}
		}
		if d.reasoning != "" {
			if err := choice(map[string]any{"reasoning_content": d.reasoning}, nil, nil); err != nil {
				return err
			}
		}
		if d.content != "" || lps != nil {
			if err := choice(map[string]any{"content": d.content}, nil, lps); err != nil {
				return err
			}
		}
		for _, c := range d.calls {
			call := map[string]any{"index": nCalls, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
			nCalls++
			if err := choice(map[string]any{"tool_calls": []any{call}}, nil, nil); err != nil {
				return err
			}
		}
		return nil
	}
	for ev := range events(ctx, j) {
		if ev.text != "" || len(ev.tokens) > 0 {
			if emit(parser.Feed(ev.text), ev.tokens) != nil {
				return
			}
		}
		if ev.done == nil {
			continue
		}
		if ev.done.err == nil {
			if emit(parser.Finish(), nil) != nil {
				return
			}
			finish := ev.done.reason
			if nCalls > 0 && finish == "stop" {
				finish = "tool_calls"
			}
			if choice(map[string]any{}, finish, nil) != nil {
				return
			}
		}
		out.end(ev.done, pl.usage)
	}
}

func (s *Server) streamCompletion(w http.ResponseWriter, r *http.Request, pl *plan, id string) {
	ctx := r.Context()
	j, err := s.start(ctx, pl)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	out := s.newOpenAIStream(w, id, "text_completion")
	choice := func(text string, finish any, logprobs any) error {
		return out.choice(map[string]any{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish})
	}
	offset := 0
	for ev := range events(ctx, j) {
		if ev.text != "" || (pl.logprobs && len(ev.tokens) > 0) {
			var lps any
			if pl.logprobs {
				lps = s.completionLogprobs(ev.tokens, pl.topLP, offset)
			}
			offset += len(ev.text)
			if choice(ev.text, nil, lps) != nil {
				return
			}
		}
		if ev.done == nil {
			continue
		}
		if ev.done.err == nil && choice("", ev.done.reason, nil) != nil {
			return
		}
		out.end(ev.done, pl.usage)
	}
}
