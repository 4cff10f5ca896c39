package grammar

import (
	"fmt"
	"strings"
	"unicode"
)

// TaggedSchema is one alternative of a TaggedSchemaGrammar: the literal
// Begin, a JSON value valid against Schema, the literal End. A tool call
// is one: Begin is the model family's call opener with the tool's name
// (`<tool_call>{"name": "f", "arguments": `), Schema the tool's
// parameters, End the closer.
type TaggedSchema struct {
	Begin  string
	Schema []byte
	End    string
}

// TaggedOptions tune TaggedSchemaGrammar.
type TaggedOptions struct {
	// JSON lays out the schema values.
	JSON JSONOptions
	// MaxItems bounds the tagged values (0: no bound); at least one is
	// always required.
	MaxItems int
	// Separator is the literal between two values ("" for none);
	// whitespace may surround it.
	Separator string
	// ReasoningOpen and ReasoningClose delimit an optional reasoning block
	// before the first value (free text without ReasoningClose); with
	// InReasoning the output starts inside the block (the prompt opened
	// it), so the text up to ReasoningClose is required.
	ReasoningOpen, ReasoningClose string
	InReasoning                   bool
}

// TaggedSchemaGrammar is the grammar of one or more (up to MaxItems)
// tagged JSON values, each of them one of alts with a value valid against
// that alternative's schema, separated by optional whitespace and
// Separator, optionally after a reasoning block. It is what a server
// enforces for tool_choice "required" or a named tool.
func TaggedSchemaGrammar(alts []TaggedSchema, opt TaggedOptions) (*Grammar, error) {
	if len(alts) == 0 {
		return nil, &Error{Location: "tagged", Msg: "no alternatives"}
	}
	if opt.JSON.IndentWidth <= 0 {
		opt.JSON.IndentWidth = 2
	}
	b := &builder{}
	root := b.rule("root")
	var items []*expr
	for i, a := range alts {
		s, err := decodeOrdered(a.Schema)
		if err != nil {
			return nil, &Error{Location: fmt.Sprintf("tagged[%d]", i), Msg: "schema is not valid JSON: " + err.Error()}
		}
		c := &schemaCompiler{b: b, root: s, opt: opt.JSON, refRules: map[string]int{}, anyRules: map[int]int{}, strRule: -1, inlining: map[string]bool{}}
		e, err := c.compile(s, "#", 0)
		if err != nil {
			if ge, ok := err.(*Error); ok {
				ge.Location = fmt.Sprintf("tagged[%d]%s", i, strings.TrimPrefix(ge.Location, "#"))
			}
			return nil, err
		}
		if e.op == opNone {
			return nil, &Error{Location: fmt.Sprintf("tagged[%d]", i), Msg: "the schema allows no value"}
		}
		items = append(items, eSeq(eLit(a.Begin), e, eLit(a.End)))
	}
	item := b.rule("item")
	b.set(item, eAlt(items...))
	var ws byteSet
	for _, c := range []byte(" \t\n\r") {
		ws.addRange(c, c)
	}
	w := eRep(eSet(ws), 0, 4) // bounded, so that a weak model cannot loop on blanks
	sep := eSeq(w, eLit(opt.Separator), w)
	var body *expr
	if opt.MaxItems == 1 {
		body = eRef(item)
	} else if opt.MaxItems > 1 {
		body = eSeq(eRef(item), eRep(eSeq(sep, eRef(item)), 0, opt.MaxItems-1))
	} else {
		body = eSeq(eRef(item), eStar(eSeq(sep, eRef(item))))
	}
	var pre *expr = eEmpty
	if opt.ReasoningClose != "" && (opt.InReasoning || opt.ReasoningOpen != "") {
		anyText := eStar(eRunes(0, unicode.MaxRune))
		withClose := eSeq(anyText, eLit(opt.ReasoningClose), anyText)
		free, err := regularOp(anyText, withClose, false)
		if err != nil {
			return nil, &Error{Location: "tagged", Msg: err.Error()}
		}
		block := eSeq(free, eLit(opt.ReasoningClose), w)
		if opt.InReasoning {
			pre = block
		} else {
			pre = eOpt(eSeq(eLit(opt.ReasoningOpen), block))
		}
	}
	b.set(root, eSeq(pre, body, w))
	return finishGrammar(b, root)
}

// TaggedSchemas compiles a TaggedSchemaGrammar (cached like the others).
func (c *Compiler) TaggedSchemas(alts []TaggedSchema, opt TaggedOptions) (*CompiledGrammar, error) {
	var k strings.Builder
	fmt.Fprintf(&k, "tagged\x00%d\x00%d\x00%v\x00%d\x00%q\x00%q\x00%q\x00%v", opt.JSON.Whitespace, opt.JSON.IndentWidth, opt.JSON.StrictProperties,
		opt.MaxItems, opt.Separator, opt.ReasoningOpen, opt.ReasoningClose, opt.InReasoning)
	for _, a := range alts {
		fmt.Fprintf(&k, "\x00%d:%s%d:%s%d:%s", len(a.Begin), a.Begin, len(a.Schema), a.Schema, len(a.End), a.End)
	}
	return c.get(k.String(), func() (*Grammar, error) { return TaggedSchemaGrammar(alts, opt) })
}
