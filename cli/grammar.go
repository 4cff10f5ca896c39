package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/grammar"
	"github.com/mlxgo/mlxgo/tokenizer"
	"github.com/spf13/pflag"
)

// grammarFlags are generate's structured-output flags: at most one of
// --json-schema, --regex, --grammar and --choice, and --jump-forward.
type grammarFlags struct {
	jsonSchema, regex, ebnf, choice string
	jsonIndent                      int
	jumpForward                     string // "", "exact" or "canonical"
}

func addGrammarFlags(fl *pflag.FlagSet, g *grammarFlags) {
	fl.StringVar(&g.jsonSchema, "json-schema", "", "constrain the output to JSON valid against this JSON Schema (a file, or the schema itself when it starts with {)")
	fl.IntVar(&g.jsonIndent, "json-indent", 0, "with --json-schema: pretty-print with this indent (0: compact JSON)")
	fl.StringVar(&g.regex, "regex", "", "constrain the output to match this regular expression (Go RE2 syntax, whole output)")
	fl.StringVar(&g.ebnf, "grammar", "", "constrain the output to this GBNF/EBNF grammar file (start rule root)")
	fl.StringVar(&g.choice, "choice", "", "constrain the output to one of these comma-separated strings")
	fl.StringVar(&g.jumpForward, "jump-forward", "", "feed tokens the grammar forces through one forward pass instead of one per step: exact (the bare flag) only where the grammar allows a single token, never changing the output; canonical: the tokenizer's spelling of all forced text, fewer passes but other text (off with --logprobs)")
	fl.Lookup("jump-forward").NoOptDefVal = "exact"
}

// parse compiles the chosen front end into a grammar (nil: none chosen).
// It needs no model, so bad input fails before the model loads; errors
// are usage errors carrying the compiler's location (a JSON pointer into
// the schema, a line and column of the grammar file).
func (g *grammarFlags) parse() (*grammar.Grammar, error) {
	n := 0
	for _, s := range []string{g.jsonSchema, g.regex, g.ebnf, g.choice} {
		if s != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return nil, fmt.Errorf("%w: give at most one of --json-schema, --regex, --grammar and --choice", errUsage)
	case g.jumpForward != "" && g.jumpForward != "exact" && g.jumpForward != "canonical":
		return nil, fmt.Errorf("%w: --jump-forward is exact or canonical, not %q", errUsage, g.jumpForward)
	case n == 0 && g.jumpForward != "":
		return nil, fmt.Errorf("%w: --jump-forward needs --json-schema, --regex, --grammar or --choice", errUsage)
	case n == 0:
		return nil, nil
	case g.jsonIndent < 0:
		return nil, fmt.Errorf("%w: --json-indent must be ≥ 0", errUsage)
	}
	var out *grammar.Grammar
	var err error
	switch {
	case g.jsonSchema != "":
		src := []byte(g.jsonSchema)
		if !strings.HasPrefix(strings.TrimSpace(g.jsonSchema), "{") {
			if src, err = os.ReadFile(g.jsonSchema); err != nil {
				return nil, fmt.Errorf("%w: --json-schema: %v", errUsage, err)
			}
		}
		opt := grammar.JSONOptions{Whitespace: grammar.Compact}
		if g.jsonIndent > 0 {
			opt = grammar.JSONOptions{Whitespace: grammar.Indent, IndentWidth: g.jsonIndent}
		}
		out, err = grammar.JSONSchemaGrammar(src, opt)
		if err != nil {
			return nil, fmt.Errorf("%w: --json-schema %s: %v", errUsage, g.jsonSchema, err)
		}
	case g.regex != "":
		if out, err = grammar.RegexGrammar(g.regex); err != nil {
			return nil, fmt.Errorf("%w: --regex: %v", errUsage, err)
		}
	case g.ebnf != "":
		src, err := os.ReadFile(g.ebnf)
		if err != nil {
			return nil, fmt.Errorf("%w: --grammar: %v", errUsage, err)
		}
		if out, err = grammar.EBNFGrammar(string(src)); err != nil {
			return nil, fmt.Errorf("%w: --grammar %s: %v", errUsage, g.ebnf, err)
		}
	default:
		if out, err = grammar.ChoiceGrammar(strings.Split(g.choice, ",")); err != nil {
			return nil, fmt.Errorf("%w: --choice: %v", errUsage, err)
		}
	}
	return out, nil
}

// bindGrammar compiles gr for the tokenizer's vocabulary, padded to the model's
// logits width vocab, with stop as the tokens that may end the output.
func bindGrammar(gr *grammar.Grammar, tok *tokenizer.Tokenizer, vocab int, stop []int) (*grammar.Matcher, error) {
	v := grammar.NewTokenizerVocab(tok, grammar.DetectVocabKind(tok), vocab, stop)
	ti, err := grammar.NewTokenizerInfo(v)
	if err != nil {
		return nil, err
	}
	return grammar.NewMatcher(grammar.CompileGrammar(gr, ti, grammar.CompileOptions{})), nil
}

// tokCodec lets generate's jump-forward tokenize forced text.
type tokCodec struct{ t *tokenizer.Tokenizer }

func (c tokCodec) Encode(s string) []int32 { return toInt32s(c.t.Encode(s, false)) }

func (c tokCodec) Decode(ids []int32) string {
	in := make([]int, len(ids))
	for i, v := range ids {
		in[i] = int(v)
	}
	return c.t.Decode(in, false)
}

var _ generate.Codec = tokCodec{}

// useGrammar binds the parsed grammar to the model's vocabulary and puts
// it (and jump-forward) into opts. Its stop tokens are the model's EOS ids
// even with --ignore-eos: a grammar that has matched must be able to end.
func useGrammar(gr *grammar.Grammar, f *genFlags, tok *tokenizer.Tokenizer, vocab int, eos []int, opts *generate.Options, stderr io.Writer) error {
	if tok == nil {
		return fmt.Errorf("%w: constrained output needs %s/tokenizer.json", errUsage, f.dir)
	}
	m, err := bindGrammar(gr, tok, vocab, eosIDs(eos, tok))
	if err != nil {
		return err
	}
	opts.Grammar = m
	if f.gram.jumpForward != "" {
		if f.logprobs > 0 {
			fmt.Fprintln(stderr, "mlxgo: --jump-forward is off with --logprobs (forced tokens have no alternatives)")
		}
		opts.JumpForward, opts.Codec = true, tokCodec{tok}
		if f.gram.jumpForward == "canonical" {
			opts.JumpMode = generate.JumpCanonical
		}
	}
	return nil
}
