package serve

import (
	"encoding/json"
	"testing"
)

// weatherTools are two tools whose arguments a greedy model can finish:
// a closed enum and a bounded integer, no other members.
func weatherTools() []any {
	return []any{
		map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{
			"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris", "Rome"}}},
			"required": []string{"city"}, "additionalProperties": false}}},
		map[string]any{"type": "function", "function": map[string]any{"name": "add", "parameters": map[string]any{
			"type": "object", "properties": map[string]any{"a": map[string]any{"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991}},
			"required": []string{"a"}, "additionalProperties": false}}},
	}
}

// checkCalls asserts a chat reply is only calls of allowed tools with
// arguments valid for weatherTools.
func checkCalls(t *testing.T, what string, out map[string]any, allowed ...string) []any {
	t.Helper()
	ch := out["choices"].([]any)[0].(map[string]any)
	msg := ch["message"].(map[string]any)
	calls, _ := msg["tool_calls"].([]any)
	if ch["finish_reason"] != "tool_calls" || len(calls) == 0 {
		t.Fatalf("%s: want tool calls, got %v", what, ch)
	}
	for _, c := range calls {
		fn := c.(map[string]any)["function"].(map[string]any)
		ok := false
		for _, a := range allowed {
			ok = ok || fn["name"] == a
		}
		if !ok {
			t.Errorf("%s: call of %v, allowed %v", what, fn["name"], allowed)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(fn["arguments"].(string)), &args); err != nil {
			t.Errorf("%s: arguments %q: %v", what, fn["arguments"], err)
			continue
		}
		switch fn["name"] {
		case "get_weather":
			if c := args["city"]; len(args) != 1 || (c != "Paris" && c != "Rome") {
				t.Errorf("%s: get_weather arguments %v", what, args)
			}
		case "add":
			if _, ok := args["a"].(float64); len(args) != 1 || !ok {
				t.Errorf("%s: add arguments %v", what, args)
			}
		}
	}
	return calls
}

// TestToolChoiceEnforced: tool_choice required and a named function make
// models that would answer in text (the scripted model says "Hello
// there.", the demo model says whatever it says) call an allowed tool
// with valid arguments; parallel_tool_calls false keeps one call; the
// Anthropic endpoint's any and tool do the same.
func TestToolChoiceEnforced(t *testing.T) {
	d := loadDemo(t)
	_, scripted := startServer(t, scriptedConfig(t, d))
	_, demo := startServer(t, d.config())
	hello := []any{map[string]any{"role": "user", "content": "Hello"}}
	for _, hs := range []string{scripted.URL, demo.URL} {
		code, out := post(t, hs+"/v1/chat/completions", map[string]any{"messages": hello, "tools": weatherTools(), "tool_choice": "required", "max_tokens": 200, "temperature": 0})
		if code != 200 {
			t.Fatalf("required: %d %v", code, out)
		}
		checkCalls(t, "required", out, "get_weather", "add")
		code, out = post(t, hs+"/v1/chat/completions", map[string]any{"messages": hello, "tools": weatherTools(), "max_tokens": 200, "temperature": 0,
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "add"}}, "parallel_tool_calls": false})
		if code != 200 {
			t.Fatalf("named: %d %v", code, out)
		}
		if calls := checkCalls(t, "named", out, "add"); len(calls) != 1 {
			t.Errorf("parallel_tool_calls false gave %d calls", len(calls))
		}
		// Anthropic: any, then tool by name.
		atools := []any{map[string]any{"name": "get_weather", "input_schema": weatherTools()[0].(map[string]any)["function"].(map[string]any)["parameters"]}}
		for _, tc := range []any{map[string]any{"type": "any"}, map[string]any{"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true}} {
			code, out = post(t, hs+"/v1/messages", map[string]any{"max_tokens": 200, "temperature": 0, "messages": hello, "tools": atools, "tool_choice": tc})
			if code != 200 || out["stop_reason"] != "tool_use" {
				t.Fatalf("anthropic %v: %d %v", tc, code, out)
			}
			var uses int
			for _, b := range out["content"].([]any) {
				bl := b.(map[string]any)
				if bl["type"] == "tool_use" {
					uses++
					if in := bl["input"].(map[string]any); bl["name"] != "get_weather" || (in["city"] != "Paris" && in["city"] != "Rome") {
						t.Errorf("anthropic tool_use %v", bl)
					}
				}
			}
			if uses == 0 {
				t.Errorf("anthropic %v: no tool_use block in %v", tc, out)
			}
		}
	}
	// The scripted model's streamed reply under tool_choice required.
	_, evs := streamChat(t, scripted.URL, map[string]any{"messages": hello, "tools": weatherTools(), "tool_choice": "required", "max_tokens": 200})
	found := false
	for _, e := range evs {
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []any `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(e), &c) == nil && len(c.Choices) > 0 && len(c.Choices[0].Delta.ToolCalls) > 0 {
			found = true
		}
	}
	if !found {
		t.Errorf("streamed required reply has no tool call: %v", evs)
	}
}
