package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/sampler"
)

var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// contentText flattens a message's content (a messageContent) to text.
func contentText(raw json.RawMessage, param string) (string, error) {
	return contentTextMedia(raw, param, nil)
}

// contentTextMedia is contentText that reads image_url and input_audio
// parts into c (media.go), leaving their placeholders in the text; a nil
// c refuses them.
func contentTextMedia(raw json.RawMessage, param string, mc *mediaCollector) (string, error) {
	if absent(raw) {
		return "", nil
	}
	var c messageContent
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", badRequest(param, "%s must be a string or a list of content parts", param)
	}
	if c.Parts == nil {
		return c.Text, nil
	}
	var b strings.Builder
	for i, p := range c.Parts {
		switch p.Type {
		case "text", "input_text":
			if p.Text == nil {
				return "", badRequest(fmt.Sprintf("%s[%d].text", param, i), "a text part needs a string text")
			}
			b.WriteString(*p.Text)
		case "image_url", "input_audio":
			ph, err := mc.openaiMediaPart(p, fmt.Sprintf("%s[%d]", param, i))
			if err != nil {
				return "", err
			}
			b.WriteString(ph)
		case "":
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, i), "a content part needs a type")
		default:
			return "", badRequest(fmt.Sprintf("%s[%d].type", param, i), "content parts of type %q are unsupported (this server reads text only)", p.Type)
		}
	}
	return b.String(), nil
}

// chatMessages validates OpenAI messages and turns them into what chat
// templates expect: text content, tool-call arguments as objects. Each
// message is decoded member by member, because the members other than
// role, content and tool_calls pass to the template unread; every message
// must be an object before any is checked.
func chatMessages(raw json.RawMessage) ([]templateMessage, error) {
	return chatMessagesMedia(raw, nil)
}

// chatMessagesMedia is chatMessages collecting media parts into c.
func chatMessagesMedia(raw json.RawMessage, c *mediaCollector) ([]templateMessage, error) {
	if absent(raw) {
		return nil, badRequest("messages", "messages is required")
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, badRequest("messages", "messages must be a list of objects")
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	out := make([]templateMessage, 0, len(msgs))
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if m == nil {
			return nil, badRequest(param, "a message must be an object")
		}
		var role string
		if err := json.Unmarshal(m["role"], &role); err != nil || role == "" {
			return nil, badRequest(param+".role", "a message needs a string role")
		}
		if !chatRoles[role] {
			return nil, badRequest(param+".role", "unknown role %q (want system, developer, user, assistant or tool)", role)
		}
		if role == "developer" {
			role = "system"
		}
		text, err := contentTextMedia(m["content"], param+".content", c)
		if err != nil {
			return nil, err
		}
		msg := templateMessage{"role": role, "content": text}
		for k, v := range m {
			switch k {
			case "role", "content":
			case "tool_calls":
				calls, err := templateToolCalls(v, param+".tool_calls")
				if err != nil {
					return nil, err
				}
				if calls != nil {
					msg["tool_calls"] = calls
				}
			default:
				msg[k] = v
			}
		}
		out = append(out, msg)
	}
	return out, nil
}

// templateToolCalls decodes an assistant message's tool_calls (a list of
// chatToolCall), turning each function.arguments JSON string into the
// object templates print; null is none, [] stays an empty list.
func templateToolCalls(raw json.RawMessage, param string) ([]templateToolCall, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	var calls []chatToolCall
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, badRequest(param, "tool_calls must be a list of {id, type, function: {name, arguments}}")
	}
	out := make([]templateToolCall, len(calls))
	for i, c := range calls {
		if c.Function.Name == "" {
			return nil, badRequest(fmt.Sprintf("%s[%d].function.name", param, i), "a tool call needs a function name")
		}
		args := c.Function.Arguments
		var s string
		if json.Unmarshal(args, &s) == nil {
			if s == "" {
				s = "{}"
			}
			if !json.Valid([]byte(s)) {
				return nil, badRequest(fmt.Sprintf("%s[%d].function.arguments", param, i), "arguments must be JSON text")
			}
			args = json.RawMessage(s)
		}
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		typ := c.Type
		if typ == "" {
			typ = "function"
		}
		out[i] = templateToolCall{ID: c.ID, Type: typ, Function: templateFunction{Name: c.Function.Name, Arguments: args}}
	}
	return out, nil
}

