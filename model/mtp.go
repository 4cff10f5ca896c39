package model

import (
	"errors"
	"fmt"

	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/tensor"
)

// MTPArchitecture is implemented by architectures that load a
// checkpoint's multi-token-prediction (MTP, "nextn") blocks: DeepSeek-V3
// and GLM-5 (model.layers.N.{enorm,hnorm,eh_proj,shared_head}) and
// Qwen3-Next / Qwen3.5 (mtp.*). Its methods panic on bad input, like
// Architecture's; Loaded.MTP wraps them.
type MTPArchitecture interface {
	// MTPDepth is the number of MTP blocks loaded (0: none).
	MTPDepth() int
	// MakeMTPCaches returns one fresh cache per MTP block.
	MakeMTPCaches() []kv.Cache
	// MTPStep runs block k over hidden [B, T, D] and next [B, T] with its
	// cache (nil: the T positions alone); see MTP.Step.
	MTPStep(k int, hidden, next *tensor.Array, cache kv.Cache) (out, logits *tensor.Array)
}

// MTP is a loaded model's multi-token-prediction head, a draft source for
// speculative decoding that needs no second model: from the model's
// hidden state at position p and the token at p+1 it predicts the token
// at p+2. Get it with Loaded.MTP.
//
// Driving it: run the model over tokens t_0..t_p (Forward) and keep its
// hidden states; the model's logits at p give t_{p+1}. Then Step(0,
// hidden[p0..p], tokens[p0+1..p+1], caches[0]) feeds the MTP block the
// positions its cache has not seen (p0 is the cache's offset: its cache
// holds one entry per position, like the model's, and advances by T each
// call; trim it with the model's on rejection); its last logits row
// drafts t_{p+2}. For a further draft from the same block, call Step
// again with the returned out's last row as hidden and the drafted token
// as next (the chaining DeepSeek's and Qwen's MTP are served with).
type MTP struct {
	m *Loaded
	a MTPArchitecture
}

// MTP returns the model's MTP head, or false when its checkpoint has
// none (or the architecture does not run one).
func (m *Loaded) MTP() (*MTP, bool) {
	a, ok := m.arch.(MTPArchitecture)
	if !ok || a.MTPDepth() == 0 {
		return nil, false
	}
	return &MTP{m: m, a: a}, true
}

// Depth is the number of MTP blocks (DeepSeek-V3 and GLM-5 ship 1).
func (p *MTP) Depth() int { return p.a.MTPDepth() }

// MakeCaches returns fresh caches, one per block; the caller frees them
// (FreeCaches).
func (p *MTP) MakeCaches() []kv.Cache { return p.a.MakeMTPCaches() }

// Step runs MTP block k (0 ≤ k < Depth) at T positions: hidden [B, T, D]
// is the model's final-normed hidden state there (Forward's output; for a
// chained draft, a previous Step's out), next [B, T] int32 the token that
// followed each, and cache block k's cache at those positions' offset
// (nil: the T positions attend among themselves only). It returns the
// block's output hidden states out [B, T, D] and logits [B, T, V] for the
// token after next, both owned by the caller.
func (p *MTP) Step(k int, hidden, next *tensor.Array, cache kv.Cache) (out, logits *tensor.Array, err error) {
	if p.m.closed {
		return nil, nil, errors.New("model: MTP.Step on a closed model")
	}
	err = tensor.Try(func() {
		switch {
		case k < 0 || k >= p.a.MTPDepth():
			panic(&tensor.Error{Op: "model.MTP.Step", Err: fmt.Errorf("%w: block %d of %d", tensor.ErrArgument, k, p.a.MTPDepth())})
		case hidden.NDim() != 3 || next.NDim() != 2 || hidden.Dim(0) != next.Dim(0) || hidden.Dim(1) != next.Dim(1):
			panic(&tensor.Error{Op: "model.MTP.Step", Err: fmt.Errorf("%w: hidden %v and next %v (want [B, T, D] and [B, T])", tensor.ErrShape, hidden.Shape(), next.Shape())})
		case hidden.Dim(2) != p.m.info.Hidden:
			panic(&tensor.Error{Op: "model.MTP.Step", Err: fmt.Errorf("%w: hidden size %d, the model's is %d", tensor.ErrShape, hidden.Dim(2), p.m.info.Hidden)})
		}
		out, logits = p.a.MTPStep(k, hidden, next, cache)
	})
	return out, logits, err
}
