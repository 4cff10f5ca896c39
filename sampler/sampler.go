package sampler

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/mlxgo/mlxgo/tensor"
)

// ErrAllMasked is returned when the token mask allows no token of the
// vocabulary: sampling would otherwise return an arbitrary (NaN-driven) id.
var ErrAllMasked = errors.New("sampler: the token mask allows no token")

// Sampler turns one row of logits per step into a token, applying mlx-lm's
// chain: logit processors (logit bias, repetition, presence and frequency
// penalties), the token mask, log-softmax, then — unless the temperature is
// 0 — top-p, min-p, XTC and top-k filters and a categorical draw at
// 1/temperature. Everything runs as tensor ops; only the chosen ids (and
// logprobs when asked) are read back.
//
// Randomness: the request's key is tensor.Key(seed). At step n the sampler
// splits its key K into (K', s) with tensor.SplitKey2, keeps K' for step
// n+1, and splits s into (categorical key, XTC key). No state is shared
// between samplers, so concurrent requests never disturb each other.
//
// Candidate fast path: with top-k on, the filters only ever keep tokens
// among the top M = top_k (+ floor(1/xtc_threshold)+1 when XTC is on)
// by probability, because top-p and min-p cut a bottom set, XTC cuts a top
// set smaller than 1/threshold and none of them reorders survivors. When
// the parameters make that restriction exact (see fastM), the sampler
// partitions out those M candidates, filters the [B, M] block and draws
// among it, instead of sorting the whole vocabulary. The categorical key
// then feeds Gumbel noise of shape [B, M] rather than [B, V], so the token
// stream for a seed differs from the full path's; the distribution is the
// same and a seed still fixes the tokens. The XTC key and its draw are
// unchanged.
//
// A Sampler belongs to one request; it is not safe for concurrent use.
type Sampler struct {
	p     Params
	vocab int
	be    tensor.Backend
	key   *tensor.Array // current PRNG key, owned
	fastM int           // candidate count of the top-k fast path; 0: full path
	bias  *tensor.Array // dense [vocab] float32 logit bias, or nil
	xtcNo *tensor.Array // bool [vocab], true for XTC-exempt ids, or nil
	// maskWord and maskBit are every id's token-mask word (int32 [V]) and
	// bit in it (int32 [1, V]), made on the first masked step.
	maskWord, maskBit *tensor.Array
}

// New validates p for a vocabulary of vocab tokens and makes a sampler on
// the default backend.
func New(p Params, vocab int) (*Sampler, error) {
	return NewOn(tensor.Default(), p, vocab)
}

// NewOn is New on a given backend.
func NewOn(be tensor.Backend, p Params, vocab int) (s *Sampler, err error) {
	if vocab <= 0 {
		return nil, fmt.Errorf("sampler: vocabulary size %d", vocab)
	}
	if err := p.Validate(vocab); err != nil {
		return nil, err
	}
	defer tensor.Recover(&err)
	p = p.withDefaults()
	var seed uint64
	if p.Seed != nil {
		seed = *p.Seed
	} else {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("sampler: seed: %w", err)
		}
		seed = binary.LittleEndian.Uint64(b[:])
	}
	s = &Sampler{p: p, vocab: vocab, be: be, key: tensor.KeyOn(be, seed)}
	s.fastM = fastM(p, vocab)
	if len(p.LogitBias) > 0 {
		dense := make([]float32, vocab)
		for id, v := range p.LogitBias {
			dense[id] += float32(v)
		}
		s.bias = tensor.FromFloat32On(be, dense, []int{vocab}, tensor.Float32)
	}
	if p.XTCProbability > 0 && len(p.XTCSpecialTokens) > 0 {
		raw := make([]byte, vocab)
		for _, id := range p.XTCSpecialTokens {
			raw[id] = 1
		}
		s.xtcNo = tensor.FromBytesOn(be, raw, []int{vocab}, tensor.Bool, false)
	}
	tensor.Detach(s.key, s.bias, s.xtcNo)
	return s, nil
}

// Params returns the sampler's parameters with defaults filled in.
func (s *Sampler) Params() Params { return s.p }

// HistoryWindow is how many of the latest history tokens Step reads: the
// largest window of the repetition, presence and frequency penalties that
// are on, 0 when none is (the history then does not change the token).
func (s *Sampler) HistoryWindow() int {
	p, w := s.p, 0
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 {
		w = max(w, p.RepetitionContextSize)
	}
	if p.PresencePenalty != 0 {
		w = max(w, p.PresenceContextSize)
	}
	if p.FrequencyPenalty != 0 {
		w = max(w, p.FrequencyContextSize)
	}
	return w
}

