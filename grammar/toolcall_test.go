package grammar

import "testing"

// TestTaggedSchemaGrammar: only calls of the listed tools, with arguments
// valid against each tool's schema, up to MaxItems, after an optional
// reasoning block.
func TestTaggedSchemaGrammar(t *testing.T) {
	ti, ids := byteVocab(t)
	alts := []TaggedSchema{
		{Begin: `<tool_call>{"name": "weather", "arguments": `, Schema: []byte(`{"type":"object","properties":{"city":{"type":"string","enum":["Paris","Rome"]}},"required":["city"]}`), End: "}</tool_call>"},
		{Begin: `<tool_call>{"name": "add", "arguments": `, Schema: []byte(`{"type":"object","properties":{"a":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991}},"required":["a"],"additionalProperties":false}`), End: "}</tool_call>"},
	}
	cases := []struct {
		opt  TaggedOptions
		text string
		want bool
	}{
		{TaggedOptions{}, `<tool_call>{"name": "weather", "arguments": {"city":"Paris"}}</tool_call>`, true},
		{TaggedOptions{}, `<tool_call>{"name": "add", "arguments": {"a":9007199254740991}}</tool_call>`, true},
		{TaggedOptions{}, `<tool_call>{"name": "add", "arguments": {"a":9007199254740992}}</tool_call>`, false},
		{TaggedOptions{}, `<tool_call>{"name": "weather", "arguments": {"city":"Oslo"}}</tool_call>`, false},
		{TaggedOptions{}, `<tool_call>{"name": "other", "arguments": {}}</tool_call>`, false},
		{TaggedOptions{}, `Sure! <tool_call>{"name": "add", "arguments": {"a":1}}</tool_call>`, false},
		{TaggedOptions{}, ``, false},
		{TaggedOptions{}, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":1}}</tool_call>\n<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":2}}</tool_call>", true},
		{TaggedOptions{MaxItems: 1}, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":1}}</tool_call>\n<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":2}}</tool_call>", false},
		{TaggedOptions{MaxItems: 1, ReasoningOpen: "<think>", ReasoningClose: "</think>"}, "<think>I need the sum.</think>\n<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":1}}</tool_call>", true},
		{TaggedOptions{MaxItems: 1, ReasoningOpen: "<think>", ReasoningClose: "</think>"}, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":1}}</tool_call>", true},
		{TaggedOptions{MaxItems: 1, ReasoningClose: "</think>", InReasoning: true}, "hmm</think><tool_call>{\"name\": \"add\", \"arguments\": {\"a\":1}}</tool_call>", true},
		{TaggedOptions{MaxItems: 1, ReasoningClose: "</think>", InReasoning: true}, "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\":1}}</tool_call>", false},
		{TaggedOptions{Separator: ";"}, `<tool_call>{"name": "add", "arguments": {"a":1}}</tool_call> ; <tool_call>{"name": "add", "arguments": {"a":2}}</tool_call>`, true},
	}
	for i, c := range cases {
		g, err := TaggedSchemaGrammar(alts, c.opt)
		if err != nil {
			t.Fatal(err)
		}
		ok, done := acceptBytes(NewMatcher(CompileGrammar(g, ti, CompileOptions{Lazy: true})), ids, c.text)
		if got := ok && done; got != c.want {
			t.Errorf("case %d: %q allowed %v, want %v", i, c.text, got, c.want)
		}
	}
	if _, err := TaggedSchemaGrammar(nil, TaggedOptions{}); err == nil {
		t.Error("no alternatives compiled")
	}
	if _, err := TaggedSchemaGrammar([]TaggedSchema{{Schema: []byte(`{"type":"wat"}`)}}, TaggedOptions{}); err == nil {
		t.Error("a bad schema compiled")
	}
}
