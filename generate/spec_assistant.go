package generate

import (
	"errors"
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// TargetObserver is a Drafter that drafts from the target's own state (a
// Gemma 4 assistant, an MTP head): after every round's rollback the
// verifier (a lone Stream's, or a Batch row's) gives it the round's final
// hidden states and the sequence's caches.
type TargetObserver interface {
	Drafter
	// Observe is given the round's final hidden states ([1, T, D], one per
	// fed position, evaluated; the caller frees them after the call),
	// the index of the last kept position (whose output is the round's
	// last emitted token), and the target's caches, which then hold the
	// tokens up to that position — unless restored is set (a snapshot
	// was restored and the kept tokens will be fed again), when they hold
	// fewer. It runs inside the backend's StepRunner.
	Observe(hidden *tensor.Array, last int, caches []kv.Cache, restored bool) error
}

// AssistantModel is what AssistantDrafter needs of a Gemma 4 assistant
// (model.Gemma4Assistant), S being the target state its steps read
// (model.AssistantKV).
type AssistantModel[S any] interface {
	// Backbone is the hidden size of the target it was trained for.
	Backbone() int
	// VocabSize is its vocabulary's size.
	VocabSize() int
	// SlidingWindow is the window of the target's sliding layers it reads.
	SlidingWindow() int
	// Step runs one drafting step on x (the token's embedding beside a
	// hidden state) at position pos: the projected hidden state and the
	// logits.
	Step(x *tensor.Array, shared S, pos int) (proj, logits *tensor.Array)
}

// AssistantTarget is what AssistantDrafter needs of the assistant's
// target (model.Gemma4).
type AssistantTarget[S any] interface {
	// HiddenSize and VocabSize are the target's.
	HiddenSize() int
	VocabSize() int
	// AssistantKV collects the state the assistant reads from the
	// target's caches.
	AssistantKV(caches []kv.Cache, window int) (S, error)
	// EmbedTokens is the target's (scaled) token embedding.
	EmbedTokens(ids *tensor.Array) (*tensor.Array, error)
}

// assistantState is the target state's constraint: freed through its
// pointer.
type assistantState[S any] interface {
	*S
	Free()
}

// AssistantDrafter drafts with a Gemma 4 assistant (AssistantModel)
// over its Gemma 4 target's state, as transformers'
// SinglePositionMultiTokenCandidateGenerator does: the first step reads
// the target's embedding of the last token beside the target's final
// hidden state at the position before it, each later step the drafted
// token's embedding beside the drafter's projected hidden state, all at
// the last token's position, over the target's last sliding and full
// layers' keys and values. Each draft is the drafter's most likely token
// (a point mass for speculative sampling). It drafts nothing in a round
// the target's state does not describe: the first (prefill leaves no
// hidden state) and one after a snapshot restore.
type AssistantDrafter[S any, PS assistantState[S]] struct {
	a      AssistantModel[S]
	t      AssistantTarget[S]
	be     tensor.Backend
	runner StepRunner
	h      *tensor.Array // [1, 1, D]: the target's hidden state at the last kept position
	caches []kv.Cache
	calls  int
}

// NewAssistantDrafter makes a drafter for target t with assistant a, for
// a generation described by info; a must have been trained for a target
// of t's hidden size and vocabulary.
func NewAssistantDrafter[S any, PS assistantState[S]](a AssistantModel[S], t AssistantTarget[S], info DraftInfo) (*AssistantDrafter[S, PS], error) {
	if a == nil || t == nil {
		return nil, errors.New("generate: the assistant drafter needs an assistant and a Gemma 4 target")
	}
	if a.Backbone() != t.HiddenSize() {
		return nil, fmt.Errorf("generate: the assistant was trained for a target of hidden size %d; this target's is %d", a.Backbone(), t.HiddenSize())
	}
	if av, tv := a.VocabSize(), t.VocabSize(); av != tv || (info.Vocab != 0 && info.Vocab != av) {
		return nil, fmt.Errorf("generate: the assistant's vocabulary (%d tokens) differs from the target's (%d tokens)", av, tv)
	}
	be := info.Backend
	if be == nil {
		if err := tensor.Try(func() { be = tensor.Default() }); err != nil {
			return nil, err
		}
	}
	d := &AssistantDrafter[S, PS]{a: a, t: t, be: be}
	d.runner, _ = be.(StepRunner)
	return d, nil
}

// Observe implements TargetObserver.
func (d *AssistantDrafter[S, PS]) Observe(hidden *tensor.Array, last int, caches []kv.Cache, restored bool) error {
	tensor.Free(d.h)
	d.h, d.caches = nil, nil
	if restored {
		return nil
	}
	return tensor.Try(func() {
		h := tensor.SliceAxis(hidden, 1, last, last+1)
		tensor.Eval(h)
		tensor.Detach(h)
		d.h, d.caches = h, caches
	})
}

// Draft implements Drafter: up to n tokens to follow tokens, none when
// the target's state is not the one tokens end in.
func (d *AssistantDrafter[S, PS]) Draft(tokens []int32, n int, _ *SpecRand) (Draft, error) {
	if d.h == nil || n <= 0 || len(tokens) == 0 {
		return Draft{}, nil
	}
	pos := len(tokens) - 1 // the last token's: it is not in the caches yet
	for _, c := range d.caches {
		if c != nil && c.Offset() != pos {
			return Draft{}, nil
		}
	}
	var out Draft
	err := onRunner(d.runner, func() error {
		return tensor.Try(func() {
			sc := tensor.NewScope()
			defer sc.Close()
			shared, err := d.t.AssistantKV(d.caches, d.a.SlidingWindow())
			if err != nil {
				panic(err)
			}
			defer PS(&shared).Free()
			tok, h := tokens[pos], d.h
			for range n {
				e, err := d.t.EmbedTokens(tensor.FromInt32On(d.be, []int32{tok}, []int{1, 1}))
				if err != nil {
					panic(err)
				}
				proj, logits := d.a.Step(tensor.Concatenate([]*tensor.Array{e, tensor.AsType(h, e.DType())}, 2), shared, pos)
				d.calls++
				tok = int32(tensor.Argmax(tensor.Reshape(logits, logits.Size()), 0, false).ItemInt())
				out.Tokens = append(out.Tokens, tok)
				h = proj
			}
		})
	})
	if err != nil {
		return Draft{}, err
	}
	return out, nil
}

// forwards is the number of drafter steps so far (SpecStats.DraftCalls).
func (d *AssistantDrafter[S, PS]) forwards() int { return d.calls }

// Close frees what the drafter holds.
func (d *AssistantDrafter[S, PS]) Close() {
	tensor.Free(d.h)
	d.h, d.caches = nil, nil
}
