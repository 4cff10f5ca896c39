// Package sampler turns logits into tokens the way mlx-lm's make_sampler
// and make_logits_processors do, as tensor ops on any backend.
//
// The chain per step: logit bias → repetition penalty → presence penalty →
// frequency penalty → token mask (grammar) → log-softmax → (temperature 0:
// argmax) top-p → min-p → XTC → top-k → categorical draw at 1/temperature.
// Logprobs are taken after the processors and before the truncating
// filters. With top-k on, the filters run on the top-k candidates (plus
// XTC's margin) instead of the whole vocabulary whenever that is exact
// (see Sampler). Bad parameters are *ParamError values (HTTP 400 in the
// server).
package sampler
