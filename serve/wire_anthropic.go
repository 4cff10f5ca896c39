package serve

import (
	"encoding/json"

	"github.com/mlxgo/mlxgo/generate"
)

// Anthropic's wire formats: POST /v1/messages' request and response, its
// stream events and the error object. As in wire_openai.go, request members
// validated with their own messages stay json.RawMessage in messagesRequest
// and are decoded by messagesPlan in a fixed order.

// messagesRequest is POST /v1/messages' body.
type messagesRequest struct {
	Model     string `json:"model"`
	MaxTokens *int   `json:"max_tokens"` // required
	// Messages is a list of anthropicMessage, decoded by anthropicMessages.
	Messages json.RawMessage `json:"messages"`
	// System is an anthropicContent whose text blocks make the system
	// prompt.
	System        json.RawMessage `json:"system"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Stream        *bool           `json:"stream"`
	// Tools is a list of anthropicTool.
	Tools json.RawMessage `json:"tools"`
	// ToolChoice is an anthropicToolChoice.
	ToolChoice json.RawMessage    `json:"tool_choice"`
	Thinking   *anthropicThinking `json:"thinking"`
	// Adapter chooses LoRA adapters, as samplingFields.Adapter.
	Adapter *string `json:"adapter"`
}

// anthropicThinking is the thinking member: its type, enabled or
// disabled, becomes the chat template's enable_thinking (budget_tokens is
// not read).
type anthropicThinking struct {
	Type string `json:"type"`
}

// anthropicMessage is one message of a request. Content is an
// anthropicContent, decoded with the message's own error path.
type anthropicMessage struct {
	Role    string          `json:"role"` // user or assistant
	Content json.RawMessage `json:"content"`
}

// anthropicContent is a message's (or system's, or a tool result's)
// content: a string, read as one text block (null as an empty one), or a
// list of blocks.
type anthropicContent []anthropicBlock

// UnmarshalJSON accepts a string, null or a list of blocks.
func (c *anthropicContent) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*c = anthropicContent{{Type: "text", Text: s}}
		return nil
	}
	var bs []anthropicBlock
	if err := json.Unmarshal(b, &bs); err != nil {
		return err
	}
	*c = bs
	return nil
}

// anthropicBlock is a content block of a request, the members of every
// type the server reads in one struct: text, thinking (redacted_thinking
// is skipped), tool_use and tool_result.
type anthropicBlock struct {
	Type     string `json:"type"`
	Text     string `json:"text"`     // text
	Thinking string `json:"thinking"` // thinking
	// tool_use: the call's id, tool name and arguments object.
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result: the call it answers and its result, an
	// anthropicContent decoded with the block's own error path.
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	// image: the base64 source (media.go).
	Source json.RawMessage `json:"source"`
}

// anthropicTool is a tool definition.
type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// anthropicToolChoice is tool_choice: {type: auto | any | tool | none},
// with the tool's name for type tool.
type anthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
}

// anthropicResponse is a message: the response body, and the message of a
// stream's message_start (with no content yet and a null stop_reason).
type anthropicResponse struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"` // "assistant"
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"` // the stop sequence that ended it
	Usage        anthropicUsage `json:"usage"`
}

// anthropicUsage is a message's token counts. input_tokens excludes the
// cache_read_input_tokens the prompt cache supplied; message_start, sent
// before the cache lookup, has no cache members.
type anthropicUsage struct {
	InputTokens              int  `json:"input_tokens"`
	OutputTokens             int  `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens,omitempty"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens,omitempty"`
	// Lane is how the request ran: "batched" or "serial" (an mlxgo field).
	Lane string `json:"lane,omitempty"`
	// Speculation is speculative decoding's statistics, when it was on
	// (an mlxgo field).
	Speculation *generate.SpecStats `json:"speculation,omitempty"`
}

// contentBlock is a content block of a response: a textBlock,
// thinkingBlock or toolUseBlock. Each type has its own struct because a
// block carries exactly its type's members, empty ones included.
type contentBlock interface{ isContentBlock() }

// textBlock is a text content block.
type textBlock struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

// thinkingBlock is a reasoning content block. Signature is nil in a
// stream's content_block_start, which has none yet.
type thinkingBlock struct {
	Type      string  `json:"type"` // "thinking"
	Thinking  string  `json:"thinking"`
	Signature *string `json:"signature,omitempty"`
}

// toolUseBlock is a tool call: Input is the arguments object ({} in a
// stream's content_block_start, whose input_json_delta carries it).
type toolUseBlock struct {
	Type  string          `json:"type"` // "tool_use"
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

func (textBlock) isContentBlock()     {}
func (thinkingBlock) isContentBlock() {}
func (toolUseBlock) isContentBlock()  {}

// Stream events, each sent as the SSE event of its type's name.

// messageStartEvent opens the stream.
type messageStartEvent struct {
	Type    string            `json:"type"` // "message_start"
	Message anthropicResponse `json:"message"`
}

// blockStartEvent opens content block Index.
type blockStartEvent struct {
	Type         string       `json:"type"` // "content_block_start"
	Index        int          `json:"index"`
	ContentBlock contentBlock `json:"content_block"`
}

// blockDeltaEvent adds to the open block.
type blockDeltaEvent struct {
	Type  string     `json:"type"` // "content_block_delta"
	Index int        `json:"index"`
	Delta blockDelta `json:"delta"`
}

// blockDelta is a content_block_delta's delta: a textDelta,
// thinkingDelta or inputJSONDelta.
type blockDelta interface{ isBlockDelta() }

// textDelta adds text to a text block.
type textDelta struct {
	Type string `json:"type"` // "text_delta"
	Text string `json:"text"`
}

// thinkingDelta adds text to a thinking block.
type thinkingDelta struct {
	Type     string `json:"type"` // "thinking_delta"
	Thinking string `json:"thinking"`
}

// inputJSONDelta adds to a tool_use block's arguments text (this server
// sends them whole, in one delta).
type inputJSONDelta struct {
	Type        string `json:"type"` // "input_json_delta"
	PartialJSON string `json:"partial_json"`
}

func (textDelta) isBlockDelta()      {}
func (thinkingDelta) isBlockDelta()  {}
func (inputJSONDelta) isBlockDelta() {}

// blockStopEvent closes content block Index.
type blockStopEvent struct {
	Type  string `json:"type"` // "content_block_stop"
	Index int    `json:"index"`
}

// messageDeltaEvent ends the message: why it stopped, and the usage.
type messageDeltaEvent struct {
	Type  string `json:"type"` // "message_delta"
	Delta struct {
		StopReason   string  `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage anthropicUsage `json:"usage"`
}

// messageStopEvent is the stream's last event.
type messageStopEvent struct {
	Type string `json:"type"` // "message_stop"
}

// anthropicError is Anthropic's error body, also a stream's error event.
type anthropicError struct {
	Type  string `json:"type"` // "error"
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anthropicModel is a model as Anthropic's models API describes it.
type anthropicModel struct {
	Type        string `json:"type"` // "model"
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"` // RFC 3339
}

// anthropicModelList is GET /v1/models' body for Anthropic clients.
type anthropicModelList struct {
	Data    []anthropicModel `json:"data"`
	HasMore bool             `json:"has_more"`
	FirstID string           `json:"first_id"`
	LastID  string           `json:"last_id"`
}

// countTokensResponse is POST /v1/messages/count_tokens' body.
type countTokensResponse struct {
	InputTokens int `json:"input_tokens"`
}
