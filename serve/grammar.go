package serve

import (
	"encoding/json"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/grammar"
)

// grammarVocab is the tokenizer prepared for grammar masks, built on the
// first request that needs it.
type grammarVocab struct {
	ti  *grammar.TokenizerInfo
	err error
}

func (s *Server) tokenizerInfo() (*grammar.TokenizerInfo, error) {
	s.gramMu.Lock()
	defer s.gramMu.Unlock()
	if s.gram != nil {
		return s.gram.ti, s.gram.err
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
	g.ti, g.err = grammar.NewTokenizerInfo(v)
	s.gram = g
	return g.ti, g.err
}

// responseFormat compiles response_format into a grammar: text (none),
// json_object (any object) or json_schema (the schema).
func (s *Server) responseFormat(raw json.RawMessage) (generate.Grammar, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, badRequest("response_format", "response_format must be {type: text | json_object | json_schema}")
	}
	var g *grammar.Grammar
	var err error
	switch rf.Type {
	case "text":
		return nil, nil
	case "json_object":
		g, err = grammar.JSONObjectGrammar(grammar.JSONOptions{Whitespace: grammar.Compact})
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return nil, badRequest("response_format.json_schema.schema", "json_schema needs a schema")
		}
		strict := rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict
		g, err = grammar.JSONSchemaGrammar(rf.JSONSchema.Schema, grammar.JSONOptions{Whitespace: grammar.Compact, StrictProperties: strict})
	default:
		return nil, badRequest("response_format.type", "unsupported response_format type %q (want text, json_object or json_schema)", rf.Type)
	}
	if err != nil {
		return nil, badRequest("response_format", "cannot compile the schema: %s", strings.TrimSpace(err.Error()))
	}
	ti, err := s.tokenizerInfo()
	if err != nil {
		return nil, badRequest("response_format", "response_format is unsupported for this tokenizer: %v", err)
	}
	cg := grammar.CompileGrammar(g, ti, grammar.CompileOptions{Lazy: true})
	return grammar.NewMatcher(cg), nil
}
