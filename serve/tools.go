package serve

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/grammar"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// toolChoiceMode is what a request's tool_choice asks of the reply.
type toolChoiceMode struct {
	// forced: the reply must be tool calls (OpenAI "required" or a named
	// function, Anthropic any or tool), enforced by a grammar over the
	// model family's call syntax.
	forced bool
	// single: at most one call (parallel_tool_calls false, Anthropic's
	// disable_parallel_tool_use).
	single bool
}

// toolDef is a tool as the call grammar needs it.
type toolDef struct {
	name   string
	params json.RawMessage // a JSON schema; nil allows any object
	strict bool
}

// openaiToolDefs reads the definitions chatTools checked.
func openaiToolDefs(tools []json.RawMessage) []toolDef {
	out := make([]toolDef, 0, len(tools))
	for _, t := range tools {
		var v struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
				Strict     *bool           `json:"strict"`
			} `json:"function"`
		}
		_ = json.Unmarshal(t, &v)
		out = append(out, toolDef{name: v.Function.Name, params: v.Function.Parameters, strict: v.Function.Strict != nil && *v.Function.Strict})
	}
	return out
}

// toolGrammar is the grammar of a reply made of calls to defs in format
// f's syntax (Hermes when the model has none), with arguments valid
// against each tool's parameters, after an optional reasoning block. It
// returns the format the reply is parsed with.
func (s *Server) toolGrammar(defs []toolDef, mode toolChoiceMode, prompt string) (generate.Grammar, outputFormat, error) {
	f := s.format
	if f.tools == "" {
		f.tools, f.toolStart, f.toolEnd = toolsHermes, "<tool_call>", "</tool_call>"
	}
	alts := make([]grammar.TaggedSchema, 0, len(defs))
	strict := false
	for _, d := range defs {
		name, _ := json.Marshal(d.name)
		schema := d.params
		if absent(schema) {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		strict = strict || d.strict
		var a grammar.TaggedSchema
		switch f.tools {
		case toolsGemma4:
			if strings.ContainsAny(d.name, "{}<> \n") {
				return nil, f, badRequest("tools", "tool name %q cannot be written in this model's call syntax", d.name)
			}
			a = grammar.TaggedSchema{Begin: f.toolStart + "call:" + d.name, Schema: schema, End: f.toolEnd}
		case toolsLlama3:
			a = grammar.TaggedSchema{Begin: `{"name": ` + string(name) + `, "parameters": `, Schema: schema, End: "}"}
		default:
			a = grammar.TaggedSchema{Begin: f.toolStart + "\n" + `{"name": ` + string(name) + `, "arguments": `, Schema: schema, End: "}\n" + f.toolEnd}
		}
		alts = append(alts, a)
	}
	opt := grammar.TaggedOptions{JSON: grammar.JSONOptions{Whitespace: grammar.Compact, StrictProperties: strict},
		ReasoningOpen: f.thinkStart, ReasoningClose: f.thinkEnd, InReasoning: f.promptOpensThinking(prompt)}
	if f.tools == toolsLlama3 {
		opt.Separator = ";"
	}
	if mode.single {
		opt.MaxItems = 1
	}
	c, err := s.toolCompiler(f)
	if err != nil {
		return nil, f, badRequest("tool_choice", "tool_choice is unsupported for this tokenizer: %v", err)
	}
	cg, err := c.TaggedSchemas(alts, opt)
	if err != nil {
		return nil, f, badRequest("tools", "cannot compile the tool-call grammar: %s", strings.TrimSpace(err.Error()))
	}
	return grammar.NewMatcher(cg), f, nil
}

// markerSource is the tokenizer with the call and reasoning markers read
// as ordinary tokens, so that a call grammar may write them (a grammar
// never allows special tokens as text).
type markerSource struct {
	*tokenizer.Tokenizer
	plain map[int]bool
}

// IsSpecial is the tokenizer's, except for the markers.
func (m markerSource) IsSpecial(id int) bool { return !m.plain[id] && m.Tokenizer.IsSpecial(id) }

// toolCompilers caches the tool-call compiler per marker set.
type toolCompilers struct {
	mu  sync.Mutex
	by  map[string]*grammar.Compiler
	err map[string]error
}

// toolCompiler is the grammar compiler for call grammars in format f: the
// server's own when none of f's markers is a special token, else one over
// a vocabulary where they are ordinary.
func (s *Server) toolCompiler(f outputFormat) (*grammar.Compiler, error) {
	tok := s.cfg.Tokenizer
	plain := map[int]bool{}
	var keys []string
	for _, m := range []string{f.toolStart, f.toolEnd, f.thinkStart, f.thinkEnd, strings.TrimSuffix(f.thinkStart, "thought"), gemmaQuote, "<|python_tag|>"} {
		if id, ok := tok.ID(m); ok && m != "" && tok.IsSpecial(id) && !plain[id] {
			plain[id] = true
			keys = append(keys, fmt.Sprint(id))
		}
	}
	if len(plain) == 0 {
		return s.compiler()
	}
	key := strings.Join(keys, ",")
	s.tools.mu.Lock()
	defer s.tools.mu.Unlock()
	if s.tools.by == nil {
		s.tools.by, s.tools.err = map[string]*grammar.Compiler{}, map[string]error{}
	}
	if c, ok := s.tools.by[key]; ok {
		return c, s.tools.err[key]
	}
	n := s.cfg.Model.VocabSize()
	var stop []int
	for _, id := range s.cfg.EOS {
		if int(id) < n {
			stop = append(stop, int(id))
		}
	}
	src := markerSource{tok, plain}
	v := grammar.NewTokenizerVocab(src, grammar.DetectVocabKind(src), n, stop)
	ti, err := grammar.NewTokenizerInfo(v)
	var c *grammar.Compiler
	if err == nil {
		c = grammar.NewCompiler(ti, grammar.CompileOptions{Lazy: true}, grammarCacheEntries)
	}
	s.tools.by[key], s.tools.err[key] = c, err
	return c, err
}