// chatTools validates tools and applies tool_choice: "none" drops them, a
// named function keeps only it and, like "required", forces a call.
func chatTools(raw, choice json.RawMessage) ([]json.RawMessage, toolChoiceMode, error) {
	var mode toolChoiceMode
	tools, err := chatToolList(raw, choice, &mode)
	return tools, mode, err
}

func chatToolList(raw, choice json.RawMessage, mode *toolChoiceMode) ([]json.RawMessage, error) {
	if absent(raw) {
		if !absent(choice) {
			var tc toolChoice
			if json.Unmarshal(choice, &tc) != nil || (tc.Mode != "none" && tc.Mode != "auto") {
				return nil, badRequest("tool_choice", "tool_choice %s needs tools", choice)
			}
		}
		return nil, nil
	}
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, badRequest("tools", "tools must be a list of {type: function, function: {...}}")
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		var v struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &v); err != nil || v.Function == nil || v.Function.Name == "" {
			return nil, badRequest(fmt.Sprintf("tools[%d]", i), "a tool needs function.name")
		}
		if v.Type != "" && v.Type != "function" {
			return nil, badRequest(fmt.Sprintf("tools[%d].type", i), "unsupported tool type %q (want function)", v.Type)
		}
		names[i] = v.Function.Name
	}
	if absent(choice) {
		return tools, nil
	}
	const choiceShape = "tool_choice must be none, auto, required or {type: function, function: {name}}"
	var tc toolChoice
	if err := json.Unmarshal(choice, &tc); err != nil {
		return nil, badRequest("tool_choice", choiceShape)
	}
	switch {
	case tc.Function != "":
		for i, n := range names {
			if n == tc.Function {
				mode.forced = true
				return tools[i : i+1], nil
			}
		}
		return nil, badRequest("tool_choice", "tool_choice names %q, which is not among the tools", tc.Function)
	case tc.Mode == "none":
		return nil, nil
	case tc.Mode == "auto":
		return tools, nil
	case tc.Mode == "required":
		mode.forced = true
		return tools, nil
	}
	return nil, badRequest("tool_choice", choiceShape)
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := readJSON(r, &req); err != nil {
		s.writeAPIError(w, err)
		return
	}
	pl, parser, err := s.chatPlan(&req)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	id := newCallID("chatcmpl-")
	if pl.stream {
		s.streamChat(w, r, pl, parser, id)
		return
	}
	// n > 1 runs the choices one after another (seeded ones with seed+i,
	// so that they differ); the prompt cache makes every prefill after the
	// first nearly free.
	var choices []chatChoice
	var total openaiUsage
	cps := make([]*plan, pl.n) // made before any runs: each forks the unused grammar
	for i := range cps {
		cps[i] = pl.choicePlan(i)
	}
	results, err := s.collectAll(r.Context(), cps)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	for i, res := range results {
		p := parser
		if i > 0 {
			p = parser.fresh()
		}
		d := p.Feed(res.text)
		d.add(p.Finish())
		msg := assistantMessage{Role: "assistant", Content: &d.content, ReasoningContent: d.reasoning}
		finish := res.reason
		if len(d.calls) > 0 {
			msg.ToolCalls = openaiCalls(d.calls)
			if d.content == "" {
				msg.Content = nil
			}
			if finish == "stop" {
				finish = "tool_calls"
			}
		}
		choice := chatChoice{Index: i, Message: msg, FinishReason: finish}
		if pl.logprobs {
			choice.Logprobs = &chatLogprobs{Content: s.chatLogprobs(res.tokens)}
		}
		choices = append(choices, choice)
		total.add(usage(res.outcome), i == 0)
	}
	writeJSON(w, http.StatusOK, openaiObject[chatChoice]{ID: id, Object: "chat.completion", Created: time.Now().Unix(),
		Model: s.cfg.ModelID, SystemFingerprint: s.fingerprint, Choices: choices, Usage: &total})
}

