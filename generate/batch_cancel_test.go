package generate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/tensor/tensortest"
)

// TestBatchContextCancelWithinOneStep: a row whose context is cancelled
// (serve cancels a disconnected client's) ends at the very next Step —
// its Done event, StopCancelled with the context's error, comes from that
// step and carries no new token — while the other rows go on; a waiting
// row whose context is cancelled ends the same way without ever running.
func TestBatchContextCancelWithinOneStep(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	defer tensortest.NoLeaks(t)()
	pool := poolFor(t, m, 4, 64)
	defer pool.Free()
	b, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: 2, TokenBudget: 64, Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(4, 4))
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxC, cancelC := context.WithCancel(context.Background())
	defer cancelA()
	defer cancelC()
	opts := func() *generate.Options { return &generate.Options{MaxTokens: 40} }
	a, err := b.Add(ctxA, randomIDs(r, m.VocabSize(), 6), opts())
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.Add(context.Background(), randomIDs(r, m.VocabSize(), 6), opts())
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.Add(ctxC, randomIDs(r, m.VocabSize(), 6), opts()) // waits: two rows at most
	if err != nil {
		t.Fatal(err)
	}
	step := func() []generate.Event {
		t.Helper()
		evs, err := b.Step()
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	for range 5 {
		step()
	}
	before := a.Stats().GeneratedTokens
	if before == 0 || a.Done() {
		t.Fatalf("row A after 5 steps: %d tokens, done %v", before, a.Done())
	}
	cancelA()
	cancelC()
	ended := map[*generate.Row]generate.Event{}
	for _, ev := range step() {
		if ev.Done {
			ended[ev.Row] = ev
		}
		if ev.Row == a && len(ev.Tokens) > 0 {
			t.Errorf("row A got %d tokens in the step after its cancellation", len(ev.Tokens))
		}
	}
	for name, row := range map[string]*generate.Row{"running A": a, "waiting C": c} {
		ev, ok := ended[row]
		if !ok || !row.Done() || row.Stats().StopReason != generate.StopCancelled || !errors.Is(ev.Err, context.Canceled) {
			t.Errorf("%s one step after its context was cancelled: ended %v, done %v, %s, %v", name, ok, row.Done(), row.Stats().StopReason, ev.Err)
		}
	}
	if got := a.Stats().GeneratedTokens; got != before {
		t.Errorf("row A generated %d tokens, %d when cancelled", got, before)
	}
	if c.Stats().GeneratedTokens != 0 {
		t.Errorf("the waiting row generated %d tokens", c.Stats().GeneratedTokens)
	}
	for !other.Done() {
		step()
	}
	if s := other.Stats(); s.StopReason != generate.StopLength || s.GeneratedTokens != 40 {
		t.Errorf("the other row: %s after %d tokens", s.StopReason, s.GeneratedTokens)
	}
}
