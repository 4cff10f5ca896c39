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

// streamError reports a failure after the stream started, as an OpenAI
// error chunk (param and code null).
func (e *sse) streamError(err error) {
	ae, ok := err.(*apiError)
	if !ok {
		ae = genError(err)
	}
	var body openaiError
	body.Error.Message, body.Error.Type = scrubPaths(ae.message), ae.typ
	_ = e.send("", body)
}

// openaiStream is an OpenAI event stream of choices C, whose chunks all
// repeat the response's id, object, creation time and model.
type openaiStream[C any] struct {
	*sse
	head openaiObject[C]
}

func newOpenAIStream[C any](w http.ResponseWriter, id, object, model, fingerprint string) *openaiStream[C] {
	return &openaiStream[C]{sse: newSSE(w), head: openaiObject[C]{ID: id, Object: object, Created: time.Now().Unix(), Model: model, SystemFingerprint: fingerprint}}
}

// choice sends a chunk of one choice.
func (o *openaiStream[C]) choice(c C) error {
	chunk := o.head
	chunk.Choices = []C{c}
	return o.send("", chunk)
}

// end closes the stream after the job's outcome: an error chunk if it
// failed, else the usage chunk (no choices) when the request asked for
// it; then [DONE].
func (o *openaiStream[C]) end(res *outcome, withUsage bool) {
	if res.err != nil {
		o.streamError(res.err)
	} else if withUsage {
		chunk := o.head
		chunk.Choices = []C{}
		u := usage(*res)
		chunk.Usage = &u
		if o.send("", chunk) != nil {
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
	out := newOpenAIStream[chatChunkChoice](w, id, "chat.completion.chunk", s.cfg.ModelID, s.fingerprint)
	send := func(delta chatDelta, finish *string, logprobs *chatLogprobs) error {
		return out.choice(chatChunkChoice{Delta: delta, Logprobs: logprobs, FinishReason: finish})
	}
	empty := ""
	if send(chatDelta{Role: "assistant", Content: &empty}, nil, nil) != nil {
		return
	}
	nCalls := 0
	emit := func(d delta, toks []tokenLP) error {
		var lps *chatLogprobs
		if pl.logprobs && len(toks) > 0 {
			lps = &chatLogprobs{Content: s.chatLogprobs(toks)}
		}
		if d.reasoning != "" {
			if err := send(chatDelta{ReasoningContent: d.reasoning}, nil, nil); err != nil {
				return err
			}
		}
		if d.content != "" || lps != nil {
			if err := send(chatDelta{Content: &d.content}, nil, lps); err != nil {
				return err
			}
		}
		for _, call := range openaiCalls(d.calls) {
			call.Index = new(nCalls)
			nCalls++
			if err := send(chatDelta{ToolCalls: []openaiToolCall{call}}, nil, nil); err != nil {
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
		if ev.done.err == nil || ev.done.reason != "" { // a row cut off at shutdown has both
			if emit(parser.Finish(), nil) != nil {
				return
			}
			finish := ev.done.reason
			if nCalls > 0 && finish == "stop" {
				finish = "tool_calls"
			}
			if send(chatDelta{}, &finish, nil) != nil {
				return
			}
		}
		out.end(ev.done, pl.usage)
	}
}

func (s *Server) streamCompletion(w http.ResponseWriter, r *http.Request, pl *plan, id, echo string) {
	ctx := r.Context()
	j, err := s.start(ctx, pl)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	out := newOpenAIStream[completionChoice](w, id, "text_completion", s.cfg.ModelID, s.fingerprint)
	offset := 0
	if echo != "" {
		if out.choice(completionChoice{Text: echo}) != nil {
			return
		}
		offset = len(echo)
	}
	for ev := range events(ctx, j) {
		if ev.text != "" || (pl.logprobs && len(ev.tokens) > 0) {
			c := completionChoice{Text: ev.text}
			if pl.logprobs {
				c.Logprobs = s.completionLogprobs(ev.tokens, pl.topLP, offset)
			}
			offset += len(ev.text)
			if out.choice(c) != nil {
				return
			}
		}
		if ev.done == nil {
			continue
		}
		if (ev.done.err == nil || ev.done.reason != "") && out.choice(completionChoice{FinishReason: &ev.done.reason}) != nil {
			return
		}
		out.end(ev.done, pl.usage)
	}
}
