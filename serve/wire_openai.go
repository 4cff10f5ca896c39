package serve

import (
	"encoding/json"
	"errors"

	"github.com/mlxgo/mlxgo/generate"
)

// OpenAI's wire formats: the bodies of /v1/chat/completions,
// /v1/completions and /v1/models, their stream chunks and the error object.
//
// Request members that the handlers validate with their own error messages
// (messages, tools, stop, prompt, response_format, …) are json.RawMessage
// in the request structs and are decoded into the types below by the
// handler, in a fixed order and after the model name: decoding them with
// the rest of the body would report whichever mistake comes first in the
// text, and with encoding/json's wording. Members the server does not read
// are ignored.
//
// Response structs keep null and absent apart as the SDKs expect: a pointer
// without omitempty is written as null when nil; omitempty members are left
// out.

// samplingFields are the request members shared by the OpenAI endpoints
// (the Anthropic endpoint fills the ones it has).
type samplingFields struct {
	Model                 string             `json:"model"`
	MaxTokens             *int               `json:"max_tokens"`
	MaxCompletionTokens   *int               `json:"max_completion_tokens"`
	Temperature           *float64           `json:"temperature"`
	TopP                  *float64           `json:"top_p"`
	TopK                  *int               `json:"top_k"`
	MinP                  *float64           `json:"min_p"`
	Seed                  *int64             `json:"seed"`
	RepetitionPenalty     *float64           `json:"repetition_penalty"`
	RepetitionContextSize *int               `json:"repetition_context_size"`
	PresencePenalty       *float64           `json:"presence_penalty"`
	FrequencyPenalty      *float64           `json:"frequency_penalty"`
	LogitBias             map[string]float64 `json:"logit_bias"`
	TopLogprobs           *int               `json:"top_logprobs"`
	// Stop is a stopList.
	Stop          json.RawMessage `json:"stop"`
	N             *int            `json:"n"`
	Stream        *bool           `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options"`
	// ResponseFormat is a responseFormat.
	ResponseFormat json.RawMessage `json:"response_format"`
	// StructuredOutputs is the vLLM-style constraint, a structuredOutputs.
	StructuredOutputs json.RawMessage `json:"structured_outputs"`
	// Adapter chooses LoRA adapters: "id", "a+b" (stacked, in order) or
	// "none" (the base model); absent: the server's default set.
	Adapter *string `json:"adapter"`
}

// streamOptions is stream_options, allowed only with stream: true.
type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

// chatRequest is POST /v1/chat/completions' body.
type chatRequest struct {
	samplingFields
	// Messages is a list of objects {role, content: messageContent,
	// tool_calls: []chatToolCall, …}, decoded by chatMessages; members
	// other than those three reach the chat template unread.
	Messages json.RawMessage `json:"messages"`
	Logprobs *bool           `json:"logprobs"`
	// Tools is a list of {type: function, function: {name, …}}, checked by
	// chatTools; the definitions reach the chat template as sent.
	Tools json.RawMessage `json:"tools"`
	// ToolChoice is a toolChoice.
	ToolChoice json.RawMessage `json:"tool_choice"`
	// ParallelToolCalls false allows at most one call per reply.
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
	// ChatTemplateKwargs is an object of chat-template variables.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

// completionRequest is POST /v1/completions' body.
type completionRequest struct {
	samplingFields
	// Prompt is a completionPrompt.
	Prompt json.RawMessage `json:"prompt"`
	// Logprobs is the legacy form: how many top alternatives per token.
	Logprobs *int  `json:"logprobs"`
	Echo     *bool `json:"echo"`
	// Suffix is the text after the completion: fill-in-the-middle with
	// the model's FIM tokens.
	Suffix *string `json:"suffix"`
	// BestOf is accepted only equal to n (no ranking).
	BestOf *int `json:"best_of"`
}

// messageContent is a chat message's content: a string, or a list of
// content parts of which only text is read. Null reads as "".
type messageContent struct {
	Text  string
	Parts []contentPart // set (maybe empty) when content was a list
}

// UnmarshalJSON accepts a string, null or a list of parts.
func (c *messageContent) UnmarshalJSON(b []byte) error {
	*c = messageContent{}
	if string(b) == "null" || json.Unmarshal(b, &c.Text) == nil {
		return nil
	}
	var parts []contentPart
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	c.Parts = parts
	return nil
}

// contentPart is one element of a content list: {type: text, text} or the
// Responses API's input_text. Other types (image_url, input_audio, file)
// are read only to be refused by name.
type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text,omitempty"` // nil: missing or not a string; null reads as ""
	// ImageURL and InputAudio are the media parts' members (media.go).
	ImageURL, InputAudio json.RawMessage
}

