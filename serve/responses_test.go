package serve

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/sampler"
)

// responseText concatenates the output_text parts of a response's
// message items (what the SDKs call output_text).
func responseText(t testing.TB, obj map[string]any) string {
	t.Helper()
	var b strings.Builder
	out, _ := obj["output"].([]any)
	for _, it := range out {
		item := it.(map[string]any)
		if item["type"] != "message" {
			continue
		}
		for _, p := range item["content"].([]any) {
			part := p.(map[string]any)
			if part["type"] == "output_text" {
				b.WriteString(part["text"].(string))
			}
		}
	}
	return b.String()
}

func usageOf(obj map[string]any, key string) float64 {
	u, _ := obj["usage"].(map[string]any)
	v, _ := u[key].(float64)
	return v
}

// streamEvents posts a streaming request and returns its events, each
// with the SSE event name checked against the payload's type.
func streamEvents(t testing.TB, url string, body map[string]any) []map[string]any {
	t.Helper()
	body["stream"] = true
	raw, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream status %d: %s", resp.StatusCode, b)
	}
	all, _ := io.ReadAll(resp.Body)
	var evs []map[string]any
	for _, block := range strings.Split(strings.TrimSpace(string(all)), "\n\n") {
		var name, data string
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				name = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", block, err)
		}
		if ev["type"] != name {
			t.Errorf("event named %q carries type %v", name, ev["type"])
		}
		evs = append(evs, ev)
	}
	return evs
}

func eventTypes(evs []map[string]any) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i], _ = e["type"].(string)
	}
	return out
}

// TestResponsesPlain: a string input, instructions and a text-part input
// list reply with the greedy text the library generates for the same
// rendered chat, with its token counts.
func TestResponsesPlain(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	msgs := []map[string]string{{"role": "user", "content": "Call me Ishmael."}}
	want, st := d.direct(t, d.chatPrompt(t, msgs), 12, sampler.Params{})
	code, obj := post(t, hs.URL+"/v1/responses", map[string]any{"model": "mlxgo-demo", "input": "Call me Ishmael.", "max_output_tokens": 12, "temperature": 0})
	if code != 200 {
		t.Fatalf("%d %v", code, obj)
	}
	if got := responseText(t, obj); got != want {
		t.Errorf("text %q, want %q", got, want)
	}
	if obj["object"] != "response" || !strings.HasPrefix(obj["id"].(string), "resp_") || obj["model"] != "mlxgo-demo" {
		t.Errorf("envelope %v", obj)
	}
	if usageOf(obj, "input_tokens") != float64(st.PromptTokens) || usageOf(obj, "output_tokens") != float64(st.GeneratedTokens) ||
		usageOf(obj, "total_tokens") != float64(st.PromptTokens+st.GeneratedTokens) {
		t.Errorf("usage %v, want %d in, %d out", obj["usage"], st.PromptTokens, st.GeneratedTokens)
	}
	wantStatus := "completed"
	if st.StopReason == generate.StopLength {
		wantStatus = "incomplete"
	}
	if obj["status"] != wantStatus {
		t.Errorf("status %v, want %s (stop %v)", obj["status"], wantStatus, st.StopReason)
	}

	// The same conversation as items, with a developer message, equals a
	// chat request with a system message.
	sys := []map[string]string{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Call me Ishmael."}}
	want2, _ := d.direct(t, d.chatPrompt(t, sys), 10, sampler.Params{})
	for _, body := range []map[string]any{
		{"instructions": "Be brief.", "input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Call me "}, map[string]any{"type": "input_text", "text": "Ishmael."}}}}},
		{"input": []any{map[string]any{"type": "message", "role": "developer", "content": "Be brief."}, map[string]any{"role": "user", "content": "Call me Ishmael."}}},
	} {
		body["max_output_tokens"], body["temperature"] = 10, 0
		code, obj := post(t, hs.URL+"/v1/responses", body)
		if code != 200 {
			t.Fatalf("%d %v", code, obj)
		}
		if got := responseText(t, obj); got != want2 {
			t.Errorf("items %v: text %q, want %q", body["input"], got, want2)
		}
	}
}

