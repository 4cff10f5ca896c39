package serve

import (
	"encoding/json"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/grammar"
)

// grammarCacheEntries bounds the compiled grammars kept across requests:
// clients repeat the same schema request after request, and a compiled
// grammar carries its token-mask cache.
const grammarCacheEntries = 64

// grammarVocab is the tokenizer prepared for grammar masks and the compile
// cache over it, built on the first request that needs them.
type grammarVocab struct {
	compiler *grammar.Compiler
	err      error
}

// compiler returns the server's grammar compiler (lazy token-mask caches:
// a state's mask is computed on its first visit, so compiling never holds
// up the request).
func (s *Server) compiler() (*grammar.Compiler, error) {
	s.gramMu.Lock()
	defer s.gramMu.Unlock()
	if s.gram != nil {
		return s.gram.compiler, s.gram.err
	}
	tok := s.cfg.Tokenizer
	n := s.cfg.Model.VocabSize()
	var stop []int
	for _, id := range s.cfg.EOS {
		if int(id) < n {
			stop = append(stop, int(id))
		}
	}
	v := grammar.NewTokenizerVocab(tok, grammar.DetectVocabKind(tok), n, stop)
	g := &grammarVocab{}
	ti, err := grammar.NewTokenizerInfo(v)
	if err == nil {
		g.compiler = grammar.NewCompiler(ti, grammar.CompileOptions{Lazy: true}, grammarCacheEntries)
	}
	g.err = err
	s.gram = g
	return g.compiler, g.err
}

// constraint compiles a request's output constraint: OpenAI's
// response_format (text, json_object, json_schema) or the vLLM-style
// structured_outputs extra ({json | regex | choice | grammar}, one of them).
// Giving both is an error, as is a constraint that does not compile; nil
// means unconstrained.
func (s *Server) constraint(responseFormat, structured json.RawMessage) (generate.Grammar, error) {
	rfSet := !absent(responseFormat)
	soSet := !absent(structured)
	if rfSet && soSet {
		return nil, badRequest("structured_outputs", "give response_format or structured_outputs, not both")
	}
	var build func(c *grammar.Compiler) (*grammar.CompiledGrammar, error)
	var param string
	var err error
	switch {
	case rfSet:
		param = "response_format"
		build, err = parseResponseFormat(responseFormat)
	case soSet:
		param = "structured_outputs"
		build, err = parseStructuredOutputs(structured)
	default:
		return nil, nil
	}
	if err != nil || build == nil {
		return nil, err
	}
	c, err := s.compiler()
	if err != nil {
		return nil, badRequest(param, "%s is unsupported for this tokenizer: %v", param, err)
	}
	cg, err := build(c)
	if err != nil {
		return nil, badRequest(param, "cannot compile the constraint: %s", strings.TrimSpace(err.Error()))
	}
	return grammar.NewMatcher(cg), nil
}

var compactJSON = grammar.JSONOptions{Whitespace: grammar.Compact}

// parseResponseFormat decodes a responseFormat.
func parseResponseFormat(raw json.RawMessage) (func(*grammar.Compiler) (*grammar.CompiledGrammar, error), error) {
	var rf responseFormat
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, badRequest("response_format", "response_format must be {type: text | json_object | json_schema}")
	}
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		return func(c *grammar.Compiler) (*grammar.CompiledGrammar, error) { return c.JSONObject(compactJSON) }, nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return nil, badRequest("response_format.json_schema.schema", "json_schema needs a schema")
		}
		opt := compactJSON
		opt.StrictProperties = rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict
		schema := string(rf.JSONSchema.Schema)
		return func(c *grammar.Compiler) (*grammar.CompiledGrammar, error) { return c.JSONSchema(schema, opt) }, nil
	}
	return nil, badRequest("response_format.type", "unsupported response_format type %q (want text, json_object or json_schema)", rf.Type)
}

// parseStructuredOutputs decodes a structuredOutputs and checks that it
// sets exactly one member.
func parseStructuredOutputs(raw json.RawMessage) (func(*grammar.Compiler) (*grammar.CompiledGrammar, error), error) {
	var so structuredOutputs
	if err := json.Unmarshal(raw, &so); err != nil {
		return nil, badRequest("structured_outputs", "structured_outputs must be an object with one of json, regex, choice, grammar")
	}
	set := 0
	for _, b := range []bool{!absent(so.JSON), so.Regex != nil, so.Choice != nil, so.Grammar != nil} {
		if b {
			set++
		}
	}
	if set != 1 {
		return nil, badRequest("structured_outputs", "structured_outputs needs exactly one of json, regex, choice, grammar (got %d)", set)
	}
	switch {
	case so.Regex != nil:
		pattern := *so.Regex
		return func(c *grammar.Compiler) (*grammar.CompiledGrammar, error) { return c.Regex(pattern) }, nil
	case so.Choice != nil:
		if len(so.Choice) == 0 {
			return nil, badRequest("structured_outputs.choice", "choice needs at least one string")
		}
		choices := so.Choice
		return func(c *grammar.Compiler) (*grammar.CompiledGrammar, error) { return c.Choice(choices) }, nil
	case so.Grammar != nil:
		src := *so.Grammar
		return func(c *grammar.Compiler) (*grammar.CompiledGrammar, error) { return c.EBNF(src) }, nil
	}
	schema := string(so.JSON)
	var s string
	if json.Unmarshal(so.JSON, &s) == nil { // a schema sent as a JSON string
		schema = s
	}
	return func(c *grammar.Compiler) (*grammar.CompiledGrammar, error) { return c.JSONSchema(schema, compactJSON) }, nil
}
