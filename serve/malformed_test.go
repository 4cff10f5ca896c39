package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestMalformedRequests: each bad or hostile request gets the right
// status and the error object of its route's API (Anthropic's on
// /v1/messages*, OpenAI's elsewhere, with the right param), and the server
// stays healthy.
func TestMalformedRequests(t *testing.T) {
	d := loadDemo(t)
	cfg := d.config()
	cfg.MaxBodyBytes = 4096
	cfg.ContextLength = 64
	_, hs := startServer(t, cfg)
	const chat, comp, msgs = "/v1/chat/completions", "/v1/completions", "/v1/messages"
	const rsp, emb = "/v1/responses", "/v1/embeddings"
	okMsgs := `"messages":[{"role":"user","content":"hi"}]`
	cases := []struct {
		name, method, path, body string
		status                   int
		param                    string // OpenAI's error.param; on Anthropic routes, error.type
	}{
		{"bad json", "POST", chat, `{"messages":`, 400, ""},
		{"empty body", "POST", chat, ``, 400, ""},
		{"array body", "POST", chat, `[1,2]`, 400, ""},
		{"no messages", "POST", chat, `{"max_tokens":3}`, 400, "messages"},
		{"empty messages", "POST", chat, `{"messages":[]}`, 400, "messages"},
		{"messages not list", "POST", chat, `{"messages":"hi"}`, 400, "messages"},
		{"no role", "POST", chat, `{"messages":[{"content":"hi"}]}`, 400, "messages[0].role"},
		{"bad role", "POST", chat, `{"messages":[{"role":"wizard","content":"hi"}]}`, 400, "messages[0].role"},
		{"content number", "POST", chat, `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content"},
		{"image part", "POST", chat, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "messages[0].content[0].type"},
		{"temperature string", "POST", chat, `{` + okMsgs + `,"temperature":"hot"}`, 400, "temperature"},
		{"temperature negative", "POST", chat, `{` + okMsgs + `,"temperature":-1}`, 400, "temperature"},
		{"top_p above 1", "POST", chat, `{` + okMsgs + `,"top_p":1.5}`, 400, "top_p"},
		{"top_k negative", "POST", chat, `{` + okMsgs + `,"top_k":-5}`, 400, "top_k"},
		{"min_p 2", "POST", chat, `{` + okMsgs + `,"min_p":2}`, 400, "min_p"},
		{"max_tokens 0", "POST", chat, `{` + okMsgs + `,"max_tokens":0}`, 400, "max_tokens"},
		{"max_tokens string", "POST", chat, `{` + okMsgs + `,"max_tokens":"ten"}`, 400, "max_tokens"},
		{"n 99", "POST", chat, `{` + okMsgs + `,"n":99}`, 400, "n"},
		{"stop number", "POST", chat, `{` + okMsgs + `,"stop":7}`, 400, "stop"},
		{"stop list of numbers", "POST", chat, `{` + okMsgs + `,"stop":[1,2]}`, 400, "stop"},
		{"logit_bias key", "POST", chat, `{` + okMsgs + `,"logit_bias":{"abc":1}}`, 400, "logit_bias"},
		{"logit_bias id outside", "POST", chat, `{` + okMsgs + `,"logit_bias":{"99999999":1}}`, 400, "logit_bias"},
		{"top_logprobs without logprobs", "POST", chat, `{` + okMsgs + `,"top_logprobs":2}`, 400, "top_logprobs"},
		{"top_logprobs 50", "POST", chat, `{` + okMsgs + `,"logprobs":true,"top_logprobs":50}`, 400, "top_logprobs"},
		{"response_format type", "POST", chat, `{` + okMsgs + `,"response_format":{"type":"yaml"}}`, 400, "response_format.type"},
		{"response_format bad schema", "POST", chat, `{` + okMsgs + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"wat"}}}}`, 400, "response_format"},
		{"structured_outputs two kinds", "POST", chat, `{` + okMsgs + `,"structured_outputs":{"regex":"a+","choice":["x"]}}`, 400, "structured_outputs"},
		{"structured_outputs empty", "POST", chat, `{` + okMsgs + `,"structured_outputs":{}}`, 400, "structured_outputs"},
		{"structured_outputs bad regex", "POST", chat, `{` + okMsgs + `,"structured_outputs":{"regex":"a(b"}}`, 400, "structured_outputs"},
		{"structured_outputs bad grammar", "POST", chat, `{` + okMsgs + `,"structured_outputs":{"grammar":"root ::= missing"}}`, 400, "structured_outputs"},
		{"structured_outputs with response_format", "POST", chat, `{` + okMsgs + `,"structured_outputs":{"regex":"a"},"response_format":{"type":"json_object"}}`, 400, "structured_outputs"},
		{"structured_outputs not object", "POST", chat, `{` + okMsgs + `,"structured_outputs":"a+"}`, 400, "structured_outputs"},
		{"tools not list", "POST", chat, `{` + okMsgs + `,"tools":{"a":1}}`, 400, "tools"},
		{"tool without name", "POST", chat, `{` + okMsgs + `,"tools":[{"type":"function","function":{}}]}`, 400, "tools[0]"},
		{"tool_choice unknown", "POST", chat, `{` + okMsgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "tool_choice"},
		{"over context", "POST", chat, `{` + okMsgs + `,"max_tokens":60}`, 400, "max_tokens"},
		{"prompt over context", "POST", comp, `{"prompt":"` + strings.Repeat("whale ", 80) + `"}`, 400, "messages"},
		{"frequency_penalty 3", "POST", chat, `{` + okMsgs + `,"frequency_penalty":3}`, 400, "frequency_penalty"},
		{"repetition_penalty negative", "POST", chat, `{` + okMsgs + `,"repetition_penalty":-1}`, 400, "repetition_penalty"},
		{"seed string", "POST", chat, `{` + okMsgs + `,"seed":"x"}`, 400, "seed"},
		{"stream not bool", "POST", chat, `{` + okMsgs + `,"stream":"yes"}`, 400, "stream"},
		{"stream_options without stream", "POST", chat, `{` + okMsgs + `,"stream_options":{"include_usage":true}}`, 400, "stream_options"},
		{"template kwargs not object", "POST", chat, `{` + okMsgs + `,"chat_template_kwargs":[1]}`, 400, "chat_template_kwargs"},
		{"completion no prompt", "POST", comp, `{"max_tokens":3}`, 400, "prompt"},
		{"completion prompt object", "POST", comp, `{"prompt":{"a":1}}`, 400, "prompt"},
		{"completion token outside vocab", "POST", comp, `{"prompt":[1,2,999999]}`, 400, "prompt"},
		{"completion logprobs 30", "POST", comp, `{"prompt":"a","logprobs":30}`, 400, "logprobs"},
		{"unknown model", "POST", chat, `{"model":"gpt-9",` + okMsgs + `}`, 404, "model"},
		{"unknown route", "POST", "/v1/audio/speech", `{}`, 404, ""},
		{"unknown model object", "GET", "/v1/models/gpt-9", ``, 404, "model"},
		{"GET chat", "GET", chat, ``, 405, ""},
		{"DELETE models", "DELETE", "/v1/models", ``, 405, ""},
		{"body too large", "POST", chat, `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, ""},
		{"temperature 2.5", "POST", chat, `{` + okMsgs + `,"temperature":2.5}`, 400, "temperature"},
		{"top_p 0", "POST", chat, `{` + okMsgs + `,"top_p":0}`, 400, "top_p"},
		{"completion temperature 3", "POST", comp, `{"prompt":"a","temperature":3}`, 400, "temperature"},
		{"tool_choice required without tools", "POST", chat, `{` + okMsgs + `,"tool_choice":"required"}`, 400, "tool_choice"},
		{"tool_choice required with response_format", "POST", chat, `{` + okMsgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","response_format":{"type":"json_object"}}`, 400, "tool_choice"},
		{"tool_choice bogus string", "POST", chat, `{` + okMsgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"always"}`, 400, "tool_choice"},
		{"parallel_tool_calls string", "POST", chat, `{` + okMsgs + `,"parallel_tool_calls":"no"}`, 400, "parallel_tool_calls"},
		{"functions", "POST", chat, `{` + okMsgs + `,"functions":[{"name":"f"}]}`, 400, "functions"},
		{"audio", "POST", chat, `{` + okMsgs + `,"audio":{"voice":"alloy"}}`, 400, "audio"},
		{"n 2 streamed", "POST", chat, `{` + okMsgs + `,"n":2,"stream":true}`, 400, "n"},
		{"n 0", "POST", chat, `{` + okMsgs + `,"n":0}`, 400, "n"},
		{"suffix without FIM tokens", "POST", comp, `{"prompt":"def f(","suffix":"return x"}`, 400, "suffix"},
		{"best_of 3", "POST", comp, `{"prompt":"a","best_of":3}`, 400, "best_of"},
		{"echo with logprobs", "POST", comp, `{"prompt":"a","echo":true,"logprobs":2}`, 400, "echo"},
		{"empty prompt list", "POST", comp, `{"prompt":[]}`, 400, "prompt"},
		{"too many prompts", "POST", comp, `{"prompt":[` + strings.TrimSuffix(strings.Repeat(`"a",`, 40), ",") + `]}`, 400, "prompt"},
		{"streamed prompt list", "POST", comp, `{"prompt":["a","b"],"stream":true}`, 400, "prompt"},
		{"unknown GET route", "GET", "/v1/files", ``, 404, ""},
		{"responses no input", "POST", rsp, `{"max_output_tokens":3}`, 400, "input"},
		{"responses input number", "POST", rsp, `{"input":5}`, 400, "input"},
		{"responses empty input list", "POST", rsp, `{"input":[]}`, 400, "input"},
		{"responses item bad role", "POST", rsp, `{"input":[{"role":"wizard","content":"hi"}]}`, 400, "input[0].role"},
		{"responses item no role", "POST", rsp, `{"input":[{"type":"message","content":"hi"}]}`, 400, "input[0].role"},
		{"responses item no content", "POST", rsp, `{"input":[{"role":"user"}]}`, 400, "input[0].content"},
		{"responses image part", "POST", rsp, `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}`, 400, "input[0].content[0].type"},
		{"responses part without text", "POST", rsp, `{"input":[{"role":"user","content":[{"type":"input_text"}]}]}`, 400, "input[0].content[0].text"},
		{"responses unknown item type", "POST", rsp, `{"input":[{"type":"computer_call"}]}`, 400, "input[0].type"},
		{"responses item_reference", "POST", rsp, `{"input":[{"type":"item_reference","id":"msg_1"}]}`, 400, "input[0].type"},
		{"responses call without call_id", "POST", rsp, `{"input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "input[0].call_id"},
		{"responses call bad arguments", "POST", rsp, `{"input":[{"type":"function_call","name":"f","call_id":"c","arguments":"{nope"}]}`, 400, "input[0].arguments"},
		{"responses output without call_id", "POST", rsp, `{"input":[{"type":"function_call_output","output":"x"}]}`, 400, "input[0].call_id"},
		{"responses builtin tool", "POST", rsp, `{"input":"hi","tools":[{"type":"web_search"}]}`, 400, "tools[0].type"},
		{"responses tool without name", "POST", rsp, `{"input":"hi","tools":[{"type":"function"}]}`, 400, "tools[0].name"},
		{"responses tool_choice unknown", "POST", rsp, `{"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, 400, "tool_choice"},
		{"responses tool_choice shape", "POST", rsp, `{"input":"hi","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"file_search"}}`, 400, "tool_choice"},
		{"responses format type", "POST", rsp, `{"input":"hi","text":{"format":{"type":"yaml"}}}`, 400, "text.format.type"},
		{"responses format no schema", "POST", rsp, `{"input":"hi","text":{"format":{"type":"json_schema","name":"x"}}}`, 400, "text.format.schema"},
		{"responses format bad schema", "POST", rsp, `{"input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"wat"}}}}`, 400, "text.format"},
		{"responses verbosity", "POST", rsp, `{"input":"hi","text":{"verbosity":"low"}}`, 400, "text.verbosity"},
		{"responses max_output_tokens 0", "POST", rsp, `{"input":"hi","max_output_tokens":0}`, 400, "max_output_tokens"},
		{"responses max_output_tokens string", "POST", rsp, `{"input":"hi","max_output_tokens":"ten"}`, 400, "max_output_tokens"},
		{"responses over context", "POST", rsp, `{"input":"hi","max_output_tokens":60}`, 400, "max_output_tokens"},
		{"responses temperature 3", "POST", rsp, `{"input":"hi","temperature":3}`, 400, "temperature"},
		{"responses background", "POST", rsp, `{"input":"hi","background":true}`, 400, "background"},
		{"responses reasoning", "POST", rsp, `{"input":"hi","reasoning":{"effort":"high"}}`, 400, "reasoning"},
		{"responses include", "POST", rsp, `{"input":"hi","include":["message.output_text.logprobs"]}`, 400, "include"},
		{"responses conversation", "POST", rsp, `{"input":"hi","conversation":"conv_1"}`, 400, "conversation"},
		{"responses truncation auto", "POST", rsp, `{"input":"hi","truncation":"auto"}`, 400, "truncation"},
		{"responses unknown previous", "POST", rsp, `{"input":"hi","previous_response_id":"resp_x"}`, 404, "previous_response_id"},
		{"responses unknown model", "POST", rsp, `{"model":"gpt-9","input":"hi"}`, 404, "model"},
		{"responses GET unknown id", "GET", rsp + "/resp_x", ``, 404, "response_id"},
		{"responses PATCH id", "PATCH", rsp + "/resp_x", ``, 405, ""},
		{"responses GET list", "GET", rsp, ``, 405, ""},
		{"embeddings no input", "POST", emb, `{}`, 400, "input"},
		{"embeddings input object", "POST", emb, `{"input":{"a":1}}`, 400, "input"},
		{"embeddings empty list", "POST", emb, `{"input":[]}`, 400, "input"},
		{"embeddings empty string", "POST", emb, `{"input":""}`, 400, "input"},
		{"embeddings empty string in list", "POST", emb, `{"input":["a",""]}`, 400, "input[1]"},
		{"embeddings token outside vocab", "POST", emb, `{"input":[1,2,999999]}`, 400, "input"},
		{"embeddings too many inputs", "POST", emb, `{"input":[` + strings.TrimSuffix(strings.Repeat(`"a",`, 130), ",") + `]}`, 400, "input"},
		{"embeddings input over context", "POST", emb, `{"input":"` + strings.Repeat("whale ", 80) + `"}`, 400, "input"},
		{"embeddings encoding_format", "POST", emb, `{"input":"a","encoding_format":"int8"}`, 400, "encoding_format"},
		{"embeddings dimensions 0", "POST", emb, `{"input":"a","dimensions":0}`, 400, "dimensions"},
		{"embeddings dimensions shortened", "POST", emb, `{"input":"a","dimensions":3}`, 400, "dimensions"},
		{"embeddings dimensions string", "POST", emb, `{"input":"a","dimensions":"all"}`, 400, "dimensions"},
		{"embeddings unknown model", "POST", emb, `{"model":"text-embedding-3-small","input":"a"}`, 404, "model"},
		{"embeddings GET", "GET", emb, ``, 405, ""},
		{"anthropic no max_tokens", "POST", msgs, `{"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic bad role", "POST", msgs, `{"max_tokens":5,"messages":[{"role":"system","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic image block", "POST", msgs, `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image"}]}]}`, 400, "invalid_request_error"},
		{"anthropic bad json", "POST", msgs, `{"max_tokens":`, 400, "invalid_request_error"},
		{"anthropic temperature 1.5", "POST", msgs, `{"max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic top_p 0", "POST", msgs, `{"max_tokens":5,"top_p":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic top_k negative", "POST", msgs, `{"max_tokens":5,"top_k":-1,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic tool_choice unknown type", "POST", msgs, `{"max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"sometimes"},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic tool_choice tool without name", "POST", msgs, `{"max_tokens":5,"tools":[{"name":"f"}],"tool_choice":{"type":"tool"},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic tool_choice any without tools", "POST", msgs, `{"max_tokens":5,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic tool_choice names a missing tool", "POST", msgs, `{"max_tokens":5,"tools":[{"name":"f"}],"tool_choice":{"type":"tool","name":"g"},"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic mcp_servers", "POST", msgs, `{"max_tokens":5,"mcp_servers":[{"url":"x"}],"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error"},
		{"anthropic unknown model", "POST", msgs, `{"model":"claude-9","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, 404, "not_found_error"},
		{"anthropic GET", "GET", msgs, ``, 405, "invalid_request_error"},
		{"anthropic unknown subroute", "POST", msgs + "/batches", `{}`, 404, "not_found_error"},
		{"anthropic body too large", "POST", msgs, `{"max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "request_too_large"},
		{"count_tokens bad json", "POST", msgs + "/count_tokens", `{"messages":`, 400, "invalid_request_error"},
		{"count_tokens no messages", "POST", msgs + "/count_tokens", `{}`, 400, "invalid_request_error"},
		{"count_tokens GET", "GET", msgs + "/count_tokens", ``, 405, "invalid_request_error"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, hs.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, resp.StatusCode, c.status, raw)
			continue
		}
		if anthropicRoute(c.path) {
			var e struct {
				Type  string `json:"type"`
				Error *struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(raw, &e); err != nil || e.Type != "error" || e.Error == nil || e.Error.Message == "" || e.Error.Type != c.param {
				t.Errorf("%s: not an Anthropic %s error: %s", c.name, c.param, raw)
			}
			continue
		}
		var e struct {
			Error *struct {
				Message *string `json:"message"`
				Type    *string `json:"type"`
				Param   *string `json:"param"`
				Code    any     `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Error == nil || e.Error.Message == nil || *e.Error.Message == "" || e.Error.Type == nil {
			t.Errorf("%s: not an OpenAI error object: %s", c.name, raw)
			continue
		}
		if !strings.Contains(string(raw), `"param"`) || !strings.Contains(string(raw), `"code"`) {
			t.Errorf("%s: error lacks param or code: %s", c.name, raw)
		}
		got := ""
		if e.Error.Param != nil {
			got = *e.Error.Param
		}
		if got != c.param {
			t.Errorf("%s: param %q, want %q (%s)", c.name, got, c.param, raw)
		}
	}
	if n := len(cases); n < 60 {
		t.Fatalf("only %d cases", n)
	}
	resp, err := http.Get(hs.URL + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("unhealthy after the bad requests: %v %v", resp, err)
	}
	resp.Body.Close()
	code, out := post(t, hs.URL+chat, `{`+okMsgs+`,"max_tokens":3,"temperature":0}`)
	if code != 200 {
		t.Fatalf("a good request after the bad ones: %d %v", code, out)
	}
}