// Free releases the sampler's arrays.
func (s *Sampler) Free() {
	tensor.Free(s.key, s.bias, s.xtcNo, s.maskWord, s.maskBit)
	s.key, s.bias, s.xtcNo, s.maskWord, s.maskBit = nil, nil, nil, nil, nil
}

// Step holds one step's lazily computed results (on a lazy backend they
// are graph nodes until evaluated). Tokens is int32 [B].
type Step struct {
	Tokens *tensor.Array
	// Logprob is the chosen tokens' log-probabilities [B] (float32), when asked.
	Logprob *tensor.Array
	// TopIDs and TopLogprobs are [B, TopLogprobs] alternatives, when asked.
	TopIDs, TopLogprobs *tensor.Array
}

// Arrays lists the step's arrays, for tensor.AsyncEval.
func (st *Step) Arrays() []*tensor.Array {
	var out []*tensor.Array
	for _, a := range []*tensor.Array{st.Tokens, st.Logprob, st.TopIDs, st.TopLogprobs} {
		if a != nil {
			out = append(out, a)
		}
	}
	return out
}

// Free releases the step's arrays.
func (st *Step) Free() { tensor.Free(st.Tokens, st.Logprob, st.TopIDs, st.TopLogprobs) }

// TokenLogprob is one alternative token and its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float32
}

// Result is one row's sampled token read back to the host.
type Result struct {
	Token   int
	Logprob float32 // NaN unless logprobs were asked for
	Top     []TokenLogprob
}

// Results reads the step back (blocking) and frees its arrays.
func (st *Step) Results() []Result {
	defer st.Free()
	toks := st.Tokens.Int64s()
	out := make([]Result, len(toks))
	var lp []float32
	if st.Logprob != nil {
		lp = st.Logprob.Float32s()
	}
	var ids []int64
	var tops []float32
	k := 0
	if st.TopIDs != nil {
		ids = st.TopIDs.Int64s()
		tops = st.TopLogprobs.Float32s()
		k = st.TopIDs.Dim(-1)
	}
	for i, t := range toks {
		out[i] = Result{Token: int(t), Logprob: float32(math.NaN())}
		if lp != nil {
			out[i].Logprob = lp[i]
		}
		for j := 0; j < k; j++ {
			out[i].Top = append(out[i].Top, TokenLogprob{ID: int(ids[i*k+j]), Logprob: tops[i*k+j]})
		}
	}
	return out
}

// Sample is Step followed by Results for a single row of logits.
func (s *Sampler) Sample(logits *tensor.Array, history []int32, mask []int32) (Result, error) {
	st, err := s.Step(logits, history, mask)
	if err != nil {
		return Result{}, err
	}
	return st.Results()[0], nil
}

// Step samples one token per row of logits ([V] or [B, V]). history is the
// token ids so far, prompt included (the penalties look at its tail).
// mask, when non-nil, is a bitmask of allowed ids (bit i%32 of word i/32;
// one row of ceil(V/32) words shared by all rows, or one per row) applied
// after the processors: a masked token is never sampled.
func (s *Sampler) Step(logits *tensor.Array, history []int32, mask []int32) (st *Step, err error) {
	defer tensor.Recover(&err)
	if s.key == nil {
		return nil, errors.New("sampler: used after Free")
	}
	if logits.NDim() < 1 || logits.NDim() > 2 || logits.Dim(-1) != s.vocab {
		return nil, fmt.Errorf("sampler: logits of shape %v for vocabulary %d (want [V] or [B, V])", logits.Shape(), s.vocab)
	}
	if mask != nil {
		if err := checkMask(mask, s.vocab, rowsOf(logits)); err != nil {
			return nil, err
		}
	}
	for _, id := range history {
		if id < 0 || int(id) >= s.vocab {
			return nil, fmt.Errorf("sampler: history token %d outside the vocabulary [0, %d)", id, s.vocab)
		}
	}
	sc := tensor.NewScope()
	defer sc.Close()

	x := tensor.AsType(logits, tensor.Float32)
	if x.NDim() == 1 {
		x = tensor.ExpandDims(x, 0)
	}
	x = s.process(x, history)
	if mask != nil {
		x = s.applyMask(x, mask)
	}
	logprobs := tensor.LogSoftmax(x, -1)

	st = &Step{}
	if s.p.Temperature == 0 {
		st.Tokens = tensor.AsType(tensor.Argmax(logprobs, -1, false), tensor.Int32)
	} else {
		next, sub := tensor.SplitKey2(s.key)
		tensor.Detach(next) // the sampler owns its key across steps
		s.key.Free()
		s.key = next
		catKey, xtcKey := tensor.SplitKey2(sub)
		if s.fastM > 0 {
			pathFast.Add(1)
			vals, ids := s.filterFast(logprobs, xtcKey)
			pick := tensor.Categorical(catKey, tensor.MulScalar(vals, 1/s.p.Temperature), -1)
			st.Tokens = tensor.Squeeze(tensor.TakeAlongAxis(ids, tensor.ExpandDims(pick, -1), -1), -1)
		} else {
			pathFull.Add(1)
			filtered := s.filter(logprobs, xtcKey)
			scaled := tensor.MulScalar(filtered, 1/s.p.Temperature)
			st.Tokens = tensor.Categorical(catKey, scaled, -1)
		}
	}
	if s.p.Logprobs || s.p.TopLogprobs > 0 {
		idx := tensor.ExpandDims(st.Tokens, -1)
		st.Logprob = tensor.Squeeze(tensor.TakeAlongAxis(logprobs, idx, -1), -1)
	}
	if s.p.TopLogprobs > 0 {
		st.TopLogprobs, st.TopIDs = tensor.TopK(logprobs, s.p.TopLogprobs, -1)
	}
	sc.Keep(st.Arrays()...)
	return st, nil
}

