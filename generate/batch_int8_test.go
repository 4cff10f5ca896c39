package generate_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
	"github.com/mlxgo/mlxgo/tensor/cpu"
)

// TestBatchInt8Invariance runs a randomized schedule (random prompts,
// sampler parameters, seeds, join steps, cancels and prefill chunk sizes)
// with int8 activations on, over a random 4-bit Llama wide enough (hidden
// 1024, FFN 1536) that every projection takes the int8 kernels: each row's
// ids and logprob bits equal its solo Generate's, and the int8 run is not
// the float run (the switch took effect).
func TestBatchInt8Invariance(t *testing.T) {
	if !cpu.Int8ActivationsSupported() {
		t.Skip("no AVX512_VNNI: the int8 kernels are not built for this CPU")
	}
	if tensor.Default().Name() != "cpu" {
		t.Skip("int8 activations are a CPU backend mode")
	}
	dir, _ := writeLlama(t, llamaShape{Hidden: 1024, Layers: 2, Heads: 8, KVHeads: 2, HeadDim: 128, FFN: 1536, Vocab: 1024}, 4)
	lm, err := model.Load(dir, &model.LoadOptions{Copy: true})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	m := generate.Wrap(lm, lm.Info().Vocab)
	r := rand.New(rand.NewPCG(21, 4))
	reqs := make([]request, 24)
	for i := range reqs {
		reqs[i] = randomRequest(r, lm.Info().Vocab, nil)
		reqs[i].join = r.IntN(12)
		if r.IntN(6) == 0 {
			reqs[i].cancelAt = reqs[i].join + 1 + r.IntN(4)
		}
	}
	floatSolo := runSolo(t, m, reqs[0].prompt, reqs[0].o)
	defer cpu.SetInt8Activations(cpu.Int8Activations())
	cpu.SetInt8Activations(true)
	live := tensor.LiveArrays()
	got, _ := runBatch(t, m, reqs, generate.BatchOptions{MaxRows: 5, TokenBudget: 64})
	for i, q := range reqs {
		if q.cancelAt > 0 {
			continue
		}
		want := runSolo(t, m, q.prompt, q.o)
		if !reflect.DeepEqual(got[i].ids, want.ids) || !reflect.DeepEqual(got[i].lps, want.lps) {
			t.Fatalf("row %d: batch ids %v lps %x, solo ids %v lps %x", i, got[i].ids, got[i].lps, want.ids, want.lps)
		}
		if i == 0 && reflect.DeepEqual(want.lps, floatSolo.lps) {
			t.Fatalf("row 0: int8 logprobs equal the float run's bits; the switch had no effect")
		}
	}
	if d := tensor.LiveArrays() - live; d != 0 {
		t.Errorf("%d arrays leaked", d)
	}
}
