package generate_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/sampler"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestBatchChurnNoLeaks runs a Batch for 10,000 steps (2,000 with
// -short, 1,000 under the race detector) while rows join, finish, hit EOS
// and are cancelled, and checks the live-array count is back where it
// started, and zero whenever the batch is idle (sampled about once per
// tenth of the run).
func TestBatchChurnNoLeaks(t *testing.T) {
	steps := 10000
	if testing.Short() {
		steps = 2000
	}
	if raceEnabled {
		steps = 1000 // the race detector makes each step ~10× slower
	}
	m := loadModel(t, filepath.Join(fixtures, "llama3", "f32"), nil)
	base := tensor.LiveArrays()
	b, err := generate.NewBatch(m, generate.BatchOptions{MaxRows: 4, TokenBudget: 24})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	var rows []*generate.Row
	var samples []int64
	finished := 0
	for step := range steps {
		if len(rows) < 6 && r.IntN(3) == 0 {
			prompt := make([]int32, 1+r.IntN(20))
			for i := range prompt {
				prompt[i] = int32(r.IntN(m.VocabSize()))
			}
			seed := r.Uint64()
			o := &generate.Options{MaxTokens: 1 + r.IntN(10), EOS: []int32{int32(r.IntN(m.VocabSize()))},
				Sampler: sampler.Params{Temperature: 1, Seed: &seed, TopLogprobs: r.IntN(3), RepetitionPenalty: 1.1}}
			row, err := b.Add(context.Background(), prompt, o)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, row)
		}
		if len(rows) > 0 && r.IntN(25) == 0 {
			rows[r.IntN(len(rows))].Cancel()
		}
		evs, err := b.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Done {
				finished++
				for i, x := range rows {
					if x == ev.Row {
						rows = append(rows[:i], rows[i+1:]...)
						break
					}
				}
			}
		}
		if b.Idle() && (len(samples) == 0 || step/(steps/10) > len(samples)-1) {
			samples = append(samples, tensor.LiveArrays()-base) // about one per tenth of the run
		}
	}
	b.Close()
	if live := tensor.LiveArrays() - base; live != 0 {
		t.Fatalf("%d arrays leaked over %d steps (%d rows finished); idle samples %v", live, steps, finished, samples)
	}
	if len(samples) < 2 {
		t.Errorf("the batch was idle only %d times: no growth check", len(samples))
	}
	for _, s := range samples {
		if s != 0 {
			t.Errorf("live arrays while idle grew: %v", samples)
			break
		}
	}
	if finished < steps/20 {
		t.Errorf("only %d rows finished in %d steps", finished, steps)
	}
	t.Logf("%d steps, %d rows finished; batch stats %+v", steps, finished, b.Stats())
}
