package generate

import (
	"context"
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// ScoreResult is what Score measured over one sequence.
type ScoreResult struct {
	// Tokens is the number of scored predictions (the sequence's length
	// less one: each token after the first, given those before it).
	Tokens int
	// NLL is the summed negative log-likelihood in nats, and NLLSq the sum
	// of each prediction's square (for a standard error).
	NLL, NLLSq float64
	// KL is the summed KL(reference ‖ scored) of every position's next-
	// token distribution against an unquantized run of the same model;
	// 0 without a reference.
	KL float64
	// KVBytes is the memory the scored run's caches held at the end
	// (capacity included), LiveKVBytes the part holding tokens (the
	// caches' states): over the Tokens they hold, the scheme's bytes per
	// token.
	KVBytes, LiveKVBytes int
}

// Score runs ids through m as a prompt is prefilled — chunks of
// opts.PrefillChunkSize through the model's caches, converted after each
// chunk as opts' KV scheme says (KVBits, KVConfig or KVQuant from
// QuantizedKVStart on) — and scores every next token with the logits of
// the position before it. With ref, a second set of plain caches runs the
// same chunks alongside and each position's KL divergence from it is
// summed: what the KV scheme costs, teacher-forced. Sampling options are
// ignored.
func Score(ctx context.Context, m Model, ids []int32, opts *Options, ref bool) (ScoreResult, error) {
	var res ScoreResult
	if len(ids) < 2 {
		return res, fmt.Errorf("generate: scoring needs at least 2 tokens, got %d", len(ids))
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Caches, o.Grammar, o.Sampler = nil, nil, samplerDefaults
	r, err := prepare(m, ids, &o, nil)
	if err != nil {
		return res, err
	}
	runner, _ := r.be.(StepRunner)
	caches := m.MakeCaches()
	defer freeCaches(caches)
	var plain []kv.Cache
	if ref {
		plain = m.MakeCaches()
		defer freeCaches(plain)
	}
	chunk := r.o.PrefillChunkSize
	for start := 0; start < len(ids)-1; start += chunk {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		end := min(start+chunk, len(ids)-1)
		var lq, lr []float32
		err := onRunner(runner, func() error {
			sc := tensor.NewScope()
			defer sc.Close()
			var err error
			if lq, err = chunkLogits(m, r.be, ids[start:end], caches); err != nil {
				return err
			}
			if r.quant {
				if _, err := kv.MaybeQuantize(caches, r.plan); err != nil {
					return err
				}
			}
			if ref {
				if lr, err = chunkLogits(m, r.be, ids[start:end], plain); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		v := len(lq) / (end - start)
		for i := range end - start {
			row := lq[i*v : (i+1)*v]
			lse := logSumExp(row)
			nll := lse - float64(row[ids[start+i+1]])
			res.NLL += nll
			res.NLLSq += nll * nll
			res.Tokens++
			if ref {
				res.KL += klDiv(lr[i*v:(i+1)*v], row, lse)
			}
		}
		if r.mem != nil {
			_ = r.mem.ClearCache()
		}
	}
	res.KVBytes = cachesBytes(caches)
	err = tensor.Try(func() {
		for _, c := range caches {
			if c != nil {
				st := c.State()
				for _, a := range st.Arrays {
					res.LiveKVBytes += a.NBytes()
				}
				st.Free()
			}
		}
	})
	return res, err
}

// samplerDefaults are the zero sampling parameters (greedy); Score
// samples nothing but prepare validates them.
var samplerDefaults = Options{}.Sampler

// chunkLogits runs ids through m at the caches' offsets and returns the
// logits of every position, [n·V] float32 on the host.
func chunkLogits(m Model, be tensor.Backend, ids []int32, caches []kv.Cache) ([]float32, error) {
	in := tensor.FromInt32On(be, ids, []int{1, len(ids)})
	h, err := m.Forward(in, caches)
	if err != nil {
		return nil, err
	}
	logits, err := m.Logits(h)
	if err != nil {
		return nil, err
	}
	return logits.Float32s(), nil
}

// logSumExp is log Σ exp(x) in float64.
func logSumExp(x []float32) float64 {
	mx := math.Inf(-1)
	for _, a := range x {
		mx = max(mx, float64(a))
	}
	s := 0.0
	for _, a := range x {
		s += math.Exp(float64(a) - mx)
	}
	return mx + math.Log(s)
}

// klDiv is KL(softmax(ref) ‖ softmax(x)) given x's logSumExp.
func klDiv(ref, x []float32, lseX float64) float64 {
	lseR := logSumExp(ref)
	kl := 0.0
	for j, a := range ref {
		lr := float64(a) - lseR
		if lr < -80 {
			continue // contributes < e^-80 · |Δ|
		}
		kl += math.Exp(lr) * (lr - (float64(x[j]) - lseX))
	}
	return max(kl, 0)
}