// chatPlan turns a chat request into a plan and its output parser.
func (s *Server) chatPlan(req *chatRequest) (*plan, *outputParser, error) {
	if err := s.checkModel(req.Model); err != nil {
		return nil, nil, err
	}
	mc := s.mediaCollector()
	msgs, err := chatMessagesMedia(req.Messages, mc)
	if err != nil {
		return nil, nil, err
	}
	tools, mode, err := chatTools(req.Tools, req.ToolChoice)
	if err != nil {
		return nil, nil, err
	}
	mode.single = req.ParallelToolCalls != nil && !*req.ParallelToolCalls
	var kwargs map[string]any
	if !absent(req.ChatTemplateKwargs) {
		if err := json.Unmarshal(req.ChatTemplateKwargs, &kwargs); err != nil {
			return nil, nil, badRequest("chat_template_kwargs", "chat_template_kwargs must be an object")
		}
	}
	text, err := s.renderChat(msgs, tools, kwargs)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRanges(&req.samplingFields, 2); err != nil {
		return nil, nil, err
	}
	ids, err := s.encodePromptChecked(text, true, "messages")
	if err != nil {
		return nil, nil, err
	}
	pl := &plan{promptText: text, prompt: ids}
	if pl.prompt, pl.media, err = s.expandMedia(ids, mc, "messages"); err != nil {
		return nil, nil, err
	}
	if err := s.checkPrompt(pl.prompt, "messages"); err != nil {
		return nil, nil, err
	}
	top := 0
	if req.TopLogprobs != nil {
		top = *req.TopLogprobs
		if req.Logprobs == nil || !*req.Logprobs {
			return nil, nil, badRequest("top_logprobs", "top_logprobs needs logprobs: true")
		}
	}
	if err := s.commonPlan(&req.samplingFields, pl, req.Logprobs != nil && *req.Logprobs, top); err != nil {
		return nil, nil, err
	}
	parser, err := s.toolPlan(pl, openaiToolDefs(tools), mode, text)
	return pl, parser, err
}

