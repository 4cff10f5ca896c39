// Package serve is the HTTP server: OpenAI- and Anthropic-compatible endpoints with streaming.
//
// A Server serves one model (a generate.Model with its tokenizer and chat
// template) on POST /v1/chat/completions, /v1/completions and /v1/messages
// (Anthropic), GET /v1/models, /health and /stats, as a drop-in for
// mlx_lm.server. One engine goroutine owns the model and runs requests one
// at a time from a bounded FIFO queue (429 with Retry-After when it is
// full); a request's context is the generation's, so a client that leaves
// cancels its generation within one step. The engine keeps a
// generate.PromptCache, so the next turn of a chat prefills only what is
// new, and usage reports the cached tokens.
//
// Text flows token → streaming detokenizer → stop-string matcher (which
// holds back partial characters and possible stop-string prefixes) in
// the engine, then through an output parser in the request's goroutine
// that splits reasoning (<think>…</think>, Gemma 4's thought channel) and
// tool calls (Hermes/Qwen <tool_call> JSON, Gemma 4's call:name{…}
// syntax, Llama 3 JSON) from the content. response_format (json_object,
// json_schema) and the vLLM-style structured_outputs (json, regex, choice,
// grammar) compile to a grammar (package grammar) that masks sampling;
// compiled grammars are cached by their text across requests.
//
// The bodies are typed in wire_openai.go and wire_anthropic.go; request
// members with their own validation are decoded by the handlers in a
// fixed order, so that a request with several mistakes always reports the
// same one.
//
// Errors are OpenAI's error object (Anthropic's on /v1/messages): 400 for
// bad JSON, wrong types and invalid values (sampler.ParamError included),
// 404 for unknown routes and models, 405, 413 and 429; a panic fails its
// request only and is logged with slog.
package serve
