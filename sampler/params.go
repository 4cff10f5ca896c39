package sampler

import (
	"errors"
	"fmt"
	"math"
)

// Params are the sampling parameters of one request: mlx-lm's make_sampler
// and make_logits_processors arguments, with OpenAI's names in comments.
// The zero value is greedy decoding with no processors.
type Params struct {
	// Temperature divides the logits before the categorical draw; 0 means
	// argmax (and every filter below is ignored).
	Temperature float64
	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to more than TopP; 0 or 1 disables it.
	TopP float64
	// MinP drops tokens less likely than MinP times the top token's
	// probability; 0 disables it.
	MinP float64
	// MinTokensToKeep is how many tokens min-p never drops (default 1).
	MinTokensToKeep int
	// TopK keeps the K most likely tokens; 0 disables it.
	TopK int
	// XTCProbability is the chance per step that XTC ("exclude top
	// choices") removes every token above XTCThreshold except the least
	// likely of them; 0 disables it.
	XTCProbability float64
	// XTCThreshold is XTC's probability threshold, in [0, 0.5].
	XTCThreshold float64
	// XTCSpecialTokens are never removed by XTC (end-of-turn tokens, say).
	XTCSpecialTokens []int

	// LogitBias adds a value to the logit of a token id.
	LogitBias map[int]float64
	// RepetitionPenalty divides positive and multiplies negative logits of
	// tokens seen in the last RepetitionContextSize tokens; 0 or 1 disables it.
	RepetitionPenalty float64
	// RepetitionContextSize is the repetition window (default 20).
	RepetitionContextSize int
	// PresencePenalty is subtracted once from the logit of every token seen
	// in the last PresenceContextSize tokens (default window 20).
	PresencePenalty     float64
	PresenceContextSize int
	// FrequencyPenalty is subtracted from a token's logit once per
	// occurrence in the last FrequencyContextSize tokens (default window 20).
	FrequencyPenalty     float64
	FrequencyContextSize int

	// Seed fixes the random stream; without it a seed is drawn from the
	// operating system. The same seed and inputs give the same tokens.
	Seed *uint64
	// TopLogprobs asks for this many (id, logprob) alternatives per step
	// besides the chosen token's logprob; 0 for none.
	TopLogprobs int
	// Logprobs asks for the chosen token's logprob even when TopLogprobs is 0.
	Logprobs bool
}

// ErrInvalidParams is wrapped by every *ParamError.
var ErrInvalidParams = errors.New("invalid sampling parameter")

// ParamError names a bad sampling parameter; servers map it to HTTP 400.
type ParamError struct {
	Field  string // the parameter, as the OpenAI API spells it
	Value  any
	Reason string
}

// Error names the parameter, its value and what is wrong with it.
func (e *ParamError) Error() string {
	return fmt.Sprintf("%s=%v: %s", e.Field, e.Value, e.Reason)
}

// Unwrap lets errors.Is(err, ErrInvalidParams) match.
func (e *ParamError) Unwrap() error { return ErrInvalidParams }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Validate checks the parameters for a vocabulary of vocab tokens and
// returns a *ParamError for the first bad one.
func (p *Params) Validate(vocab int) error {
	bad := func(field string, v any, reason string) error {
		return &ParamError{Field: field, Value: v, Reason: reason}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"temperature", p.Temperature}, {"top_p", p.TopP}, {"min_p", p.MinP},
		{"xtc_probability", p.XTCProbability}, {"xtc_threshold", p.XTCThreshold},
		{"repetition_penalty", p.RepetitionPenalty}, {"presence_penalty", p.PresencePenalty},
		{"frequency_penalty", p.FrequencyPenalty},
	} {
		if !finite(f.v) {
			return bad(f.name, f.v, "must be a finite number")
		}
	}
	switch {
	case p.Temperature < 0:
		return bad("temperature", p.Temperature, "must be ≥ 0")
	case p.TopP < 0 || p.TopP > 1:
		return bad("top_p", p.TopP, "must be in (0, 1]")
	case p.TopK < 0:
		return bad("top_k", p.TopK, "must be ≥ 0")
	case p.MinP < 0 || p.MinP > 1:
		return bad("min_p", p.MinP, "must be in [0, 1]")
	case p.MinTokensToKeep < 0:
		return bad("min_tokens_to_keep", p.MinTokensToKeep, "must be ≥ 1")
	case p.XTCProbability < 0 || p.XTCProbability > 1:
		return bad("xtc_probability", p.XTCProbability, "must be in [0, 1]")
	case p.XTCThreshold < 0 || p.XTCThreshold > 0.5:
		return bad("xtc_threshold", p.XTCThreshold, "must be in [0, 0.5]")
	case p.RepetitionPenalty < 0:
		return bad("repetition_penalty", p.RepetitionPenalty, "must be ≥ 0")
	case p.RepetitionContextSize < 0:
		return bad("repetition_context_size", p.RepetitionContextSize, "must be ≥ 0")
	case p.PresenceContextSize < 0:
		return bad("presence_context_size", p.PresenceContextSize, "must be ≥ 0")
	case p.FrequencyContextSize < 0:
		return bad("frequency_context_size", p.FrequencyContextSize, "must be ≥ 0")
	case p.TopLogprobs < 0:
		return bad("top_logprobs", p.TopLogprobs, "must be ≥ 0")
	}
	if vocab > 0 && p.TopLogprobs > vocab {
		return bad("top_logprobs", p.TopLogprobs, fmt.Sprintf("exceeds the vocabulary (%d)", vocab))
	}
	for id, v := range p.LogitBias {
		if id < 0 || (vocab > 0 && id >= vocab) {
			return bad("logit_bias", id, fmt.Sprintf("token id outside the vocabulary [0, %d)", vocab))
		}
		if !finite(v) {
			return bad("logit_bias", v, fmt.Sprintf("bias for token %d must be finite", id))
		}
	}
	for _, id := range p.XTCSpecialTokens {
		if id < 0 || (vocab > 0 && id >= vocab) {
			return bad("xtc_special_tokens", id, fmt.Sprintf("token id outside the vocabulary [0, %d)", vocab))
		}
	}
	return nil
}

// withDefaults fills mlx-lm's defaults for unset windows and counts.
func (p Params) withDefaults() Params {
	if p.MinTokensToKeep == 0 {
		p.MinTokensToKeep = 1
	}
	if p.RepetitionContextSize == 0 {
		p.RepetitionContextSize = 20
	}
	if p.PresenceContextSize == 0 {
		p.PresenceContextSize = 20
	}
	if p.FrequencyContextSize == 0 {
		p.FrequencyContextSize = 20
	}
	return p
}
