// Package generate is the generation loop: chunked prefill, pipelined decode, prompt caching and statistics.
//
// Generate runs a Model (an interface defined here, so that this package
// names no concrete model or backend) over a prompt and returns a Stream
// whose Tokens iterator yields sampled tokens one at a time:
//
//	s, err := generate.Generate(ctx, m, promptIDs, &generate.Options{MaxTokens: 128, EOS: eos})
//	if err != nil { ... }
//	defer s.Close()
//	for tok, err := range s.Tokens() { ... }
//	st := s.Stats() // complete also when the loop was left early
//
// The loop follows mlx-lm's generate_step: the prompt (less what
// pre-warmed caches already hold) is prefilled in chunks, its last token
// alone in an L = 1 forward pass so that the first token's logits come
// from the same computation as every later one; then decoding is
// pipelined — step n+1 is dispatched (tensor.AsyncEval) before step n's
// token is read back, so on a lazy backend the host builds the next graph
// while the device computes. Requests whose next step depends on the
// token on the host (a grammar, whose mask needs it, and the
// history-based penalties of the sampler) read each token eagerly instead.
//
// On a backend that implements StepRunner (the MLX backend, whose every
// op otherwise costs a hand-off to its locked thread), each prefill chunk
// and each decode step — forward pass, sampling and, when pipelined, the
// read-back of the previous token — is made inside one Run, so a step
// costs one hand-off instead of one per op. Host work that does not touch
// arrays (a grammar's mask, the consumer's loop body) stays outside it.
//
// With a Grammar, Options.JumpForward (plus a Codec to tokenize text)
// turns on jump-forward decoding: when the grammar forces the text after
// a sampled token (a JSON key, punctuation), the sampled token and that
// text are tokenized together and fed through one multi-token forward
// pass, as a small prefill, instead of one decode step per token. The
// grammar's optional JumpForwarder interface supplies the forced text.
//
// With Options.Speculation, decoding is speculative: a draft source
// (prompt lookup, a draft model of the same vocabulary, or any Drafter)
// proposes up to γ tokens, the target verifies them in one multi-token
// forward pass, and the caches drop what it rejects (Trim, or a snapshot
// restored and the kept tokens replayed for caches that cannot trim).
// Greedy output is the output without speculation, token for token;
// temperature > 0 uses speculative sampling, whose output has the
// target's distribution. Stats.Speculation counts drafted and accepted
// tokens, by position.
//
// PromptCache keeps snapshots of KV caches keyed by the tokens they hold,
// so that a chat's next turn only prefills what is new, and StopMatcher
// finds stop strings in streamed text while holding back the text that
// might be the start of one.
//
// Arrays: everything the loop makes is freed by the loop, whatever way the
// iteration ends (tensortest.NoLeaks holds). Scopes in package tensor are
// per goroutine: the loop opens and closes its scopes on the goroutine
// iterating the Stream, and they adopt none of the arrays other goroutines
// make meanwhile.
package generate
