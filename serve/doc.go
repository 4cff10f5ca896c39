// Package serve is the HTTP server: OpenAI- and Anthropic-compatible endpoints with streaming.
//
// A Server serves one model (a generate.Model with its tokenizer and chat
// template) on POST /v1/chat/completions, /v1/completions and /v1/messages
// (Anthropic, with /v1/messages/count_tokens), /v1/responses and
// /v1/embeddings, GET and DELETE /v1/responses/{id}, GET /v1/models (in
// Anthropic's shape for Anthropic clients), /v1/models/{id}, /health,
// /stats and /metrics, as a drop-in for
// mlx_lm.server. One engine goroutine owns the model and takes requests
// from a bounded FIFO queue (429 with Retry-After when it is full); a
// request's context is the generation's, so a client that leaves cancels
// its generation within one step.
//
// With Config.Batch above 1 (the default, DefaultBatch) the engine runs
// the batched lane: one generate.Batch over a paged KV pool (kv.Pool)
// sized by KVBudgetBytes, which requests join at the next step and leave
// when done, each forward pass taking at most TokenBudget tokens (every
// decoding row's next token, then chunks of joining prompts). Admission
// reserves a row's blocks for its prompt plus max_tokens, first come
// first served: a request that does not fit yet waits (never overtaken),
// one that never could is a 400 context_over_budget naming the numbers,
// and a running row is never evicted. The pool is also the prompt cache:
// finished rows leave their whole blocks for later requests sharing a
// prefix (a chat's next turn, a shared system prompt, the choices of
// n > 1), evicted least recently used when the pool needs room. With
// SSDCacheDir the cached KV also goes to disk (ssdTier): each long
// prompt once prefilled and each prefix the pool evicts, copied out on
// the engine goroutine and written by a writer goroutine from a bounded
// queue, then restored on a hit, also by a restarted server; files carry
// the model's cache key and the adapters' namespace and are checksummed,
// a bad one quarantined. Close (SIGTERM in mlxgo serve) answers queued
// requests 503, lets running rows go on for ShutdownTimeout, ends each
// stream that is still open with a finish and an error, and waits for the
// SSD writes. /stats.batch and /stats.ssd_cache report the lane; usage
// names the lane (serial or batched) of each response. Batch 1 is the
// serial lane: one request at a time through generate.Generate with a
// generate.PromptCache, so the next turn of a chat prefills only what is
// new. Usage reports the cached tokens on either lane.
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
// tool_choice "required" or a named function (Anthropic any / tool) is
// enforced by a grammar over the model family's call syntax: a call of
// an allowed tool whose arguments are valid against its schema
// (grammar.TaggedSchemaGrammar); parallel_tool_calls false keeps one.
// n > 1 runs the choices as rows of the batch on the batched lane, one
// after another on the serial lane.
//
// POST /v1/responses is OpenAI's Responses API over the chat route's
// machinery: input (a string, or message, function_call,
// function_call_output and reasoning items) and instructions become chat
// messages; function tools, tool_choice (enforced the same way),
// parallel_tool_calls, max_output_tokens, temperature/top_p and
// text.format (json_object, json_schema: the response_format compiler)
// map to their chat members, and errors name the Responses members. The
// reply is laid out as reasoning, message and function_call items;
// stream: true sends the Responses events (response.created,
// response.in_progress, output_item.added, content_part.added,
// output_text.delta/done or reasoning_text.delta/done,
// function_call_arguments.delta/done, content_part.done,
// output_item.done, then response.completed, or response.incomplete when
// max_output_tokens cut it), each with its sequence_number. Finished
// responses are kept, unless store is false, in a bounded in-memory store
// (ResponseStoreTTL, ResponseStoreBytes; the oldest go first) for GET
// /v1/responses/{id} and previous_response_id, which continues the stored
// conversation (instructions are not carried over); an unknown or expired
// id is a 404. background, conversation, prompt, reasoning, include and
// truncation other than disabled are refused by name.
//
// POST /v1/embeddings embeds a string, a list of strings, token ids or a
// list of id lists (at most 128 inputs, 8,192 tokens each and 65,536 in
// all) with the served model: each input runs alone through the model on
// the engine goroutine (a job whose fn does the forward passes with fresh
// caches in prefill-sized chunks, between generation steps, never beside
// them), and its final hidden states (after the final norm, before the
// logits) are pooled (EmbeddingPooling: the mean over every token the
// tokenizer produced by default, the last token's state for models
// trained that way, read from a sentence-transformers pooling config) and
// L2-normalized. encoding_format base64 carries little-endian float32;
// dimensions shorter than the width truncate and renormalize, for
// Matryoshka-trained models only (MatryoshkaMinDims).
//
// Every request first passes guard: the Host allow-list (LoopbackHosts on
// loopback binds, against DNS rebinding), CORS (AllowedOrigins, none by
// default; preflights answered), the API key (Authorization: Bearer or
// x-api-key, on every route but /health) and a JSON Content-Type. Bodies
// must arrive within BodyTimeout and each write finish within
// WriteTimeout; HTTPServer and LimitListener add the header and idle
// timeouts and a connection cap. Members the server does not implement
// are refused with a 400 naming them; server errors never carry paths.
// GET /metrics exports Prometheus counters and latency histograms.
//
// Errors are OpenAI's error object (Anthropic's on /v1/messages*): 400 for
// bad JSON, wrong types and invalid values (sampler.ParamError included),
// 404 for unknown routes and models, 405, 413 and 429; a panic fails its
// request only and is logged with slog.
package serve
