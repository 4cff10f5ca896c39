package generate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// jumpForwarder returns the grammar's JumpForwarder when canonical
// jump-forward decoding is on and possible for this request.
func jumpForwarder(o *Options) JumpForwarder {
	p := o.Sampler
	if !o.JumpForward || o.JumpMode != JumpCanonical || o.Codec == nil || p.Logprobs || p.TopLogprobs > 0 {
		return nil
	}
	jf, _ := o.Grammar.(JumpForwarder)
	return jf
}

// exactJump reports whether exact jump-forward decoding is on and
// possible for this request (see JumpExact).
func exactJump(o *Options) bool {
	return o.JumpForward && o.JumpMode == JumpExact && o.Grammar != nil && o.Sampler.TopLogprobs == 0
}

// forcedLogprob is the logprob reported for a forced token: exactly 0 in
// exact mode when logprobs are asked for (the masked distribution has one
// allowed token), NaN otherwise.
func (q *seq) forcedLogprob() float32 {
	if q.exact && q.o.Sampler.Logprobs {
		return 0
	}
	return float32(math.NaN())
}

// applyJump is jump-forward's decision after a sampled (and accepted)
// token id: the tokens the step delivers and feeds. In exact mode they
// are id followed by the tokens the grammar's mask forces one at a time;
// in canonical mode, the tokenizer's spelling of id and the text the
// grammar forces after it (see forced); otherwise id alone.
func (q *seq) applyJump(id int32) ([]int32, error) {
	step := []int32{id}
	if q.exact {
		f, ready, err := q.forcedRun(q.room(q.n + 1))
		if err != nil {
			return nil, err
		}
		q.maskReady = ready
		step = append(step, f...)
		q.stats.ForcedTokens += len(f)
	}
	if q.jf != nil {
		f, err := q.forced(id, q.room(q.n))
		if err != nil {
			return nil, err
		}
		if f != nil {
			step = f
			q.stats.ForcedTokens += len(f) - 1
		}
	}
	return step, nil
}

// forcedRun moves the grammar over the tokens its mask forces one at a
// time — while the mask allows a single token that is not an EOS token —
// and returns them; at most room tokens (-1: no cap). ready reports that
// q.mask holds the allowed tokens of the grammar's current state, so the
// next fillMask need not fill it again. A forced token that ends the
// grammar ends the run (the caller sees IsTerminated).
func (q *seq) forcedRun(room int) (out []int32, ready bool, err error) {
	g, mask := q.o.Grammar, q.mask
	for !g.IsTerminated() {
		if room >= 0 && len(out) >= room {
			return out, false, nil
		}
		if err := g.FillNextTokenBitmask(mask); err != nil {
			return nil, false, fmt.Errorf("generate: grammar mask: %w", err)
		}
		id, ok := onlyAllowed(mask, q.vocab)
		if !ok || slices.Contains(q.o.EOS, id) {
			return out, true, nil
		}
		if !g.AcceptToken(int(id)) {
			return nil, false, fmt.Errorf("generate: the grammar rejected token %d, the only one its mask allowed", id)
		}
		out = append(out, id)
	}
	return out, false, nil
}

// onlyAllowed returns the token a mask allows when it allows exactly one
// inside the vocabulary.
func onlyAllowed(mask []int32, vocab int) (int32, bool) {
	id := int32(-1)
	for w, word := range mask {
		u := uint32(word)
		if w == len(mask)-1 && vocab%32 != 0 {
			u &= 1<<(vocab%32) - 1
		}
		if u == 0 {
			continue
		}
		if id >= 0 || u&(u-1) != 0 {
			return 0, false
		}
		id = int32(w*32 + bits.TrailingZeros32(u))
	}
	return id, id >= 0
}

// leading returns the tokens of the text the grammar forces before
// anything is sampled (a JSON object's opening brace and first key), with
// the grammar moved onto them, less the last token, which may merge with
// what follows; nil when nothing is forced or the grammar refuses the
// encoding. room caps the tokens (-1: none).
func (q *seq) leading(room int) ([]int32, error) {
	jf := q.jf
	text := jf.JumpForward()
	if text == "" {
		return nil, nil
	}
	c := q.o.Codec
	ids := c.Encode(text)
	if len(ids) < 2 || c.Decode(ids) != text {
		return nil, nil
	}
	ids = ids[:len(ids)-1]
	if room >= 0 && len(ids) > room {
		ids = ids[:room]
	}
	for i, t := range ids {
		if t < 0 || int(t) >= q.vocab || !q.o.Grammar.AcceptToken(int(t)) {
			if jf.Rollback(i) != nil {
				return nil, errors.New("generate: the grammar could not undo a jump-forward")
			}
			return nil, nil
		}
	}
	return ids, nil
}

// forced returns the tokens to feed in place of the sampled (and already
// accepted) id when the grammar forces text after it, with the grammar
// moved onto them; nil leaves the step as it was. The sampled token and
// the forced text are encoded together, since the tokenizer may merge
// across their boundary (a sampled `"` before a forced `name":` becomes
// `"name`, `":` when encoded whole); the last token of that encoding is
// dropped, because it may merge with the text still to be sampled, and it
// costs one step to sample it instead. room caps the tokens (-1: none).
// Any disagreement (the sampled token does not round-trip through the
// codec, the encoding does not spell the text, the grammar refuses a
// token) falls back to ordinary decoding, which is always valid.
func (q *seq) forced(id int32, room int) ([]int32, error) {
	jf := q.jf
	text := jf.JumpForward()
	if text == "" {
		return nil, nil
	}
	c := q.o.Codec
	one := []int32{id}
	pre := c.Decode(one)
	if !slices.Equal(c.Encode(pre), one) {
		return nil, nil
	}
	ids := c.Encode(pre + text)
	if len(ids) < 2 || c.Decode(ids) != pre+text {
		return nil, nil
	}
	ids = ids[:len(ids)-1]
	if room >= 0 && len(ids) > room {
		ids = ids[:room]
	}
	if len(ids) == 0 || slices.Equal(ids, one) {
		return nil, nil
	}
	for _, t := range ids {
		if t < 0 || int(t) >= q.vocab {
			return nil, nil
		}
	}
	g := q.o.Grammar
	if jf.Rollback(1) != nil {
		return nil, nil
	}
	for i, t := range ids {
		if !g.AcceptToken(int(t)) {
			if jf.Rollback(i) != nil || !g.AcceptToken(int(id)) {
				return nil, errors.New("generate: the grammar could not undo a jump-forward")
			}
			return nil, nil
		}
	}
	return ids, nil
}