// TestResponsesStream: the event sequence of a streamed response, numbered
// from 0 without gaps, whose deltas add up to the non-streamed text and
// whose final response equals the non-streamed one but for ids.
func TestResponsesStream(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	body := map[string]any{"input": "Call me Ishmael.", "max_output_tokens": 12, "temperature": 0}
	code, plain := post(t, hs.URL+"/v1/responses", body)
	if code != 200 {
		t.Fatalf("%d %v", code, plain)
	}
	evs := streamEvents(t, hs.URL+"/v1/responses", body)
	types := eventTypes(evs)
	for i, e := range evs {
		if e["sequence_number"] != float64(i) {
			t.Fatalf("event %d (%s) has sequence_number %v", i, types[i], e["sequence_number"])
		}
	}
	final := "response.completed"
	if plain["status"] == "incomplete" {
		final = "response.incomplete"
	}
	head := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	tail := []string{"response.output_text.done", "response.content_part.done", "response.output_item.done", final}
	if len(types) < len(head)+len(tail)+1 || !reflect.DeepEqual(types[:len(head)], head) || !reflect.DeepEqual(types[len(types)-len(tail):], tail) {
		t.Fatalf("event order %v", types)
	}
	var text strings.Builder
	for _, e := range evs[len(head) : len(evs)-len(tail)] {
		if e["type"] != "response.output_text.delta" || e["output_index"] != float64(0) || e["content_index"] != float64(0) {
			t.Errorf("unexpected event between the part's start and end: %v", e)
		}
		text.WriteString(e["delta"].(string))
	}
	want := responseText(t, plain)
	if text.String() != want {
		t.Errorf("deltas %q, want %q", text.String(), want)
	}
	if done := evs[len(evs)-4]["text"]; done != want {
		t.Errorf("output_text.done text %v, want %q", done, want)
	}
	if c := evs[0]["response"].(map[string]any); c["status"] != "in_progress" || len(c["output"].([]any)) != 0 {
		t.Errorf("response.created carries %v", c)
	}
	last := evs[len(evs)-1]["response"].(map[string]any)
	if got := responseText(t, last); got != want || last["status"] != plain["status"] || usageOf(last, "output_tokens") != usageOf(plain, "output_tokens") {
		t.Errorf("final response %v, want like %v", last, plain)
	}
	item := evs[len(evs)-2]["item"].(map[string]any)
	if item["id"] != evs[2]["item"].(map[string]any)["id"] || item["id"] != evs[4]["item_id"] {
		t.Errorf("the item's id changes within the stream: %v", types)
	}
}

