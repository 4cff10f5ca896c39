package serve

import (
	"encoding/json"

	"github.com/mlxgo/mlxgo/generate"
)

// The OpenAI Responses API's wire formats: POST /v1/responses' body, the
// response object (also GET /v1/responses/{id}'s body), its output items
// and its stream events. As in wire_openai.go, members with their own
// validation are json.RawMessage and decoded by the handler in a fixed
// order.

// responsesRequest is POST /v1/responses' body. top_k, min_p, seed and
// repetition_penalty are extras, as on the chat route.
type responsesRequest struct {
	Model string `json:"model"`
	// Input is a string (one user message) or a list of items, decoded by
	// responsesInput.
	Input json.RawMessage `json:"input"`
	// Instructions is a system message put first; it is not carried over
	// by previous_response_id.
	Instructions *string `json:"instructions"`
	// Tools are function tools {type: function, name, description,
	// parameters, strict}, decoded by responsesTools.
	Tools json.RawMessage `json:"tools"`
	// ToolChoice is none, auto, required or {type: function, name}.
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	MaxOutputTokens   *int            `json:"max_output_tokens"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	Seed              *int64          `json:"seed"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	// Text is {format: {type: text | json_object | json_schema, name,
	// schema, strict}}, decoded by responsesFormat.
	Text               json.RawMessage   `json:"text"`
	Stream             *bool             `json:"stream"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Store              *bool             `json:"store"`
	Metadata           map[string]string `json:"metadata"`
	Truncation         *string           `json:"truncation"`
	// Adapter chooses LoRA adapters, as samplingFields.Adapter.
	Adapter *string `json:"adapter"`
}

// responseItemIn is one item of a request's input list, read leniently
// (every member raw) so that each mistake gets its own message.
type responseItemIn struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// responseObject is a response: what POST /v1/responses returns (and
// GET /v1/responses/{id}), and the snapshot the stream's lifecycle events
// carry. Output holds *messageItem, *functionCallItem and *reasoningItem.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"` // "response"
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"` // in_progress, completed, incomplete, failed
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []any              `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	TopP               float64            `json:"top_p"`
	Text               responseTextOut    `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []json.RawMessage  `json:"tools"`
	Truncation         string             `json:"truncation"`
	Usage              *responseUsage     `json:"usage"`
	Metadata           map[string]string  `json:"metadata"`
}

// responseError is a failed response's error.
type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// incompleteDetails says why a response is incomplete.
type incompleteDetails struct {
	Reason string `json:"reason"` // "max_output_tokens"
}

// responseTextOut is a response's text configuration: the format asked for.
type responseTextOut struct {
	Format json.RawMessage `json:"format"`
}

// responseUsage is a response's token counts; cached_tokens are the input
// tokens the prompt cache supplied, reasoning_tokens the output tokens of
// reasoning (counted by re-encoding its text).
type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
	// Speculation is speculative decoding's statistics, when it was on
	// (an mlxgo field).
	Speculation *generate.SpecStats `json:"speculation,omitempty"`
}

// messageItem is an assistant message of a response's output.
type messageItem struct {
	Type    string        `json:"type"` // "message"
	ID      string        `json:"id"`
	Status  string        `json:"status"`
	Role    string        `json:"role"` // "assistant"
	Content []*outputText `json:"content"`
}

// outputText is a message item's text part.
type outputText struct {
	Type        string            `json:"type"` // "output_text"
	Text        string            `json:"text"`
	Annotations []json.RawMessage `json:"annotations"`
}

// functionCallItem is a tool call of a response's output; Arguments is a
// JSON object's text.
type functionCallItem struct {
	Type      string `json:"type"` // "function_call"
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// reasoningItem is the model's reasoning text of a response's output.
type reasoningItem struct {
	Type    string            `json:"type"` // "reasoning"
	ID      string            `json:"id"`
	Summary []json.RawMessage `json:"summary"`
	Content []*reasoningText  `json:"content"`
	Status  string            `json:"status,omitempty"`
}

// reasoningText is a reasoning item's text part.
type reasoningText struct {
	Type string `json:"type"` // "reasoning_text"
	Text string `json:"text"`
}

// responseEvent is one event of a Responses stream: its type and
// sequence number, and the members that type has.
type responseEvent struct {
	Type           string          `json:"type"`
	SequenceNumber int             `json:"sequence_number"`
	Response       *responseObject `json:"response,omitempty"`
	OutputIndex    *int            `json:"output_index,omitempty"`
	ItemID         string          `json:"item_id,omitempty"`
	ContentIndex   *int            `json:"content_index,omitempty"`
	Item           any             `json:"item,omitempty"`
	Part           any             `json:"part,omitempty"`
	Delta          *string         `json:"delta,omitempty"`
	Text           *string         `json:"text,omitempty"`
	Arguments      *string         `json:"arguments,omitempty"`
	Name           string          `json:"name,omitempty"`
	Logprobs       json.RawMessage `json:"logprobs,omitempty"`
	// Code, Message and Param are an error event's.
	Code    *string `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   *string `json:"param,omitempty"`
}

// deletedResponse is DELETE /v1/responses/{id}'s body.
type deletedResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "response"
	Deleted bool   `json:"deleted"`
}