func rowsOf(a *tensor.Array) int {
	if a.NDim() == 2 {
		return a.Dim(0)
	}
	return 1
}

// checkMask verifies the mask's length and that every row allows a token.
func checkMask(mask []int32, vocab, rows int) error {
	w := (vocab + 31) / 32
	if len(mask) != w && len(mask) != w*rows {
		return fmt.Errorf("sampler: token mask of %d words for vocabulary %d (want %d or %d)", len(mask), vocab, w, w*rows)
	}
	for r := 0; r < len(mask)/w; r++ {
		row := mask[r*w : (r+1)*w]
		any := false
		for i, word := range row {
			bits := uint32(word)
			if i == w-1 && vocab%32 != 0 {
				bits &= 1<<(vocab%32) - 1
			}
			if bits != 0 {
				any = true
				break
			}
		}
		if !any {
			return fmt.Errorf("%w (row %d)", ErrAllMasked, r)
		}
	}
	return nil
}

// applyMask sets logits of disallowed tokens to -inf.
func (s *Sampler) applyMask(x *tensor.Array, mask []int32) *tensor.Array {
	be := s.be
	if s.maskWord == nil {
		ids := tensor.ArangeOn(be, 0, float64(s.vocab), 1, tensor.Int32)
		s.maskWord = tensor.RightShift(ids, scalarI32(be, 5))
		s.maskBit = tensor.ExpandDims(tensor.BitwiseAnd(ids, scalarI32(be, 31)), 0)
		tensor.Detach(s.maskWord, s.maskBit) // kept across steps
	}
	w := (s.vocab + 31) / 32
	rows := len(mask) / w
	words := tensor.FromInt32On(be, mask, []int{rows, w})
	sel := tensor.Take(words, s.maskWord, 1) // [rows, V]
	bit := tensor.BitwiseAnd(tensor.RightShift(sel, s.maskBit), scalarI32(be, 1))
	allowed := tensor.NotEqual(bit, scalarI32(be, 0))
	return tensor.WhereScalar(allowed, x, math.Inf(-1))
}

// process applies the logits processors in mlx-lm's order.
func (s *Sampler) process(x *tensor.Array, history []int32) *tensor.Array {
	if s.bias != nil {
		x = tensor.Add(x, s.bias)
	}
	p := s.p
	if p.RepetitionPenalty != 0 && p.RepetitionPenalty != 1 && len(history) > 0 {
		ids := unique(tail(history, p.RepetitionContextSize))
		idx := s.indexRows(ids, x.Dim(0))
		sel := tensor.TakeAlongAxis(x, idx, -1)
		neg := tensor.Less(sel, scalarF32(s.be, 0))
		pen := tensor.Where(neg, tensor.MulScalar(sel, p.RepetitionPenalty), tensor.DivScalar(sel, p.RepetitionPenalty))
		x = tensor.PutAlongAxis(x, idx, pen, -1)
	}
	if p.PresencePenalty != 0 && len(history) > 0 {
		ids := unique(tail(history, p.PresenceContextSize))
		idx := s.indexRows(ids, x.Dim(0))
		sel := tensor.TakeAlongAxis(x, idx, -1)
		x = tensor.PutAlongAxis(x, idx, tensor.SubScalar(sel, p.PresencePenalty), -1)
	}
	if p.FrequencyPenalty != 0 && len(history) > 0 {
		window := tail(history, p.FrequencyContextSize)
		ids := unique(window)
		counts := make([]float32, len(ids))
		for i, id := range ids {
			for _, t := range window {
				if t == id {
					counts[i]++
				}
			}
			counts[i] *= float32(p.FrequencyPenalty)
		}
		idx := s.indexRows(ids, x.Dim(0))
		sel := tensor.TakeAlongAxis(x, idx, -1)
		x = tensor.PutAlongAxis(x, idx, tensor.Sub(sel, tensor.FromFloat32On(s.be, counts, []int{1, len(ids)}, tensor.Float32)), -1)
	}
	return x
}

