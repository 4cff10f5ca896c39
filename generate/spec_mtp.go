package generate

import (
	"errors"
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// PrefillObserver is a TargetObserver that also reads the prompt's final
// hidden states while a lone Stream prefills it (an MTP head keeps a
// cache of every position's).
type PrefillObserver interface {
	TargetObserver
	// ObservePrefill is given a prefill chunk's final hidden states
	// [1, T, D], of the positions start…start+T−1 (evaluated; the caller
	// frees them after the call). It runs inside the backend's StepRunner.
	ObservePrefill(hidden *tensor.Array, start int) error
}

// MTPHead is a model's multi-token-prediction head as MTPDrafter uses it
// (model.MTP).
type MTPHead interface {
	// Depth is the number of MTP blocks.
	Depth() int
	// MakeCaches makes one cache per block.
	MakeCaches() []kv.Cache
	// Step runs block k on the target's hidden states and the next
	// tokens, advancing cache: the block's output and its logits.
	Step(k int, hidden, next *tensor.Array, cache kv.Cache) (out, logits *tensor.Array, err error)
}

// MTPDrafter drafts with a model's own multi-token-prediction head
// (MTPHead; model.MTP: DeepSeek-V3, GLM-5, Qwen3-Next / Qwen3.5 checkpoints that
// carry one): block 0 reads the target's final hidden state at position
// p beside the token at p+1 and predicts the token at p+2; further drafts
// chain the block's own output and the drafted token (as DeepSeek's and
// Qwen's MTP are served). The block's cache holds one entry per position
// the target has kept, fed from the prefill's and each round's hidden
// states; chained drafts' entries are trimmed after each round. Each
// draft is the head's most likely token (a point mass for speculative
// sampling). A round whose hidden states are not all known (after a
// snapshot restore) drafts nothing.
type MTPDrafter struct {
	p      MTPHead
	be     tensor.Backend
	runner StepRunner
	cache  kv.Cache
	base   int           // the absolute position of the cache's first entry
	pend   *tensor.Array // [1, K, D]: hidden states of positions from pendAt not yet in the cache
	pendAt int
	calls  int
}

// NewMTPDrafter makes a drafter over the MTP head p (of the target model)
// for a generation described by info.
func NewMTPDrafter(p MTPHead, info DraftInfo) (*MTPDrafter, error) {
	if p == nil || p.Depth() == 0 {
		return nil, errors.New("generate: the MTP drafter needs a model with MTP blocks")
	}
	be := info.Backend
	if be == nil {
		if err := tensor.Try(func() { be = tensor.Default() }); err != nil {
			return nil, err
		}
	}
	d := &MTPDrafter{p: p, be: be, base: -1}
	d.runner, _ = be.(StepRunner)
	cs := p.MakeCaches()
	for i, c := range cs {
		if i > 0 && c != nil {
			c.Free()
		}
	}
	d.cache = cs[0]
	if d.cache == nil || !d.cache.IsTrimmable() {
		if d.cache != nil {
			d.cache.Free()
		}
		return nil, errors.New("generate: the MTP block's cache cannot drop chained drafts")
	}
	return d, nil
}

// add appends hidden rows [1, T, D] of positions at… to the pending ones,
// dropping pending rows from at on (a replayed position replaces them).
func (d *MTPDrafter) add(hidden *tensor.Array, at int) {
	if d.pend != nil && at < d.pendAt+d.pend.Dim(1) {
		if keep := at - d.pendAt; keep <= 0 {
			d.pend.Free()
			d.pend = nil
		} else {
			p := tensor.SliceAxis(d.pend, 1, 0, keep)
			tensor.Eval(p)
			tensor.Detach(p)
			d.pend.Free()
			d.pend = p
		}
	}
	var next *tensor.Array
	if d.pend == nil {
		next = tensor.SliceAxis(hidden, 1, 0, hidden.Dim(1))
		d.pendAt = at
	} else if at == d.pendAt+d.pend.Dim(1) {
		next = tensor.Concatenate([]*tensor.Array{d.pend, hidden}, 1)
	} else { // a gap: start over from these rows
		d.pend.Free()
		d.pend = nil
		next = tensor.SliceAxis(hidden, 1, 0, hidden.Dim(1))
		d.pendAt = at
	}
	tensor.Eval(next)
	tensor.Detach(next)
	if d.pend != nil {
		d.pend.Free()
	}
	d.pend = next
}

// ObservePrefill implements PrefillObserver.
func (d *MTPDrafter) ObservePrefill(hidden *tensor.Array, start int) error {
	return tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		d.add(hidden, start)
	})
}