// TestResponsesChain: previous_response_id continues a stored
// conversation exactly as a chat request carrying the whole history does
// (the same prompt, tokens and text, the cache reused); GET returns the
// stored response; unknown, deleted and unstored ids are 404.
func TestResponsesChain(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	code, r1 := post(t, hs.URL+"/v1/responses", map[string]any{"input": "Call me Ishmael.", "max_output_tokens": 8, "temperature": 0})
	if code != 200 {
		t.Fatalf("%d %v", code, r1)
	}
	id := r1["id"].(string)
	code, r2 := post(t, hs.URL+"/v1/responses", map[string]any{"input": "And then?", "previous_response_id": id, "max_output_tokens": 8, "temperature": 0})
	if code != 200 {
		t.Fatalf("%d %v", code, r2)
	}
	if r2["previous_response_id"] != id {
		t.Errorf("previous_response_id %v", r2["previous_response_id"])
	}
	hist := []map[string]string{{"role": "user", "content": "Call me Ishmael."}, {"role": "assistant", "content": responseText(t, r1)}, {"role": "user", "content": "And then?"}}
	want, st := d.direct(t, d.chatPrompt(t, hist), 8, sampler.Params{})
	if got := responseText(t, r2); got != want {
		t.Errorf("chained text %q, want %q", got, want)
	}
	if usageOf(r2, "input_tokens") != float64(st.PromptTokens) {
		t.Errorf("chained input tokens %v, want %d", usageOf(r2, "input_tokens"), st.PromptTokens)
	}
	if c := r2["usage"].(map[string]any)["input_tokens_details"].(map[string]any)["cached_tokens"].(float64); c == 0 {
		t.Error("the chained turn reused no cached tokens")
	}

	// Instructions apply to their own request only: a chained request's
	// own instructions come first, the first turn had none.
	code, r3 := post(t, hs.URL+"/v1/responses", map[string]any{"input": "And then?", "previous_response_id": id, "max_output_tokens": 8, "temperature": 0, "instructions": "Be brief."})
	want3, _ := d.direct(t, d.chatPrompt(t, append([]map[string]string{{"role": "system", "content": "Be brief."}}, hist...)), 8, sampler.Params{})
	if code != 200 || responseText(t, r3) != want3 || r3["instructions"] != "Be brief." {
		t.Errorf("chained with instructions: %d %q, want %q", code, responseText(t, r3), want3)
	}

	resp, err := http.Get(hs.URL + "/v1/responses/" + id)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || !reflect.DeepEqual(got, r1) {
		t.Errorf("GET: %d %v, want %v", resp.StatusCode, got, r1)
	}

	notFound := func(what string, code int, body map[string]any, param string) {
		t.Helper()
		e, _ := body["error"].(map[string]any)
		if code != 404 || e == nil || e["param"] != param || e["code"] != "response_not_found" {
			t.Errorf("%s: %d %v", what, code, body)
		}
	}
	code, e := post(t, hs.URL+"/v1/responses", map[string]any{"input": "x", "previous_response_id": "resp_nope"})
	notFound("unknown previous_response_id", code, e, "previous_response_id")
	get := func(method, id string) (int, map[string]any) {
		req, _ := http.NewRequest(method, hs.URL+"/v1/responses/"+id, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, e = get("GET", "resp_nope")
	notFound("GET unknown", code, e, "response_id")

	code, unstored := post(t, hs.URL+"/v1/responses", map[string]any{"input": "Hi", "max_output_tokens": 2, "store": false})
	if code != 200 || unstored["store"] != false {
		t.Fatalf("store false: %d %v", code, unstored)
	}
	code, e = get("GET", unstored["id"].(string))
	notFound("GET unstored", code, e, "response_id")
	code, e = post(t, hs.URL+"/v1/responses", map[string]any{"input": "x", "previous_response_id": unstored["id"]})
	notFound("chain on unstored", code, e, "previous_response_id")

	code, del := get("DELETE", id)
	if code != 200 || del["deleted"] != true {
		t.Errorf("DELETE: %d %v", code, del)
	}
	code, e = get("GET", id)
	notFound("GET deleted", code, e, "response_id")
	code, e = get("PUT", id)
	if code != 405 {
		t.Errorf("PUT: %d %v", code, e)
	}
}

// TestResponseStoreEviction: entries expire after the TTL, the oldest go
// first past the byte cap, an entry larger than the cap is not kept; and
// a server with a small cap forgets its oldest responses.
func TestResponseStoreEviction(t *testing.T) {
	now := time.Unix(1000, 0)
	st := newResponseStore(time.Minute, 100)
	st.now = func() time.Time { return now }
	put := func(id string, n int) { st.put(&storedResponse{id: id, bytes: n}) }
	has := func(id string) bool { _, ok := st.get(id); return ok }
	put("a", 40)
	now = now.Add(30 * time.Second)
	put("b", 40)
	if !has("a") || !has("b") {
		t.Fatal("entries within TTL and cap are gone")
	}
	now = now.Add(31 * time.Second) // a is 61 s old, b 31 s
	if has("a") || !has("b") {
		t.Errorf("after a's TTL: a %v, b %v", has("a"), has("b"))
	}
	put("c", 40)
	put("d", 40) // 120 bytes: b, the oldest, goes
	if has("b") || !has("c") || !has("d") {
		t.Errorf("over the cap: b %v c %v d %v", has("b"), has("c"), has("d"))
	}
	if n, b := st.stats(); n != 2 || b != 80 {
		t.Errorf("stats %d entries %d bytes, want 2, 80", n, b)
	}
	put("huge", 101)
	if has("huge") || !has("c") {
		t.Error("an entry over the whole cap displaced others or was kept")
	}
	now = now.Add(2 * time.Minute)
	if n, b := st.stats(); n != 0 || b != 0 {
		t.Errorf("after every TTL: %d entries, %d bytes", n, b)
	}

	d := loadDemo(t)
	srv, hs := startServer(t, d.config())
	var ids []string
	for i := range 4 {
		if i == 1 { // room for about two responses like the first
			_, b := srv.responses.stats()
			srv.responses.mu.Lock()
			srv.responses.max = b * 5 / 2
			srv.responses.mu.Unlock()
		}
		code, r := post(t, hs.URL+"/v1/responses", map[string]any{"input": "Hi", "max_output_tokens": 2})
		if code != 200 {
			t.Fatalf("%d %v", code, r)
		}
		ids = append(ids, r["id"].(string))
	}
	status := func(id string) int {
		resp, err := http.Get(hs.URL + "/v1/responses/" + id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := []int{status(ids[0]), status(ids[1]), status(ids[2]), status(ids[3])}; !reflect.DeepEqual(got, []int{404, 404, 200, 200}) {
		t.Errorf("with a cap of two and a half responses, GET answers %v", got)
	}
}

// TestResponsesTools: with the scripted tool model, a function tool gets
// a function_call item; its output sent back as a function_call_output
// item (after previous_response_id, or with the whole history as items)
// gets the answer; streamed, the call arrives as its added, arguments
// delta/done and done events; reasoning becomes a reasoning item.
func TestResponsesTools(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, scriptedConfig(t, d))
	tools := []any{map[string]any{"type": "function", "name": "get_weather", "description": "Weather in a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}}}
	url := hs.URL + "/v1/responses"
	code, r1 := post(t, url, map[string]any{"model": "scripted", "input": "What is the weather in Paris?", "tools": tools})
	if code != 200 {
		t.Fatalf("%d %v", code, r1)
	}
	out := r1["output"].([]any)
	if len(out) != 1 {
		t.Fatalf("output %v", out)
	}
	call := out[0].(map[string]any)
	if call["type"] != "function_call" || call["name"] != "get_weather" || call["status"] != "completed" || !strings.HasPrefix(call["call_id"].(string), "call_") {
		t.Fatalf("call item %v", call)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(call["arguments"].(string)), &args); err != nil || args["city"] != "Paris" {
		t.Errorf("arguments %v", call["arguments"])
	}
	result := map[string]any{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 24C"}
	code, r2 := post(t, url, map[string]any{"model": "scripted", "previous_response_id": r1["id"], "input": []any{result}, "tools": tools})
	if code != 200 || responseText(t, r2) != "It is sunny in Paris." {
		t.Errorf("after the call: %d %v", code, r2)
	}
	if c := r2["usage"].(map[string]any)["input_tokens_details"].(map[string]any)["cached_tokens"].(float64); c == 0 {
		t.Error("the tool-result turn reused no cached tokens")
	}
	// The same turn with the history sent as items.
	items := []any{map[string]any{"role": "user", "content": "What is the weather in Paris?"}, call, result}
	code, r3 := post(t, url, map[string]any{"model": "scripted", "input": items, "tools": tools, "store": false})
	if code != 200 || responseText(t, r3) != "It is sunny in Paris." {
		t.Errorf("history as items: %d %v", code, r3)
	}

	// Forced: the scripted model would answer "Hello there.", the call
	// grammar makes it a call.
	enum := []any{map[string]any{"type": "function", "name": "get_weather", "strict": true,
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string", "enum": []string{"Paris", "Rome"}}}, "required": []string{"city"}, "additionalProperties": false}}}
	evs := streamEvents(t, url, map[string]any{"model": "scripted", "input": "Hello", "tools": enum, "tool_choice": "required", "max_output_tokens": 200})
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}
	if got := eventTypes(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("streamed call events %v, want %v", got, want)
	}
	if evs[4]["arguments"] != evs[3]["delta"] || evs[4]["arguments"] != evs[5]["item"].(map[string]any)["arguments"] || evs[5]["item"].(map[string]any)["name"] != "get_weather" {
		t.Errorf("streamed call %v / %v / %v", evs[3], evs[4], evs[5])
	}

	code, th := post(t, url, map[string]any{"model": "scripted", "input": "Please think."})
	if code != 200 {
		t.Fatalf("%d %v", code, th)
	}
	out = th["output"].([]any)
	if len(out) != 2 || out[0].(map[string]any)["type"] != "reasoning" || responseText(t, th) != "Forty-two." {
		t.Fatalf("reasoning output %v", out)
	}
	if rt := out[0].(map[string]any)["content"].([]any)[0].(map[string]any)["text"]; rt != "Let me ponder." {
		t.Errorf("reasoning text %v", rt)
	}
	if usageOf(th, "output_tokens") == 0 || th["usage"].(map[string]any)["output_tokens_details"].(map[string]any)["reasoning_tokens"].(float64) == 0 {
		t.Errorf("reasoning usage %v", th["usage"])
	}
	evs = streamEvents(t, url, map[string]any{"model": "scripted", "input": "Please think."})
	types := eventTypes(evs)
	if types[2] != "response.output_item.added" || evs[2]["item"].(map[string]any)["type"] != "reasoning" || !contains(types, "response.reasoning_text.delta") ||
		!contains(types, "response.reasoning_text.done") || types[len(types)-1] != "response.completed" {
		t.Errorf("streamed reasoning events %v", types)
	}
	if final := evs[len(evs)-1]["response"].(map[string]any); responseText(t, final) != "Forty-two." {
		t.Errorf("streamed reasoning final %v", final)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestResponsesFormat: text.format json_schema constrains the output to
// the schema, as response_format does on the chat route.
func TestResponsesFormat(t *testing.T) {
	d := loadDemo(t)
	_, hs := startServer(t, d.config())
	schema := map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}, "additionalProperties": false}
	code, obj := post(t, hs.URL+"/v1/responses", map[string]any{"input": "Answer in JSON.", "max_output_tokens": 40, "temperature": 0,
		"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "r", "schema": schema, "strict": true}}})
	if code != 200 {
		t.Fatalf("%d %v", code, obj)
	}
	var v struct {
		OK *bool `json:"ok"`
	}
	if text := responseText(t, obj); json.Unmarshal([]byte(text), &v) != nil || v.OK == nil {
		t.Errorf("constrained output %q is not the schema's JSON", text)
	}
	if f := obj["text"].(map[string]any)["format"].(map[string]any); f["type"] != "json_schema" || f["name"] != "r" {
		t.Errorf("text.format reported as %v", f)
	}
}
