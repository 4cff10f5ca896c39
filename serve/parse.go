package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/mlxgo/mlxgo/tokenizer"
)

// Tool-call syntaxes the output parser knows.
const (
	toolsHermes = "hermes" // Qwen, Hermes: <tool_call>{"name":…,"arguments":…}</tool_call>
	toolsGemma4 = "gemma4" // <|tool_call>call:name{key:<|"|>str<|"|>}<tool_call|>
	toolsLlama3 = "llama3" // the whole reply is {"name":…,"parameters":…} (maybe after <|python_tag|>)
)

// outputFormat is how a model marks tool calls and reasoning in its output.
type outputFormat struct {
	tools                string
	toolStart, toolEnd   string
	thinkStart, thinkEnd string
}

// detectFormat picks the tool-call and reasoning syntax from the
// vocabulary's special tokens and the chat template's text (force, when
// set, names the tool syntax).
func detectFormat(force string, tok *tokenizer.Tokenizer, tmpl string) outputFormat {
	has := func(s string) bool {
		if _, ok := tok.ID(s); ok {
			return true
		}
		return strings.Contains(tmpl, s)
	}
	var f outputFormat
	switch {
	case force != "":
		f.tools = force
	case has("<|tool_call>") && has("<tool_call|>"):
		f.tools = toolsGemma4
	case has("<tool_call>") && has("</tool_call>"):
		f.tools = toolsHermes
	case has("<|python_tag|>") || strings.Contains(tmpl, "ipython"):
		f.tools = toolsLlama3
	}
	switch f.tools {
	case toolsGemma4:
		f.toolStart, f.toolEnd = "<|tool_call>", "<tool_call|>"
	case toolsHermes:
		f.toolStart, f.toolEnd = "<tool_call>", "</tool_call>"
	}
	switch {
	case has("<think>") && has("</think>"):
		f.thinkStart, f.thinkEnd = "<think>", "</think>"
	case has("<|channel>") && has("<channel|>"):
		f.thinkStart, f.thinkEnd = "<|channel>thought", "<channel|>"
	}
	return f
}

// promptOpensThinking reports whether a rendered prompt ends inside a
// reasoning block (templates that pre-fill "<think>"), so that the reply
// starts as reasoning.
func (f outputFormat) promptOpensThinking(prompt string) bool {
	if f.thinkStart == "" {
		return false
	}
	return strings.LastIndex(prompt, f.thinkStart) > strings.LastIndex(prompt, f.thinkEnd)
}

// toolCall is one parsed call; Arguments is a JSON object's text.
type toolCall struct {
	ID        string
	Name      string
	Arguments string
}

// delta is what a piece of model output turned into.
type delta struct {
	content, reasoning string
	calls              []toolCall
}

func (d *delta) add(o delta) {
	d.content += o.content
	d.reasoning += o.reasoning
	d.calls = append(d.calls, o.calls...)
}

func (d delta) empty() bool { return d.content == "" && d.reasoning == "" && len(d.calls) == 0 }

const (
	stNormal = iota
	stReasoning
	stTool
)

// outputParser splits streamed model text into content, reasoning and
// tool calls. Text that might be the start of a marker is held back until
// the next piece settles it. Not safe for concurrent use.
type outputParser struct {
	f           outputFormat
	tools       bool // the request offered tools: parse calls
	state       int
	buf         string
	body        strings.Builder // the current tool call's text
	afterThink  bool            // trim the whitespace that follows a reasoning block
	started     bool            // some content was emitted
	llama       int             // llama3 syntax: 0 undecided, 1 buffering a call, 2 plain text
	maxCalls    int             // calls kept (0: all); later ones are dropped
	inReasoning bool            // the output starts inside a reasoning block
	nCalls      int             // calls returned so far
}

// keep trims calls to what maxCalls still allows.
func (p *outputParser) keep(calls []toolCall) []toolCall {
	if p.maxCalls > 0 {
		calls = calls[:max(0, min(len(calls), p.maxCalls-p.nCalls))]
	}
	p.nCalls += len(calls)
	return calls
}

func newOutputParser(f outputFormat, tools, startInReasoning bool) *outputParser {
	p := &outputParser{f: f, tools: tools, inReasoning: startInReasoning}
	if startInReasoning {
		p.state = stReasoning
	}
	return p
}

