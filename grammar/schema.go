package grammar

import (
	"fmt"
	"strings"
)

// Whitespace says how JSON output may be laid out.
type Whitespace int

const (
	// Compact allows no whitespace at all: {"a":1,"b":[2,3]}.
	Compact Whitespace = iota
	// AnyWhitespace allows any run of JSON whitespace between tokens.
	AnyWhitespace
	// Indent requires pretty-printing: a newline and Indent spaces per
	// nesting level before every member, ": " after keys.
	Indent
)

// JSONOptions tune JSON Schema compilation.
type JSONOptions struct {
	Whitespace Whitespace
	// IndentWidth is the spaces per level for Indent (default 2).
	IndentWidth int
	// StrictProperties treats a missing additionalProperties as false, so
	// objects hold only the declared properties.
	StrictProperties bool
}

// maxIndentDepth bounds nesting in Indent mode, where each depth needs its
// own rules; deeper free-form values are limited to scalars.
const maxIndentDepth = 16

type schemaCompiler struct {
	b        *builder
	root     any
	opt      JSONOptions
	refRules map[string]int
	anyRules map[int]int
	strRule  int
	inlining map[string]bool
}

// JSONSchemaGrammar compiles a JSON Schema (draft 2020-12 keywords, with
// draft-07 spellings accepted) to a grammar of the JSON texts it allows.
//
// Generation order is fixed: declared properties appear in schema order
// (optional ones may be skipped), additional properties after them. oneOf
// is compiled as anyOf: exact when the branches are disjoint (different
// types or constants), otherwise a text matching two branches is allowed.
// uniqueItems is read but not enforced (no finite automaton can), so an
// array may repeat an item; Pydantic's set[T] and zod's z.set emit it.
// Numeric bounds may be any JSON number of up to 400 digits.
func JSONSchemaGrammar(schema []byte, opt JSONOptions) (*Grammar, error) {
	root, err := decodeOrdered(schema)
	if err != nil {
		return nil, &Error{Location: "#", Msg: "schema is not valid JSON: " + err.Error()}
	}
	if opt.IndentWidth <= 0 {
		opt.IndentWidth = 2
	}
	c := &schemaCompiler{b: &builder{}, root: root, opt: opt, refRules: map[string]int{}, anyRules: map[int]int{}, strRule: -1, inlining: map[string]bool{}}
	r := c.b.rule("root")
	e, err := c.compile(root, "#", 0)
	if err != nil {
		return nil, err
	}
	c.b.set(r, e)
	return finishGrammar(c.b, r)
}

// JSONObjectGrammar is OpenAPI's response_format json_object: any object.
func JSONObjectGrammar(opt JSONOptions) (*Grammar, error) {
	return JSONSchemaGrammar([]byte(`{"type":"object"}`), opt)
}

func serr(path, kw, format string, args ...any) error {
	return &Error{Location: path, Keyword: kw, Msg: fmt.Sprintf(format, args...)}
}

// ---- layout ----

func (c *schemaCompiler) ws() *expr {
	if c.opt.Whitespace == AnyWhitespace {
		var s byteSet
		s.addRange(' ', ' ')
		s.addRange('\t', '\t')
		s.addRange('\n', '\n')
		s.addRange('\r', '\r')
		return eStar(eSet(s))
	}
	return eEmpty
}

func (c *schemaCompiler) nl(depth int) *expr {
	return eLit("\n" + strings.Repeat(" ", depth*c.opt.IndentWidth))
}

// seps returns, for a container at depth: after open before first member,
// between members, after last member (before close).
func (c *schemaCompiler) seps(depth int) (first, between, last *expr) {
	if c.opt.Whitespace == Indent {
		return c.nl(depth + 1), eSeq(eLit(","), c.nl(depth+1)), c.nl(depth)
	}
	w := c.ws()
	return w, eSeq(w, eLit(","), w), w
}

func (c *schemaCompiler) colon() *expr {
	switch c.opt.Whitespace {
	case Indent:
		return eLit(": ")
	case AnyWhitespace:
		return eSeq(c.ws(), eLit(":"), c.ws())
	}
	return eLit(":")
}

func (c *schemaCompiler) dkey(depth int) int {
	if c.opt.Whitespace == Indent {
		return depth
	}
	return 0
}
