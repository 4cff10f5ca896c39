package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// ChatTemplate is a compiled chat template (Jinja) with the semantics of
// transformers' apply_chat_template: trim_blocks and lstrip_blocks,
// raise_exception, strftime_now, and a tojson that writes what Python's
// json.dumps(ensure_ascii=False) writes. It is safe for concurrent use.
type ChatTemplate struct {
	src  string
	tmpl *jinja.Template
	vars map[string]jinja.Value // special tokens
}

// ChatRequest is one rendering of a chat template. Messages, Tools and
// Documents are anything encoding/json can marshal (a json.RawMessage is
// used as is); objects keep their key order, which matters to tojson.
type ChatRequest struct {
	// Messages is the conversation: objects with "role" and "content" (a
	// string or a list of content parts), and optionally "tool_calls",
	// "reasoning_content", "name" and so on.
	Messages any
	// Tools are tool (function) definitions; nil renders `tools` as None.
	Tools any
	// Documents are retrieval documents; nil renders `documents` as None.
	Documents any
	// AddGenerationPrompt appends the prompt that starts an assistant turn.
	AddGenerationPrompt bool
	// Kwargs are extra template variables (HF chat_template_kwargs), such as
	// {"enable_thinking": false}.
	Kwargs map[string]any
}

// TemplateError is the message of a template's raise_exception (or another
// rendering failure), as the template wrote it.
type TemplateError struct {
	Message string
}

// Error returns the template's message unchanged.
func (e *TemplateError) Error() string { return e.Message }

// ChatTemplate returns the named chat template of a loaded model folder ("" for
// the default one).
func (t *Tokenizer) ChatTemplate(name string) (*ChatTemplate, error) {
	src := t.Config.ChatTemplate
	if name != "" && name != "default" {
		var ok bool
		if src, ok = t.Config.ChatTemplates[name]; !ok {
			return nil, fmt.Errorf("no chat template named %q (have %s)", name, strings.Join(keys(t.Config.ChatTemplates), ", "))
		}
	}
	if src == "" {
		return nil, errors.New("the model has no chat template (tokenizer_config.json chat_template, chat_template.json or chat_template.jinja)")
	}
	return CompileChatTemplate(src, t.Config.SpecialTokens, t.Config.AdditionalSpecialTokens)
}

// CompileChatTemplate compiles template source. specialTokens become template
// variables (bos_token, eos_token, ...); additional is
// additional_special_tokens.
func CompileChatTemplate(src string, specialTokens map[string]string, additional []string) (*ChatTemplate, error) {
	tmpl, err := jinja.Compile(rewriteFilters(src))
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	vars := map[string]jinja.Value{}
	for k, v := range specialTokens {
		vars[k] = jinja.NewString(v)
	}
	if additional != nil {
		items := make([]jinja.Value, len(additional))
		for i, s := range additional {
			items[i] = jinja.NewString(s)
		}
		vars["additional_special_tokens"] = jinja.NewList(items)
	}
	vars[tojsonName] = jinja.NewCallable("tojson", pyToJSON)
	return &ChatTemplate{src: src, tmpl: tmpl, vars: vars}, nil
}

// Source returns the template text.
func (c *ChatTemplate) Source() string { return c.src }

// Render renders the template for one request.
func (c *ChatTemplate) Render(r ChatRequest) (string, error) {
	data := make(map[string]jinja.Value, len(c.vars)+8)
	for k, v := range c.vars {
		data[k] = v
	}
	for k, v := range r.Kwargs {
		val, err := toValue(v)
		if err != nil {
			return "", fmt.Errorf("chat template kwargs %q: %w", k, err)
		}
		data[k] = val
	}
	msgs, err := toValue(r.Messages)
	if err != nil {
		return "", fmt.Errorf("chat messages: %w", err)
	}
	if !msgs.IsList() {
		return "", fmt.Errorf("chat messages: want a list, got %s", kindName(msgs))
	}
	data["messages"] = msgs
	for _, f := range []struct {
		name string
		v    any
	}{{"tools", r.Tools}, {"documents", r.Documents}} {
		val, err := toValue(f.v)
		if err != nil {
			return "", fmt.Errorf("chat %s: %w", f.name, err)
		}
		data[f.name] = val
	}
	data["add_generation_prompt"] = jinja.NewBool(r.AddGenerationPrompt)
	out, err := c.tmpl.RenderValues(data)
	if err != nil {
		return "", &TemplateError{Message: err.Error()}
	}
	return out, nil
}

// tojsonName replaces the engine's tojson filter, which does not write what
// Python's json.dumps writes (floats, indent, key order).
const tojsonName = "__mlxgo_tojson"