// filter applies top-p, min-p, XTC and top-k to logprobs [B, V], in that order.
func (s *Sampler) filter(lp *tensor.Array, xtcKey *tensor.Array) *tensor.Array {
	p := s.p
	negInf := math.Inf(-1)
	if p.TopP > 0 && p.TopP < 1 {
		probs := tensor.Exp(lp)
		order := tensor.Argsort(lp, -1) // ascending
		cum := tensor.Cumsum(tensor.TakeAlongAxis(probs, order, -1), -1, false, true)
		back := tensor.PutAlongAxis(tensor.ZerosLike(probs), order, cum, -1)
		keep := tensor.Greater(back, scalarF32(s.be, 1-p.TopP))
		lp = tensor.WhereScalar(keep, lp, negInf)
	}
	if p.MinP != 0 {
		top := tensor.Max(lp, []int{-1}, true)
		remove := tensor.Less(lp, tensor.AddScalar(top, math.Log(p.MinP)))
		if k := min(p.MinTokensToKeep, s.vocab); k > 1 {
			part := tensor.Argpartition(lp, -k, -1)
			topIdx := tensor.SliceAxis(part, -1, s.vocab-k, s.vocab)
			remove = tensor.PutAlongAxis(remove, topIdx, tensor.FullOn(s.be, nil, 0, tensor.Bool), -1)
		}
		lp = tensor.WhereScalar(tensor.LogicalNot(remove), lp, negInf)
	}
	if p.XTCProbability > 0 {
		probs := tensor.Softmax(lp, -1)
		above := tensor.Greater(probs, scalarF32(s.be, p.XTCThreshold))
		floor := tensor.Min(tensor.WhereScalar(above, probs, math.Inf(1)), []int{-1}, true)
		cut := tensor.Greater(probs, floor)
		if s.xtcNo != nil {
			cut = tensor.LogicalAnd(cut, tensor.LogicalNot(s.xtcNo))
		}
		u := tensor.Uniform(xtcKey, nil, 0, 1, tensor.Float32)
		apply := tensor.LessEqual(u, scalarF32(s.be, p.XTCProbability))
		lp = tensor.Where(tensor.LogicalAnd(apply, cut), tensor.FullLike(lp, negInf), lp)
	}
	if p.TopK > 0 && p.TopK < s.vocab {
		neg := tensor.Neg(lp)
		part := tensor.Argpartition(neg, p.TopK-1, -1)
		drop := tensor.SliceAxis(part, -1, p.TopK, s.vocab)
		lp = tensor.PutAlongAxis(lp, drop, scalarF32(s.be, negInf), -1)
	}
	return lp
}

// indexRows makes an int32 [rows, n] index array repeating ids on each row.
func (s *Sampler) indexRows(ids []int32, rows int) *tensor.Array {
	a := tensor.FromInt32On(s.be, ids, []int{1, len(ids)})
	if rows == 1 {
		return a
	}
	return tensor.Contiguous(tensor.BroadcastTo(a, rows, len(ids)))
}

func tail(h []int32, n int) []int32 {
	if len(h) > n {
		return h[len(h)-n:]
	}
	return h
}

// unique returns the distinct ids in first-seen order.
func unique(ids []int32) []int32 {
	out := make([]int32, 0, len(ids))
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

func scalarF32(be tensor.Backend, v float64) *tensor.Array {
	return tensor.FullOn(be, nil, v, tensor.Float32)
}

func scalarI32(be tensor.Backend, v float64) *tensor.Array {
	return tensor.FullOn(be, nil, v, tensor.Int32)
}