// UnmarshalJSON reads a part leniently, so that a bad member gets its own
// error: a type that is not a string reads as none, a text that is not a
// string as missing. Member names match exactly, as the spec spells them.
func (p *contentPart) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*p = contentPart{}
	_ = json.Unmarshal(m["type"], &p.Type)
	var text string
	if json.Unmarshal(m["text"], &text) == nil {
		p.Text = &text
	}
	p.ImageURL, p.InputAudio = m["image_url"], m["input_audio"]
	return nil
}

// chatToolCall is a tool call in an assistant message of the request.
// Arguments is a JSON string holding an object, as the spec says; an
// object itself, which some clients send, is accepted too.
type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// functionTool is an OpenAI tool definition; the Anthropic endpoint
// converts its tools to this shape for the chat template.
type functionTool struct {
	Type     string      `json:"type"` // "function"
	Function functionDef `json:"function"`
}

// functionDef is a function tool's name, description and parameters (a
// JSON schema).
type functionDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// toolChoice is tool_choice: "none", "auto", "required", or
// {type: function, function: {name}} naming one tool.
type toolChoice struct {
	Mode     string // the string form, unchecked; "" for the object form
	Function string // the object form's function name
}

// UnmarshalJSON accepts the string and the object form.
func (c *toolChoice) UnmarshalJSON(b []byte) error {
	*c = toolChoice{}
	if json.Unmarshal(b, &c.Mode) == nil {
		return nil
	}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(b, &named); err != nil {
		return err
	}
	c.Function = named.Function.Name
	return nil
}

// stopList is stop: a string or a list of strings; null is none.
type stopList []string

// UnmarshalJSON accepts null, a string or a list of strings.
func (s *stopList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = nil
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*s = many
	return nil
}

// completionPrompt is /v1/completions' prompt: a string, a list of
// strings, a list of token ids or a list of such lists. Tokens is set for
// the id forms, Texts otherwise; a single prompt is a list of one.
type completionPrompt struct {
	Texts  []string
	Tokens [][]int32
}

// errPromptShape is completionPrompt's decoding error.
var errPromptShape = errors.New("want a string, a list of strings, a list of token ids or a list of such lists")

// UnmarshalJSON tries the four forms in turn (so [] is an empty list of
// strings).
func (p *completionPrompt) UnmarshalJSON(b []byte) error {
	*p = completionPrompt{}
	if string(b) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		p.Texts = []string{one}
		return nil
	}
	if json.Unmarshal(b, &p.Texts) == nil {
		return nil
	}
	p.Texts = nil
	var ids []int32
	if json.Unmarshal(b, &ids) == nil {
		p.Tokens = [][]int32{ids}
		return nil
	}
	if json.Unmarshal(b, &p.Tokens) == nil {
		return nil
	}
	p.Tokens = nil
	return errPromptShape
}

// responseFormat is response_format: {type: text | json_object |
// json_schema, json_schema: {name, schema, strict}}.
type responseFormat struct {
	Type       string            `json:"type"`
	JSONSchema *jsonSchemaFormat `json:"json_schema"`
}

// jsonSchemaFormat is response_format.json_schema.
type jsonSchemaFormat struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict"`
}