// Observe implements TargetObserver: the kept positions' hidden states
// join the pending ones (none after a restore: they are fed again).
func (d *MTPDrafter) Observe(hidden *tensor.Array, last int, caches []kv.Cache, restored bool) error {
	if restored {
		return nil
	}
	off := -1
	for _, c := range caches {
		if c != nil {
			off = c.Offset()
			break
		}
	}
	if off < 0 {
		return fmt.Errorf("generate: the MTP drafter's target has no caches")
	}
	return tensor.Try(func() {
		sc := tensor.NewScope()
		defer sc.Close()
		d.add(tensor.SliceAxis(hidden, 1, 0, last+1), off-last-1)
	})
}

// Draft implements Drafter: the pending positions go into the block's
// cache (each beside the token that followed it), the last one's logits
// draft the first token, and chained steps the rest.
func (d *MTPDrafter) Draft(tokens []int32, n int, _ *SpecRand) (Draft, error) {
	if d.pend == nil || n <= 0 {
		return Draft{}, nil
	}
	k := d.pend.Dim(1)
	// the pending positions pendAt…pendAt+k−1 must end before the last
	// token (whose hidden state is not known yet)
	if d.pendAt+k != len(tokens)-1 {
		return Draft{}, nil
	}
	if d.base < 0 {
		d.base = d.pendAt
	}
	if d.base+d.cache.Offset() != d.pendAt {
		return Draft{}, nil // the cache and the pending rows disagree: nothing sound to draft from
	}
	var out Draft
	err := onRunner(d.runner, func() error {
		return tensor.Try(func() {
			sc := tensor.NewScope()
			defer sc.Close()
			next := tensor.FromInt32On(d.be, tokens[d.pendAt+1:d.pendAt+1+k], []int{1, k})
			h, logits, err := d.p.Step(0, d.pend, next, d.cache)
			if err != nil {
				panic(err)
			}
			defer func() { tensor.Free(h, logits) }() // the last step's; earlier ones are freed as they are replaced
			d.calls++
			d.pend.Free()
			d.pend = nil
			chained := 0
			for i := range n {
				last := tensor.SliceAxis(logits, 1, logits.Dim(1)-1, logits.Dim(1))
				tok := int32(tensor.Argmax(tensor.Reshape(last, last.Size()), 0, false).ItemInt())
				out.Tokens = append(out.Tokens, tok)
				if i == n-1 {
					break
				}
				hl := tensor.SliceAxis(h, 1, h.Dim(1)-1, h.Dim(1))
				h2, l2, err := d.p.Step(0, hl, tensor.FromInt32On(d.be, []int32{tok}, []int{1, 1}), d.cache)
				if err != nil {
					panic(err)
				}
				tensor.Eval(l2)
				tensor.Free(h, logits)
				h, logits = h2, l2
				d.calls++
				chained++
			}
			if chained > 0 {
				if got := d.cache.Trim(chained); got != chained {
					panic(fmt.Errorf("the MTP cache dropped %d of %d chained entries", got, chained))
				}
			}
		})
	})
	if err != nil {
		return Draft{}, err
	}
	return out, nil
}

// forwards is the number of MTP block steps so far (SpecStats.DraftCalls).
func (d *MTPDrafter) forwards() int { return d.calls }

// Close frees the block's cache and the pending hidden states.
func (d *MTPDrafter) Close() {
	tensor.Free(d.pend)
	d.pend = nil
	if d.cache != nil {
		d.cache.Free()
		d.cache = nil
	}
}