// fresh is a new parser set up like p was (for the next choice).
func (p *outputParser) fresh() *outputParser {
	q := newOutputParser(p.f, p.tools, p.inReasoning)
	q.maxCalls = p.maxCalls
	return q
}

// heldSuffix is the length of the longest suffix of s that is a proper
// prefix of one of marks.
func heldSuffix(s string, marks ...string) int {
	hold := 0
	for _, m := range marks {
		if m == "" {
			continue
		}
		for k := min(len(m)-1, len(s)); k > hold; k-- {
			if strings.HasSuffix(s, m[:k]) {
				hold = k
				break
			}
		}
	}
	return hold
}

func (p *outputParser) emitContent(d *delta, s string) {
	if p.afterThink {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			return
		}
		p.afterThink = false
	}
	if s != "" {
		p.started = true
	}
	d.content += s
}

// Feed parses the next piece of text.
func (p *outputParser) Feed(text string) delta {
	var d delta
	p.buf += text
	for p.buf != "" {
		switch p.state {
		case stNormal:
			if p.tools && p.f.tools == toolsLlama3 && !p.started {
				if p.llama == 0 {
					t := strings.TrimLeftFunc(p.buf, unicode.IsSpace)
					switch {
					case t == "" || strings.HasPrefix("<|python_tag|>", t):
						return d
					case strings.HasPrefix(t, "{") || strings.HasPrefix(t, "<|python_tag|>"):
						p.llama = 1
					default:
						p.llama = 2
					}
				}
				if p.llama == 1 {
					return d // the whole reply is parsed in Finish
				}
			}
			marks := []string{p.f.thinkStart}
			if p.tools {
				marks = append(marks, p.f.toolStart)
			}
			at, which := -1, ""
			for _, m := range marks {
				if m == "" {
					continue
				}
				if i := strings.Index(p.buf, m); i >= 0 && (at < 0 || i < at) {
					at, which = i, m
				}
			}
			if at < 0 {
				hold := heldSuffix(p.buf, marks...)
				p.emitContent(&d, p.buf[:len(p.buf)-hold])
				p.buf = p.buf[len(p.buf)-hold:]
				return d
			}
			p.emitContent(&d, p.buf[:at])
			p.buf = p.buf[at+len(which):]
			if which == p.f.thinkStart {
				p.state = stReasoning
			} else {
				p.state = stTool
				p.body.Reset()
			}
		case stReasoning:
			i := strings.Index(p.buf, p.f.thinkEnd)
			if i < 0 || p.f.thinkEnd == "" {
				hold := heldSuffix(p.buf, p.f.thinkEnd)
				d.reasoning += p.buf[:len(p.buf)-hold]
				p.buf = p.buf[len(p.buf)-hold:]
				return d
			}
			d.reasoning += p.buf[:i]
			p.buf = p.buf[i+len(p.f.thinkEnd):]
			p.state, p.afterThink = stNormal, true
		case stTool:
			i := strings.Index(p.buf, p.f.toolEnd)
			if i < 0 {
				hold := heldSuffix(p.buf, p.f.toolEnd)
				p.body.WriteString(p.buf[:len(p.buf)-hold])
				p.buf = p.buf[len(p.buf)-hold:]
				return d
			}
			p.body.WriteString(p.buf[:i])
			p.buf = p.buf[i+len(p.f.toolEnd):]
			p.state = stNormal
			calls, err := parseToolCalls(p.f.tools, p.body.String())
			if err != nil { // not a call after all: keep the text
				p.emitContent(&d, p.f.toolStart+p.body.String()+p.f.toolEnd)
			} else {
				d.calls = append(d.calls, p.keep(calls)...)
				p.afterThink = true
			}
		}
	}
	return d
}

// Finish returns what is still held back at the end of the output.
func (p *outputParser) Finish() delta {
	var d delta
	rest := p.buf
	p.buf = ""
	switch p.state {
	case stNormal:
		if p.llama == 1 {
			if calls, err := parseToolCalls(toolsLlama3, rest); err == nil {
				d.calls = p.keep(calls)
				return d
			}
		}
		p.emitContent(&d, rest)
	case stReasoning:
		d.reasoning = rest
	case stTool:
		body := p.body.String() + rest
		if calls, err := parseToolCalls(p.f.tools, body); err == nil {
			d.calls = p.keep(calls)
		} else {
			p.emitContent(&d, p.f.toolStart+body)
		}
	}
	return d
}