// structuredOutputs is vLLM's structured_outputs extra: exactly one of
// json (a schema object, or a string holding one), regex, choice and
// grammar (GBNF/EBNF text).
type structuredOutputs struct {
	JSON    json.RawMessage `json:"json"`
	Regex   *string         `json:"regex"`
	Choice  []string        `json:"choice"`
	Grammar *string         `json:"grammar"`
}

// openaiObject is the envelope of a chat.completion, a text_completion
// and their stream chunks (Object says which); C is the choice type.
type openaiObject[C any] struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	// SystemFingerprint names the model and backend that answered.
	SystemFingerprint string `json:"system_fingerprint,omitempty"`
	Choices           []C    `json:"choices"`
	// Usage is always set on a completion; in a stream only the last
	// chunk has it (with no choices), when stream_options.include_usage
	// asks for it.
	Usage *openaiUsage `json:"usage,omitempty"`
}

// chatChoice is a choice of a chat.completion.
type chatChoice struct {
	Index        int              `json:"index"`
	Message      assistantMessage `json:"message"`
	Logprobs     *chatLogprobs    `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
}

// assistantMessage is a chat.completion's reply. Content is null when the
// reply is only tool calls; reasoning_content is vLLM's and DeepSeek's
// member for the reasoning text.
type assistantMessage struct {
	Role             string           `json:"role"`
	Content          *string          `json:"content"`
	ReasoningContent string           `json:"reasoning_content,omitempty"`
	ToolCalls        []openaiToolCall `json:"tool_calls,omitempty"`
}

// chatChunkChoice is a choice of a chat.completion.chunk.
type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
}

// chatDelta is what a chunk adds to the reply: the role first, then
// content, reasoning or tool calls; the last chunk's delta is empty.
// Content is a pointer because a chunk that carries only logprobs still
// has content "".
type chatDelta struct {
	Role             string           `json:"role,omitempty"`
	Content          *string          `json:"content,omitempty"`
	ReasoningContent string           `json:"reasoning_content,omitempty"`
	ToolCalls        []openaiToolCall `json:"tool_calls,omitempty"`
}

// openaiToolCall is a tool call of a reply. Index (the call's position in
// the reply) is set in stream deltas only.
type openaiToolCall struct {
	Index    *int               `json:"index,omitempty"`
	ID       string             `json:"id"`
	Type     string             `json:"type"` // "function"
	Function openaiFunctionCall `json:"function"`
}

// openaiFunctionCall is a reply's call: the function and its arguments, a
// JSON object's text.
type openaiFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// completionChoice is a choice of a text_completion and of its stream
// chunks (where finish_reason is null until the last).
type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// chatLogprobs is a chat choice's logprobs.
type chatLogprobs struct {
	Content []tokenLogprob `json:"content"`
}

// tokenLogprob is one generated token's log-probability and the top
// alternatives (top_logprobs of them, maybe none).
type tokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"` // the token's UTF-8 bytes
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

// topLogprob is one alternative of a tokenLogprob.
type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// completionLogprobs is the legacy completions logprobs object: parallel
// lists, one entry per token; top_logprobs maps each alternative's text to
// its log-probability.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// openaiUsage is a completion's token counts; cached_tokens are the
// prompt tokens the prompt cache supplied.
type openaiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// Lane is how the request ran: "batched" or "serial" (an mlxgo field).
	Lane string `json:"lane,omitempty"`
	// Speculation is speculative decoding's statistics, when it was on
	// (an mlxgo field; summed over a request's choices).
	Speculation *generate.SpecStats `json:"speculation,omitempty"`
}

// openaiError is OpenAI's error body; param and code are null when unset.
type openaiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// modelList is GET /v1/models' body.
type modelList struct {
	Object string        `json:"object"` // "list"
	Data   []modelObject `json:"data"`
}

// modelObject is one model, also GET /v1/models/{id}'s body.
type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Adapters are the LoRA adapters requests may choose (adapter), when
	// the server has an adapter host.
	Adapters []adapterInfo `json:"adapters,omitempty"`
}