// toolPlan sets the call grammar of a plan whose tool_choice forces a
// call, and returns the reply's output parser.
func (s *Server) toolPlan(pl *plan, defs []toolDef, mode toolChoiceMode, prompt string) (*outputParser, error) {
	f := s.format
	if mode.forced {
		if pl.opts.Grammar != nil {
			return nil, badRequest("tool_choice", "a forced tool_choice cannot be combined with response_format or structured_outputs")
		}
		g, tf, err := s.toolGrammar(defs, mode, prompt)
		if err != nil {
			return nil, err
		}
		pl.opts.Grammar, f = g, tf
	}
	p := newOutputParser(f, len(defs) > 0, f.promptOpensThinking(prompt))
	if mode.single {
		p.maxCalls = 1
	}
	return p, nil
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := readJSON(r, &req); err != nil {
		s.writeAPIError(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.writeAPIError(w, err)
		return
	}
	if err := checkRanges(&req.samplingFields, 2); err != nil {
		s.writeAPIError(w, err)
		return
	}
	echo := req.Echo != nil && *req.Echo
	if echo && req.Logprobs != nil {
		s.writeAPIError(w, badRequest("echo", "echo with logprobs is unsupported (the server does not score prompt tokens)"))
		return
	}
	prompts, err := s.completionPrompts(req.Prompt)
	if err != nil {
		s.writeAPIError(w, err)
		return
	}
	if req.Suffix != nil && *req.Suffix != "" {
		if err := s.applySuffix(prompts, *req.Suffix); err != nil {
			s.writeAPIError(w, err)
			return
		}
	}
	top, lp := 0, false
	if req.Logprobs != nil {
		top, lp = *req.Logprobs, true
		if top < 0 || top > 20 {
			s.writeAPIError(w, badRequest("logprobs", "logprobs must be in [0, 20], got %d", top))
			return
		}
	}
	plans := make([]*plan, len(prompts))
	for k, p := range prompts {
		if err := s.checkPrompt(p.ids, "prompt"); err != nil {
			s.writeAPIError(w, err)
			return
		}
		plans[k] = &plan{prompt: p.ids, promptText: p.text}
		if err := s.commonPlan(&req.samplingFields, plans[k], lp, top); err != nil {
			s.writeAPIError(w, err)
			return
		}
	}
	if req.BestOf != nil && *req.BestOf != plans[0].n {
		s.writeAPIError(w, badRequest("best_of", "best_of other than n is unsupported (the server does not rank choices)"))
		return
	}
	id := newCallID("cmpl-")
	if plans[0].stream {
		if len(plans) > 1 {
			s.writeAPIError(w, badRequest("prompt", "a list of prompts cannot be streamed; send one prompt per streamed request"))
			return
		}
		echoText := ""
		if echo {
			echoText = prompts[0].echo
		}
		s.streamCompletion(w, r, plans[0], id, echoText)
		return
	}
	var choices []completionChoice
	var total openaiUsage
	for k, pl := range plans {
		cps := make([]*plan, pl.n) // made before any runs: each forks the unused grammar
		for i := range cps {
			cps[i] = pl.choicePlan(i)
		}
		results, err := s.collectAll(r.Context(), cps)
		if err != nil {
			s.writeAPIError(w, err)
			return
		}
		for i, res := range results {
			text, offset := res.text, 0
			if echo {
				text, offset = prompts[k].echo+res.text, len(prompts[k].echo)
			}
			choice := completionChoice{Index: k*pl.n + i, Text: text, FinishReason: &res.reason}
			if pl.logprobs {
				choice.Logprobs = s.completionLogprobs(res.tokens, pl.topLP, offset)
			}
			choices = append(choices, choice)
			total.add(usage(res.outcome), i == 0)
		}
	}
	writeJSON(w, http.StatusOK, openaiObject[completionChoice]{ID: id, Object: "text_completion", Created: time.Now().Unix(),
		Model: s.cfg.ModelID, SystemFingerprint: s.fingerprint, Choices: choices, Usage: &total})
}

// add sums usage over choices: the prompt counts once per prompt (first),
// completions always.
func (u *openaiUsage) add(o openaiUsage, first bool) {
	if first {
		u.PromptTokens += o.PromptTokens
		u.PromptTokensDetails.CachedTokens += o.PromptTokensDetails.CachedTokens
	}
	u.CompletionTokens += o.CompletionTokens
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.Lane = o.Lane
	u.Speculation = addSpecStats(u.Speculation, o.Speculation, u.CompletionTokens)
}

// completionInput is one prompt of /v1/completions: its tokens, its text
// (when sent as text) and what echo repeats.
type completionInput struct {
	ids        []int32
	text, echo string
}

// maxPrompts bounds the prompts of one /v1/completions request.
const maxPrompts = 32

// completionPrompts decodes a completionPrompt: one or more prompts, as
// text or as token ids.
func (s *Server) completionPrompts(raw json.RawMessage) ([]completionInput, error) {
	if absent(raw) {
		return nil, badRequest("prompt", "prompt is required")
	}
	var p completionPrompt
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, badRequest("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of such lists")
	}
	n := max(len(p.Tokens), len(p.Texts))
	if n == 0 {
		return nil, badRequest("prompt", "prompt must not be an empty list")
	}
	if n > maxPrompts {
		return nil, badRequest("prompt", "at most %d prompts per request, got %d", maxPrompts, n)
	}
	var out []completionInput
	v := s.cfg.Model.VocabSize()
	for _, ids := range p.Tokens {
		echo := ""
		if !slices.ContainsFunc(ids, func(id int32) bool { return id < 0 || int(id) >= v }) {
			echo = s.cfg.Tokenizer.Decode(toInts(ids), false)
		}
		out = append(out, completionInput{ids: ids, echo: echo})
	}
	for _, t := range p.Texts {
		ids, err := s.encodePromptChecked(t, true, "prompt")
		if err != nil {
			return nil, err
		}
		out = append(out, completionInput{ids: ids, text: t, echo: t})
	}
	return out, nil
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, v := range ids {
		out[i] = int(v)
	}
	return out
}

