package sampler

import (
	"errors"
	"fmt"

	"github.com/mlxgo/mlxgo/tensor"
)

// Distribution returns, for each row of logits ([V] or [B, V]), the two
// distributions of a Step over the same inputs: logprobs [B, V], the
// log-probabilities Step reports (after the processors and the mask,
// before the truncating filters), and probs [B, V], the probabilities
// Step's categorical draw samples from (after top-p, min-p, XTC and top-k,
// at the sampler's temperature; one-hot on the argmax at temperature 0).
// Speculative sampling compares a draft's distribution with these. The
// caller owns both arrays.
//
// At temperature > 0 it advances the random stream as Step does (one
// split of the key per call), since XTC's draw decides the distribution;
// nothing else is drawn.
func (s *Sampler) Distribution(logits *tensor.Array, history []int32, mask []int32) (logprobs, probs *tensor.Array, err error) {
	defer tensor.Recover(&err)
	if s.key == nil {
		return nil, nil, errors.New("sampler: used after Free")
	}
	if logits.NDim() < 1 || logits.NDim() > 2 || logits.Dim(-1) != s.vocab {
		return nil, nil, fmt.Errorf("sampler: logits of shape %v for vocabulary %d (want [V] or [B, V])", logits.Shape(), s.vocab)
	}
	if mask != nil {
		if err := checkMask(mask, s.vocab, rowsOf(logits)); err != nil {
			return nil, nil, err
		}
	}
	for _, id := range history {
		if id < 0 || int(id) >= s.vocab {
			return nil, nil, fmt.Errorf("sampler: history token %d outside the vocabulary [0, %d)", id, s.vocab)
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
	logprobs = tensor.LogSoftmax(x, -1)
	if s.p.Temperature == 0 {
		top := tensor.Argmax(logprobs, -1, true)
		ids := tensor.ArangeOn(s.be, 0, float64(s.vocab), 1, tensor.Int32)
		probs = tensor.AsType(tensor.Equal(tensor.ExpandDims(ids, 0), tensor.AsType(top, tensor.Int32)), tensor.Float32)
	} else {
		next, sub := tensor.SplitKey2(s.key)
		tensor.Detach(next)
		s.key.Free()
		s.key = next
		_, xtcKey := tensor.SplitKey2(sub)
		filtered := s.filter(logprobs, xtcKey)
		probs = tensor.Softmax(tensor.MulScalar(filtered, 1/s.p.Temperature), -1)
	}
	sc.Keep(logprobs, probs)
	return logprobs, probs, nil
}

// Uniforms draws n numbers uniform in [0, 1) from the sampler's random
// stream (one split of the key), read back to the host: the coin flips
// and inverse-CDF draws of speculative sampling, reproducible under a
// seed like every other draw of the request.
func (s *Sampler) Uniforms(n int) (out []float64, err error) {
	defer tensor.Recover(&err)
	if s.key == nil {
		return nil, errors.New("sampler: used after Free")
	}
	if n <= 0 {
		return nil, nil
	}
	sc := tensor.NewScope()
	defer sc.Close()
	next, sub := tensor.SplitKey2(s.key)
	tensor.Detach(next)
	s.key.Free()
	s.key = next
	u := tensor.Uniform(sub, []int{n}, 0, 1, tensor.Float32).Float32s()
	out = make([]float64, n)
	for i, v := range u {
		out[i] = float64(v)
	}
	return out, nil
}
