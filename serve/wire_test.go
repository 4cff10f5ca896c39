package serve

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestWireEncoding pins the bytes of the response shapes where null,
// absent and empty differ on the wire (SDKs read them differently).
func TestWireEncoding(t *testing.T) {
	empty := ""
	finish := "stop"
	call := openaiToolCall{ID: "call_1", Type: "function", Function: openaiFunctionCall{Name: "f", Arguments: "{}"}}
	indexed := call
	indexed.Index = new(0)
	u := usage(outcome{})
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"tool-call reply: content null", assistantMessage{Role: "assistant", ToolCalls: []openaiToolCall{call}},
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]}`},
		{"text reply: no tool_calls or reasoning", assistantMessage{Role: "assistant", Content: &empty},
			`{"role":"assistant","content":""}`},
		{"chat choice: logprobs null", chatChoice{Message: assistantMessage{Role: "assistant", Content: &empty}, FinishReason: "length"},
			`{"index":0,"message":{"role":"assistant","content":""},"logprobs":null,"finish_reason":"length"}`},
		{"first delta", chatDelta{Role: "assistant", Content: &empty}, `{"role":"assistant","content":""}`},
		{"last delta", chatDelta{}, `{}`},
		{"stream call: index 0 written", indexed, `{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}`},
		{"chunk: finish null, no usage", openaiObject[chatChunkChoice]{ID: "x", Object: "chat.completion.chunk", Choices: []chatChunkChoice{{}}},
			`{"id":"x","object":"chat.completion.chunk","created":0,"model":"","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":null}]}`},
		{"usage chunk: empty choices", openaiObject[completionChoice]{ID: "x", Object: "text_completion", Choices: []completionChoice{}, Usage: &u},
			`{"id":"x","object":"text_completion","created":0,"model":"","choices":[],"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,"prompt_tokens_details":{"cached_tokens":0}}}`},
		{"completion choice", completionChoice{Text: "a", FinishReason: &finish},
			`{"index":0,"text":"a","logprobs":null,"finish_reason":"stop"}`},
		{"logprob: empty lists", tokenLogprob{Bytes: byteList(""), TopLogprobs: []topLogprob{}},
			`{"token":"","logprob":0,"bytes":[],"top_logprobs":[]}`},
		{"OpenAI error: param and code null", openaiError{}, `{"error":{"message":"","type":"","param":null,"code":null}}`},
		{"message_start", messageStartEvent{Type: "message_start", Message: anthropicResponse{ID: "m", Type: "message", Role: "assistant", Content: []contentBlock{}, Usage: anthropicUsage{InputTokens: 3}}},
			`{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":0}}}`},
		{"final usage", messagesUsage(outcome{}), `{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}`},
		{"blocks", []contentBlock{thinkingBlock{Type: "thinking", Signature: new("")}, thinkingBlock{Type: "thinking"}, textBlock{Type: "text"},
			toolUseBlock{Type: "tool_use", ID: "toolu_1", Input: json.RawMessage("{}")}},
			`[{"type":"thinking","thinking":"","signature":""},{"type":"thinking","thinking":""},{"type":"text","text":""},{"type":"tool_use","id":"toolu_1","name":"","input":{}}]`},
		{"delta event", blockDeltaEvent{Type: "content_block_delta", Delta: inputJSONDelta{Type: "input_json_delta", PartialJSON: "{}"}},
			`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}`},
		{"template tool call: keys sorted", templateMessage{"role": "assistant", "tool_calls": []templateToolCall{{ID: "c", Type: "function", Function: templateFunction{Name: "f", Arguments: json.RawMessage(`{"b":1}`)}}}},
			`{"role":"assistant","tool_calls":[{"function":{"arguments":{"b":1},"name":"f"},"id":"c","type":"function"}]}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", c.name, b, err, c.want)
		}
	}
}

// TestWireDecoding: the polymorphic request members accept each of their
// forms and refuse the rest.
func TestWireDecoding(t *testing.T) {
	text := func(s string) *string { return &s }
	cases := []struct {
		in   string
		into any // a pointer to a zero value
		want any // the decoded value; nil: an error
	}{
		{`"hi"`, &messageContent{}, &messageContent{Text: "hi"}},
		{`null`, &messageContent{}, &messageContent{}},
		{`[]`, &messageContent{}, &messageContent{Parts: []contentPart{}}},
		{`[{"type":"text","text":"a"},{"type":5,"text":null},{"TYPE":"x","text":3},null]`, &messageContent{},
			&messageContent{Parts: []contentPart{{Type: "text", Text: text("a")}, {Text: text("")}, {}, {}}}},
		{`5`, &messageContent{}, nil},
		{`["a"]`, &messageContent{}, nil},
		{`"x"`, &stopList{}, &stopList{"x"}},
		{`["x","y"]`, &stopList{}, &stopList{"x", "y"}},
		{`null`, &stopList{"old"}, new(stopList)},
		{`[1]`, &stopList{}, nil},
		{`"required"`, &toolChoice{}, &toolChoice{Mode: "required"}},
		{`{"type":"function","function":{"name":"f"}}`, &toolChoice{}, &toolChoice{Function: "f"}},
		{`{}`, &toolChoice{}, &toolChoice{}},
		{`5`, &toolChoice{}, nil},
		{`"a"`, &completionPrompt{}, &completionPrompt{Texts: []string{"a"}}},
		{`["a","b"]`, &completionPrompt{}, &completionPrompt{Texts: []string{"a", "b"}}},
		{`[]`, &completionPrompt{}, &completionPrompt{Texts: []string{}}},
		{`[1,2]`, &completionPrompt{}, &completionPrompt{Tokens: [][]int32{{1, 2}}}},
		{`[[1],[2,3]]`, &completionPrompt{}, &completionPrompt{Tokens: [][]int32{{1}, {2, 3}}}},
		{`[1.5]`, &completionPrompt{}, nil},
		{`{"a":1}`, &completionPrompt{}, nil},
		{`"sys"`, &anthropicContent{}, &anthropicContent{{Type: "text", Text: "sys"}}},
		{`null`, &anthropicContent{}, &anthropicContent{{Type: "text"}}},
		{`[{"type":"tool_use","id":"t","name":"f","input":{"a":1}}]`, &anthropicContent{},
			&anthropicContent{{Type: "tool_use", ID: "t", Name: "f", Input: json.RawMessage(`{"a":1}`)}}},
		{`[{"type":"text","text":5}]`, &anthropicContent{}, nil},
	}
	for _, c := range cases {
		err := json.Unmarshal([]byte(c.in), c.into)
		switch {
		case c.want == nil && err == nil:
			t.Errorf("%T from %s: accepted as %+v", c.into, c.in, c.into)
		case c.want != nil && (err != nil || !reflect.DeepEqual(c.into, c.want)):
			t.Errorf("%T from %s: got %+v (%v), want %+v", c.into, c.in, c.into, err, c.want)
		}
	}
}