// fimTokens are fill-in-the-middle markers (prefix, suffix, middle) of
// the model families that have them, in prefix-suffix-middle order.
var fimTokens = [][3]string{
	{"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"}, // Qwen2.5-Coder, Qwen3
	{"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},       // StarCoder, Granite
	{"<|fim_begin|>", "<|fim_hole|>", "<|fim_end|>"},
}

// applySuffix turns text prompts into fill-in-the-middle prompts with
// the model's FIM tokens; a model without them is a 400 naming suffix.
func (s *Server) applySuffix(prompts []completionInput, suffix string) error {
	tok := s.cfg.Tokenizer
	var fim [3]string
	found := false
	for _, f := range fimTokens {
		_, a := tok.ID(f[0])
		_, b := tok.ID(f[1])
		_, c := tok.ID(f[2])
		if a && b && c {
			fim, found = f, true
			break
		}
	}
	if !found {
		return badRequest("suffix", "suffix is unsupported: this model has no fill-in-the-middle tokens")
	}
	for i, p := range prompts {
		if p.text == "" && len(p.ids) > 0 {
			return badRequest("suffix", "suffix needs the prompt as text, not token ids")
		}
		text := fim[0] + p.text + fim[1] + suffix + fim[2]
		ids, err := s.encodePromptChecked(text, true, "prompt")
		if err != nil {
			return err
		}
		prompts[i].ids, prompts[i].text = ids, text
	}
	return nil
}

// result is a finished generation's text, tokens and outcome.
type result struct {
	text   string
	tokens []tokenLP
	outcome
}

// start queues a plan on the engine.
func (s *Server) start(ctx context.Context, pl *plan) (*job, error) {
	j := &job{ctx: ctx, prompt: pl.prompt, opts: pl.opts, stops: pl.stops, out: newSink()}
	if pl.media != nil {
		j.fn = s.mediaFn(j, pl.media)
	}
	if err := s.eng.submit(j); err != nil {
		return nil, err
	}
	return j, nil
}

// events yields the job's events up to the one carrying its outcome; it
// ends early when the client leaves (the engine sees the cancelled
// context) or the loop body breaks.
func events(ctx context.Context, j *job) iter.Seq[event] {
	return func(yield func(event) bool) {
		for {
			for _, ev := range j.out.drain() {
				if !yield(ev) || ev.done != nil {
					return
				}
			}
			select {
			case <-j.out.notify:
			case <-ctx.Done():
				return
			}
		}
	}
}

// genError maps a failed generation to an API error.
func genError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var pe *sampler.ParamError
	if errors.As(err, &pe) {
		return badRequest(pe.Field, "invalid %s: %v", pe.Field, err)
	}
	return &apiError{status: http.StatusInternalServerError, message: "generation failed: " + err.Error(), typ: "server_error"}
}

// collect runs a plan to the end.
func (s *Server) collect(ctx context.Context, pl *plan) (*result, error) {
	j, err := s.start(ctx, pl)
	if err != nil {
		return nil, err
	}
	return collectJob(ctx, j)
}

// collectAll runs the plans (a request's n choices) as one group: all are
// queued at once, so that on the batched lane they decode as rows of one
// batch, the later ones starting from the blocks the first one computed
// for their shared prompt (on the serial lane they run one after
// another). The results are in plan order.
func (s *Server) collectAll(ctx context.Context, pls []*plan) ([]*result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a failed choice ends the others
	jobs := make([]*job, len(pls))
	for i, pl := range pls {
		j := &job{ctx: ctx, prompt: pl.prompt, opts: pl.opts, stops: pl.stops, out: newSink()}
		if pl.media != nil {
			j.fn = s.mediaFn(j, pl.media)
		} else if i > 0 {
			j.after = jobs[0]
		}
		if err := s.eng.submit(j); err != nil {
			return nil, err
		}
		jobs[i] = j
	}
	out := make([]*result, len(jobs))
	for i, j := range jobs {
		res, err := collectJob(ctx, j)
		if err != nil {
			return nil, err
		}
		out[i] = res
	}
	return out, nil
}

