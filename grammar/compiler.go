package grammar

import (
	"fmt"
	"strings"
	"sync"
)

// Compiler compiles grammars for one vocabulary and caches the results by
// grammar text and options, so that a server receiving the same schema on
// every request compiles it once. It is safe for concurrent use; callers
// asking for a grammar being compiled wait for that compilation.
type Compiler struct {
	ti    *TokenizerInfo
	opt   CompileOptions
	max   int
	mu    sync.Mutex
	cache map[string]*cacheEntry
	order []string
}

type cacheEntry struct {
	once sync.Once
	cg   *CompiledGrammar
	err  error
}

// NewCompiler returns a Compiler keeping at most maxEntries grammars
// (0: 256), the oldest evicted first.
func NewCompiler(ti *TokenizerInfo, opt CompileOptions, maxEntries int) *Compiler {
	if maxEntries <= 0 {
		maxEntries = 256
	}
	return &Compiler{ti: ti, opt: opt, max: maxEntries, cache: map[string]*cacheEntry{}}
}

func (c *Compiler) get(key string, build func() (*Grammar, error)) (*CompiledGrammar, error) {
	c.mu.Lock()
	e, ok := c.cache[key]
	if !ok {
		e = &cacheEntry{}
		c.cache[key] = e
		c.order = append(c.order, key)
		if len(c.order) > c.max {
			delete(c.cache, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.mu.Unlock()
	e.once.Do(func() {
		g, err := build()
		if err != nil {
			e.err = err
			return
		}
		e.cg = CompileGrammar(g, c.ti, c.opt)
	})
	return e.cg, e.err
}

// Len is the number of cached grammars.
func (c *Compiler) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cache)
}

// JSONSchema compiles a JSON Schema (see JSONSchemaGrammar).
func (c *Compiler) JSONSchema(schema string, opt JSONOptions) (*CompiledGrammar, error) {
	key := fmt.Sprintf("json\x00%d\x00%d\x00%v\x00%s", opt.Whitespace, opt.IndentWidth, opt.StrictProperties, schema)
	return c.get(key, func() (*Grammar, error) { return JSONSchemaGrammar([]byte(schema), opt) })
}

// JSONObject compiles "any JSON object" (response_format json_object).
func (c *Compiler) JSONObject(opt JSONOptions) (*CompiledGrammar, error) {
	return c.JSONSchema(`{"type":"object"}`, opt)
}

// Regex compiles a Go RE2 regular expression the whole output must match.
func (c *Compiler) Regex(pattern string) (*CompiledGrammar, error) {
	return c.get("regex\x00"+pattern, func() (*Grammar, error) { return RegexGrammar(pattern) })
}

// EBNF compiles a GBNF-style grammar (see EBNFGrammar).
func (c *Compiler) EBNF(src string) (*CompiledGrammar, error) {
	return c.get("ebnf\x00"+src, func() (*Grammar, error) { return EBNFGrammar(src) })
}

// Choice compiles "exactly one of these strings".
func (c *Compiler) Choice(choices []string) (*CompiledGrammar, error) {
	var b strings.Builder
	for _, s := range choices {
		fmt.Fprintf(&b, "%d:%s", len(s), s)
	}
	return c.get("choice\x00"+b.String(), func() (*Grammar, error) { return ChoiceGrammar(choices) })
}