// rewriteFilters renames the tojson filter inside template tags so that the
// Python-compatible one (a template variable) is used.
func rewriteFilters(src string) string {
	var b strings.Builder
	inTag := false
	var quote byte
	for i := 0; i < len(src); i++ {
		c := src[i]
		if !inTag {
			if c == '{' && i+1 < len(src) && (src[i+1] == '{' || src[i+1] == '%') {
				inTag = true
				b.WriteString(src[i : i+2])
				i++
				continue
			}
			b.WriteByte(c)
			continue
		}
		if quote != 0 {
			b.WriteByte(c)
			if c == '\\' && i+1 < len(src) {
				b.WriteByte(src[i+1])
				i++
			} else if c == quote {
				quote = 0
			}
			continue
		}
		switch {
		case c == '"' || c == '\'':
			quote = c
		case (c == '}' || c == '%') && i+1 < len(src) && src[i+1] == '}':
			inTag = false
			b.WriteString(src[i : i+2])
			i++
			continue
		case c == '|':
			j := i + 1
			for j < len(src) && (src[j] == ' ' || src[j] == '\t' || src[j] == '\n') {
				j++
			}
			if strings.HasPrefix(src[j:], "tojson") && !isIdentByte(src, j+6) {
				b.WriteString(src[i:j])
				b.WriteString(tojsonName)
				i = j + 5
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isIdentByte(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	c := s[i]
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// toValue converts a Go value to a template value through JSON, keeping the
// key order of objects and the int/float distinction of numbers.
func toValue(v any) (jinja.Value, error) {
	if v == nil {
		return jinja.None(), nil
	}
	var data []byte
	switch x := v.(type) {
	case json.RawMessage:
		data = x
	case []byte:
		data = x
	default:
		var err error
		if data, err = json.Marshal(v); err != nil {
			return jinja.Value{}, err
		}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return jinja.None(), nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	val, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("trailing data after JSON value")
	}
	return val, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '[':
			var items []jinja.Value
			for dec.More() {
				it, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, it)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(kt.(string), val)
			}
			_, err := dec.Token()
			return d, err
		}
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.None(), nil
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return jinja.NewInt(i), nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return jinja.Value{}, err
		}
		return jinja.NewFloat(f), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

func kindName(v jinja.Value) string {
	switch {
	case v.IsNone():
		return "null"
	case v.IsDict():
		return "an object"
	case v.IsString():
		return "a string"
	case v.IsNumber():
		return "a number"
	case v.IsBool():
		return "a boolean"
	}
	return "another value"
}

// pyToJSON is transformers' tojson filter: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys).
func pyToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.NewString(""), nil
	}
	o := jsonOpts{itemSep: ", ", keySep: ": ", indent: -1}
	if v, ok := kwargs["ensure_ascii"]; ok {
		o.ensureASCII = v.IsTruthy()
	}
	if v, ok := kwargs["sort_keys"]; ok {
		o.sortKeys = v.IsTruthy()
	}
	ind, ok := kwargs["indent"]
	if !ok && len(args) > 1 {
		ind, ok = args[1], true
	}
	if ok && !ind.IsNone() && !ind.IsUndefined() {
		switch {
		case ind.IsInt():
			o.indent = int(ind.AsInt())
			o.indentStr = strings.Repeat(" ", max(o.indent, 0))
		case ind.IsString():
			o.indent, o.indentStr = 1, ind.AsString()
		default:
			return jinja.Value{}, errors.New("tojson: indent must be an integer or a string")
		}
		o.itemSep = ","
	}
	if sep, ok := kwargs["separators"]; ok && !sep.IsNone() {
		if !sep.IsList() || sep.AsList().Len() != 2 || !sep.AsList().Get(0).IsString() || !sep.AsList().Get(1).IsString() {
			return jinja.Value{}, errors.New("tojson: separators must be two strings")
		}
		o.itemSep, o.keySep = sep.AsList().Get(0).AsString(), sep.AsList().Get(1).AsString()
	}
	var b strings.Builder
	if err := o.write(&b, args[0], 0); err != nil {
		return jinja.Value{}, err
	}
	return jinja.NewString(b.String()), nil
}

type jsonOpts struct {
	itemSep, keySep string
	indent          int // -1: none
	indentStr       string
	ensureASCII     bool
	sortKeys        bool
}

func (o *jsonOpts) newline(b *strings.Builder, depth int) {
	if o.indent < 0 {
		return
	}
	b.WriteByte('\n')
	for i := 0; i < depth; i++ {
		b.WriteString(o.indentStr)
	}
}

func (o *jsonOpts) write(b *strings.Builder, v jinja.Value, depth int) error {
	switch {
	case v.IsNone(), v.IsUndefined():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloatJSON(v.AsFloat()))
	case v.IsString():
		writePyJSONString(b, v.AsString(), o.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, depth+1)
			if err := o.write(b, it, depth+1); err != nil {
				return err
			}
		}
		o.newline(b, depth)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		ks := d.OrderedKeys()
		if o.sortKeys {
			ks = append([]string(nil), ks...)
			sort.Strings(ks)
		}
		if len(ks) == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, k := range ks {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, depth+1)
			writePyJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			val, _ := d.Get(k)
			if err := o.write(b, val, depth+1); err != nil {
				return err
			}
		}
		o.newline(b, depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: object of type %s is not JSON serializable", kindName(v))
	}
	return nil
}

// pyFloatJSON formats f as Python's json.dumps (float.__repr__) does.
func pyFloatJSON(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pyFloatRepr(f)
}

// pyFloatRepr is Python's repr of a float: the shortest round-tripping
// digits, positional for exponents in [-4, 16), else scientific.
func pyFloatRepr(f float64) string {
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return fmt.Sprintf("%se%s%02d", mant, sign, exp)
}

// writePyJSONString writes s as Python's json.dumps writes a string.
func writePyJSONString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7e:
				if r > 0xFFFF {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