// collectJob reads a started job's events to its outcome.
func collectJob(ctx context.Context, j *job) (*result, error) {
	var res result
	var b strings.Builder
	for ev := range events(ctx, j) {
		b.WriteString(ev.text)
		res.tokens = append(res.tokens, ev.tokens...)
		if ev.done != nil {
			if ev.done.err != nil {
				return nil, genError(ev.done.err)
			}
			res.outcome = *ev.done
			res.text = b.String()
			return &res, nil
		}
	}
	return nil, ctx.Err() // the client left
}

// usage is an outcome's OpenAI usage.
func usage(o outcome) openaiUsage {
	u := openaiUsage{PromptTokens: o.stats.PromptTokens, CompletionTokens: o.stats.GeneratedTokens,
		TotalTokens: o.stats.PromptTokens + o.stats.GeneratedTokens}
	u.PromptTokensDetails.CachedTokens = o.stats.CachedTokens
	u.Lane = o.lane
	u.Speculation = o.stats.Speculation
	return u
}

// openaiCalls are parsed calls as a reply's tool_calls.
func openaiCalls(calls []toolCall) []openaiToolCall {
	out := make([]openaiToolCall, len(calls))
	for i, c := range calls {
		out[i] = openaiToolCall{ID: c.ID, Type: "function", Function: openaiFunctionCall{Name: c.Name, Arguments: c.Arguments}}
	}
	return out
}

// lp makes a logprob JSON-safe (the wire format has no NaN or -Inf).
func lp(v float32) float64 {
	f := float64(v)
	if math.IsNaN(f) {
		return 0
	}
	if math.IsInf(f, -1) {
		return -9999
	}
	return f
}

func (s *Server) tokenText(id int) string { return s.cfg.Tokenizer.Decode([]int{id}, false) }

func byteList(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

// chatLogprobs is chat's logprobs.content list.
func (s *Server) chatLogprobs(toks []tokenLP) []tokenLogprob {
	out := make([]tokenLogprob, 0, len(toks))
	for _, t := range toks {
		text := s.tokenText(int(t.ID))
		top := make([]topLogprob, 0, len(t.Top))
		for _, a := range t.Top {
			at := s.tokenText(a.ID)
			top = append(top, topLogprob{Token: at, Logprob: lp(a.Logprob), Bytes: byteList(at)})
		}
		out = append(out, tokenLogprob{Token: text, Logprob: lp(t.Logprob), Bytes: byteList(text), TopLogprobs: top})
	}
	return out
}

// completionLogprobs is the legacy completions logprobs object; offset is
// the text offset of the first token.
func (s *Server) completionLogprobs(toks []tokenLP, top, offset int) *completionLogprobs {
	out := &completionLogprobs{
		Tokens:        make([]string, 0, len(toks)),
		TokenLogprobs: make([]float64, 0, len(toks)),
		TopLogprobs:   make([]map[string]float64, 0, len(toks)),
		TextOffset:    make([]int, 0, len(toks)),
	}
	for _, t := range toks {
		text := s.tokenText(int(t.ID))
		out.Tokens = append(out.Tokens, text)
		out.TokenLogprobs = append(out.TokenLogprobs, lp(t.Logprob))
		m := map[string]float64{}
		for i, a := range t.Top {
			if i < top {
				m[s.tokenText(a.ID)] = lp(a.Logprob)
			}
		}
		out.TopLogprobs = append(out.TopLogprobs, m)
		out.TextOffset = append(out.TextOffset, offset)
		offset += len(text)
	}
	return out
}
