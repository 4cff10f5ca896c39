package serve

import (
	"strings"
	"testing"
)

// feedAll feeds text in pieces of n bytes (to cross marker boundaries)
// and returns the merged result.
func feedAll(p *outputParser, text string, n int) delta {
	var d delta
	for i := 0; i < len(text); i += n {
		d.add(p.Feed(text[i:min(i+n, len(text))]))
	}
	d.add(p.Finish())
	return d
}

func TestOutputParser(t *testing.T) {
	hermes := outputFormat{tools: toolsHermes, toolStart: "<tool_call>", toolEnd: "</tool_call>", thinkStart: "<think>", thinkEnd: "</think>"}
	gemma := outputFormat{tools: toolsGemma4, toolStart: "<|tool_call>", toolEnd: "<tool_call|>", thinkStart: "<|channel>thought", thinkEnd: "<channel|>"}
	llama := outputFormat{tools: toolsLlama3}
	cases := []struct {
		name               string
		f                  outputFormat
		tools, inThink     bool
		text               string
		content, reasoning string
		calls              []string // name + args
	}{
		{"plain", hermes, true, false, "Hello <b>world</b>", "Hello <b>world</b>", "", nil},
		{"hermes call", hermes, true, false, "Sure.<tool_call>\n{\"name\": \"f\", \"arguments\": {\"b\": 1, \"a\": \"x\"}}\n</tool_call>", "Sure.", "", []string{`f{"b":1,"a":"x"}`}},
		{"hermes string args", hermes, true, false, `<tool_call>{"name":"f","arguments":"{\"q\": 2}"}</tool_call>`, "", "", []string{`f{"q":2}`}},
		{"hermes two calls", hermes, true, false, `<tool_call>{"name":"f","arguments":{}}</tool_call><tool_call>{"name":"g","arguments":{"k":[1,2]}}</tool_call>`, "", "", []string{`f{}`, `g{"k":[1,2]}`}},
		{"hermes no tools offered", hermes, false, false, `<tool_call>{"name":"f"}</tool_call>`, `<tool_call>{"name":"f"}</tool_call>`, "", nil},
		{"hermes bad json kept", hermes, true, false, `<tool_call>not json</tool_call>`, `<tool_call>not json</tool_call>`, "", nil},
		{"hermes unterminated", hermes, true, false, `<tool_call>{"name":"f","arguments":{"a":1}}`, "", "", []string{`f{"a":1}`}},
		{"think", hermes, false, false, "<think>hmm, 2+2</think>\n\nFour.", "Four.", "hmm, 2+2", nil},
		{"think opened by prompt", hermes, false, true, "pondering</think>Done", "Done", "pondering", nil},
		{"unfinished think", hermes, false, false, "<think>still going", "", "still going", nil},
		{"prefix of marker at end", hermes, true, false, "a <tool", "a <tool", "", nil},
		{"gemma call", gemma, true, false, `<|tool_call>call:get_weather{city:<|"|>Paris, FR<|"|>,days:3,units:{metric:true},tags:[<|"|>a<|"|>,<|"|>b}<|"|>]}<tool_call|>`, "", "", []string{`get_weather{"city":"Paris, FR","days":3,"units":{"metric":true},"tags":["a","b}"]}`}},
		{"gemma two calls", gemma, true, false, `<|tool_call>call:a{x:1}<tool_call|><|tool_call>call:b{}<tool_call|>`, "", "", []string{`a{"x":1}`, `b{}`}},
		{"gemma thought", gemma, false, false, "<|channel>thought\nI should answer.<channel|>The answer.", "The answer.", "\nI should answer.", nil},
		{"llama json", llama, true, false, ` {"name": "search", "parameters": {"q": "go"}}`, "", "", []string{`search{"q":"go"}`}},
		{"llama python tag, two", llama, true, false, `<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"z": null}}`, "", "", []string{`a{}`, `b{"z":null}`}},
		{"llama text", llama, true, false, `The answer is {"x": 1}`, `The answer is {"x": 1}`, "", nil},
		{"llama json without name", llama, true, false, `{"x": 1}`, `{"x": 1}`, "", nil},
	}
	for _, c := range cases {
		for _, n := range []int{1, 3, 1000} {
			d := feedAll(newOutputParser(c.f, c.tools, c.inThink), c.text, n)
			var calls []string
			for _, k := range d.calls {
				calls = append(calls, k.Name+k.Arguments)
				if !strings.HasPrefix(k.ID, "call_") {
					t.Errorf("%s: call id %q", c.name, k.ID)
				}
			}
			if d.content != c.content || d.reasoning != c.reasoning || strings.Join(calls, "|") != strings.Join(c.calls, "|") {
				t.Errorf("%s (pieces of %d): content %q reasoning %q calls %q; want %q %q %q", c.name, n, d.content, d.reasoning, calls, c.content, c.reasoning, c.calls)
			}
		}
	}
}

func TestDetectFormat(t *testing.T) {
	d := loadDemo(t)
	if f := detectFormat("", d.tok, scriptedTemplate); f.tools != toolsHermes || f.thinkStart != "<think>" {
		t.Errorf("scripted template: %+v", f)
	}
	if f := detectFormat("", d.tok, d.tmpl.Source()); f.tools != "" || f.thinkStart != "" {
		t.Errorf("demo template: %+v", f)
	}
	if f := detectFormat("", d.tok, "{{ '<|tool_call>' }}{{ '<tool_call|>' }}<|channel><channel|>"); f.tools != toolsGemma4 || f.thinkEnd != "<channel|>" {
		t.Errorf("gemma 4 markers: %+v", f)
	}
	if f := detectFormat("", d.tok, "{% if role == 'ipython' %}<|python_tag|>{% endif %}"); f.tools != toolsLlama3 {
		t.Errorf("llama 3 markers: %+v", f)
	}
	if !(outputFormat{thinkStart: "<think>", thinkEnd: "</think>"}).promptOpensThinking("<think>a</think> q <think>\n") {
		t.Error("a prompt ending in <think> opens reasoning")
	}
}
