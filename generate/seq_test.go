package generate

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
	_ "github.com/mlxgo/mlxgo/tensor/cpu"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// altGrammar allows the ids in [lo, hi) after an even number of accepted
// tokens and only id forced after an odd number, so that exact
// jump-forward feeds forced after every sampled token. It never ends.
type altGrammar struct {
	lo, hi, forced, seen int
}

func (g *altGrammar) allowed(id int) bool {
	if g.seen%2 == 1 {
		return id == g.forced
	}
	return id >= g.lo && id < g.hi
}

func (g *altGrammar) AcceptToken(id int) bool {
	if !g.allowed(id) {
		return false
	}
	g.seen++
	return true
}

func (g *altGrammar) FillNextTokenBitmask(mask []int32) error {
	clear(mask)
	for id := range len(mask) * 32 {
		if g.allowed(id) {
			mask[id/32] |= int32(uint32(1) << (id % 32))
		}
	}
	return nil
}

func (g *altGrammar) IsTerminated() bool { return false }

// TestSeqRowOfBatch: a sequence's logits-to-token pieces (fillMask,
// sample, read, accept with its jump-forward) read only the sequence's
// own row, so sequences sampling rows of one batched logits array — each
// with its own sampler, seed, penalties, grammar and jump-forward — get
// exactly the tokens, logprobs and alternatives each gets from its row
// alone. This is how a batch generator drives them.
func TestSeqRowOfBatch(t *testing.T) {
	t.Cleanup(tensortest.NoLeaks(t))
	const vocab = 70
	seed := uint64(7)
	opts := func() []Options {
		return []Options{
			{MaxTokens: -1, Sampler: sampler.Params{Temperature: 0.8, Seed: &seed, Logprobs: true, RepetitionPenalty: 1.5, TopK: 10}},
			{MaxTokens: -1, Sampler: sampler.Params{TopLogprobs: 3, PresencePenalty: 0.7}, Grammar: &altGrammar{lo: 0, hi: 64, forced: 65}},
			{MaxTokens: -1, Sampler: sampler.Params{Logprobs: true}, Grammar: &altGrammar{lo: 10, hi: 40, forced: 3}, JumpForward: true},
		}
	}
	prompt := []int32{1, 2, 3, 2}
	newSeqs := func() []*seq {
		var qs []*seq
		for _, o := range opts() {
			smp, err := sampler.New(o.Sampler, vocab)
			if err != nil {
				t.Fatal(err)
			}
			qs = append(qs, newSeq(prompt, o, vocab, smp, 0))
		}
		return qs
	}
	batch, solo := newSeqs(), newSeqs()
	defer func() {
		for _, q := range append(batch, solo...) {
			q.freeSteps()
			q.smp.Free()
		}
	}()
	// step samples q's row of logits and accepts the result.
	step := func(q *seq, row *tensor.Array) ([]Token, sampler.Result) {
		t.Helper()
		if err := q.fillMask(); err != nil {
			t.Fatal(err)
		}
		p, err := q.sample(row)
		if err != nil {
			t.Fatal(err)
		}
		q.cur = p
		res := q.read()
		toks, stop, err := q.accept(res)
		if err != nil || stop != "" {
			t.Fatalf("accept: %q, %v", stop, err)
		}
		return toks, res
	}
	rng := rand.New(rand.NewPCG(1, 2))
	forced := 0
	for n := range 12 {
		rows := len(batch)
		data := make([]float32, rows*vocab)
		for i := range data {
			data[i] = float32(rng.NormFloat64() * 3)
		}
		sc := tensor.NewScope()
		logits := tensor.FromFloat32(data, []int{rows, vocab}, tensor.Float32)
		for i := range rows {
			gotToks, got := step(batch[i], tensor.SliceAxis(logits, 0, i, i+1))
			wantToks, want := step(solo[i], tensor.FromFloat32(data[i*vocab:(i+1)*vocab], []int{1, vocab}, tensor.Float32))
			if got.Token != want.Token || math.Float32bits(got.Logprob) != math.Float32bits(want.Logprob) ||
				!reflect.DeepEqual(got.Top, want.Top) || !sameTokens(gotToks, wantToks) {
				t.Fatalf("step %d row %d: batched %+v %+v, alone %+v %+v", n, i, got, gotToks, want, wantToks)
			}
			for _, tok := range gotToks {
				if tok.Forced {
					forced++
				}
			}
		}
		sc.Close()
	}
	if forced == 0 {
		t.Error("jump-forward forced no token: the row with exact jump-forward went untested")
	}
	if batch[1].stats.ForcedTokens != 0 || batch[2].stats.ForcedTokens != forced {
		t.Errorf("forced tokens per row: %d, %d (%d seen)", batch[1].stats.ForcedTokens, batch[2].stats.ForcedTokens, forced)
	}
}

// sameTokens compares tokens with their logprobs bit for bit (NaN included).
func sameTokens(a, b []Token) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.ID != y.ID || x.Index != y.Index || x.Forced != y.Forced ||
			math.Float32bits(x.Logprob) != math.Float32bits(y.Logprob) || !reflect.DeepEqual(x.Top, y.Top) {
			return false
		}
	}
	return true
}