// newCallID makes an OpenAI-style tool call id.
func newCallID(prefix string) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return prefix + string(b)
}

// parseToolCalls parses the text of one tool-call block in a syntax.
func parseToolCalls(syntax, body string) ([]toolCall, error) {
	switch syntax {
	case toolsGemma4:
		return parseGemma4Calls(body)
	case toolsLlama3:
		body = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(body), "<|python_tag|>"))
		var calls []toolCall
		for _, part := range splitTopLevel(body, ';') {
			c, err := parseJSONCall(part)
			if err != nil {
				return nil, err
			}
			calls = append(calls, c)
		}
		if len(calls) == 0 {
			return nil, errors.New("no tool call")
		}
		return calls, nil
	default:
		c, err := parseJSONCall(body)
		if err != nil {
			return nil, err
		}
		return []toolCall{c}, nil
	}
}

// splitTopLevel splits s at sep outside JSON strings and brackets.
func splitTopLevel(s string, sep byte) []string {
	var out []string
	depth, inStr, esc, start := 0, false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == sep && depth == 0:
			if t := strings.TrimSpace(s[start:i]); t != "" {
				out = append(out, t)
			}
			start = i + 1
		}
	}
	if t := strings.TrimSpace(s[start:]); t != "" {
		out = append(out, t)
	}
	return out
}

// parseJSONCall parses {"name": …, "arguments" | "parameters": …}; the
// arguments may be an object or a string holding one.
func parseJSONCall(s string) (toolCall, error) {
	var raw struct {
		Name       string          `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	dec := json.NewDecoder(strings.NewReader(strings.TrimSpace(s)))
	if err := dec.Decode(&raw); err != nil {
		return toolCall{}, err
	}
	if dec.More() {
		return toolCall{}, errors.New("text after the tool call")
	}
	if raw.Name == "" {
		return toolCall{}, errors.New("tool call without a name")
	}
	args := raw.Arguments
	if args == nil {
		args = raw.Parameters
	}
	argText := "{}"
	if !absent(args) {
		var str string
		if json.Unmarshal(args, &str) == nil {
			args = json.RawMessage(str)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, args); err != nil {
			return toolCall{}, fmt.Errorf("tool call arguments: %w", err)
		}
		argText = buf.String()
	}
	return toolCall{ID: newCallID("call_"), Name: raw.Name, Arguments: argText}, nil
}

// gemmaQuote delimits strings in Gemma 4's tool-call syntax.
const gemmaQuote = `<|"|>`

// parseGemma4Calls parses one or more call:name{…} in Gemma 4's syntax:
// bare keys, strings between <|"|> delimiters, JSON-like numbers, lists
// and objects. Arguments are rewritten as JSON, keys in their order.
func parseGemma4Calls(body string) ([]toolCall, error) {
	var calls []toolCall
	s := strings.TrimSpace(body)
	for s != "" {
		if !strings.HasPrefix(s, "call:") {
			return nil, fmt.Errorf("gemma tool call: want call:name{…}, got %q", truncate(s, 40))
		}
		s = s[len("call:"):]
		i := strings.IndexByte(s, '{')
		if i <= 0 {
			return nil, errors.New("gemma tool call: no name or no arguments")
		}
		name := strings.TrimSpace(s[:i])
		g := &gemmaArgs{s: s[i:]}
		var out strings.Builder
		if err := g.value(&out); err != nil {
			return nil, err
		}
		if !json.Valid([]byte(out.String())) {
			return nil, errors.New("gemma tool call: arguments are not an object")
		}
		calls = append(calls, toolCall{ID: newCallID("call_"), Name: name, Arguments: out.String()})
		s = strings.TrimSpace(g.s[g.i:])
		s = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(s, "<tool_call|>"), "<|tool_call>"))
	}
	if len(calls) == 0 {
		return nil, errors.New("gemma tool call: empty")
	}
	return calls, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// gemmaArgs is a cursor over Gemma 4 argument text.
type gemmaArgs struct {
	s string
	i int
}

func (g *gemmaArgs) skipSpace() {
	for g.i < len(g.s) && (g.s[g.i] == ' ' || g.s[g.i] == '\n' || g.s[g.i] == '\t' || g.s[g.i] == '\r') {
		g.i++
	}
}

func (g *gemmaArgs) fail(what string) error {
	return fmt.Errorf("gemma tool call: %s at offset %d", what, g.i)
}

// str reads a <|"|>-delimited string (or a JSON "…" string) as JSON.
func (g *gemmaArgs) str(out *strings.Builder) error {
	if strings.HasPrefix(g.s[g.i:], gemmaQuote) {
		g.i += len(gemmaQuote)
		j := strings.Index(g.s[g.i:], gemmaQuote)
		if j < 0 {
			return g.fail("unterminated string")
		}
		b, _ := json.Marshal(g.s[g.i : g.i+j])
		out.Write(b)
		g.i += j + len(gemmaQuote)
		return nil
	}
	dec := json.NewDecoder(strings.NewReader(g.s[g.i:]))
	var v string
	if err := dec.Decode(&v); err != nil {
		return g.fail("bad string")
	}
	b, _ := json.Marshal(v)
	out.Write(b)
	g.i += int(dec.InputOffset())
	return nil
}

func (g *gemmaArgs) value(out *strings.Builder) error {
	g.skipSpace()
	if g.i >= len(g.s) {
		return g.fail("missing value")
	}
	switch c := g.s[g.i]; {
	case c == '{':
		g.i++
		out.WriteByte('{')
		for n := 0; ; n++ {
			g.skipSpace()
			if g.i < len(g.s) && g.s[g.i] == '}' {
				g.i++
				out.WriteByte('}')
				return nil
			}
			if n > 0 {
				if g.i >= len(g.s) || g.s[g.i] != ',' {
					return g.fail("want , or }")
				}
				g.i++
				g.skipSpace()
				out.WriteByte(',')
			}
			if strings.HasPrefix(g.s[g.i:], gemmaQuote) || (g.i < len(g.s) && g.s[g.i] == '"') {
				if err := g.str(out); err != nil {
					return err
				}
			} else {
				j := g.i
				for j < len(g.s) && g.s[j] != ':' && g.s[j] != '}' && g.s[j] != ',' {
					j++
				}
				key := strings.TrimSpace(g.s[g.i:j])
				if key == "" {
					return g.fail("missing key")
				}
				b, _ := json.Marshal(key)
				out.Write(b)
				g.i = j
			}
			g.skipSpace()
			if g.i >= len(g.s) || g.s[g.i] != ':' {
				return g.fail("want :")
			}
			g.i++
			out.WriteByte(':')
			if err := g.value(out); err != nil {
				return err
			}
		}
	case c == '[':
		g.i++
		out.WriteByte('[')
		for n := 0; ; n++ {
			g.skipSpace()
			if g.i < len(g.s) && g.s[g.i] == ']' {
				g.i++
				out.WriteByte(']')
				return nil
			}
			if n > 0 {
				if g.i >= len(g.s) || g.s[g.i] != ',' {
					return g.fail("want , or ]")
				}
				g.i++
				out.WriteByte(',')
			}
			if err := g.value(out); err != nil {
				return err
			}
		}
	case c == '"' || strings.HasPrefix(g.s[g.i:], gemmaQuote):
		return g.str(out)
	default:
		j := g.i
		for j < len(g.s) && !strings.ContainsRune(",}]", rune(g.s[j])) && !strings.HasPrefix(g.s[j:], "<") {
			j++
		}
		lit := strings.TrimSpace(g.s[g.i:j])
		if lit == "" {
			return g.fail("missing value")
		}
		g.i = j
		switch lit {
		case "True":
			lit = "true"
		case "False":
			lit = "false"
		case "None":
			lit = "null"
		}
		if json.Valid([]byte(lit)) {
			out.WriteString(lit)
		} else {
			b, _ := json.Marshal(lit)
			out.Write(b)
		}
		return nil
	}
}
