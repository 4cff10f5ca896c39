package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/mlxgo/mlxgo/tensor"
)

// Gram is the Gram matrix XᵀX of the inputs one dense layer saw during
// calibration: what GPTQ uses to weigh each weight's rounding error by how
// the layer is actually driven.
type Gram struct {
	In   int       // input width
	Sum  []float64 // In×In, row-major: Σ xᵀx over every input row
	Rows int       // number of input rows summed
}

// add accumulates the rows of x [..., In].
func (g *Gram) add(x *tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	xf := tensor.AsType(tensor.Reshape(x, -1, g.In), tensor.Float32)
	p := tensor.Matmul(tensor.Transpose(xf), xf).Float32s()
	for i, v := range p {
		g.Sum[i] += float64(v)
	}
	g.Rows += xf.Dim(0)
}

// CollectGrams runs the float model m (from Load) over each calibration
// sequence in one forward pass with its logits, and returns the Gram matrix
// of the inputs of every dense layer, keyed by module path as the
// checkpoint names it ("model.layers.0.self_attn.q_proj"). A tied
// embedding appears under its own path with the inputs of the head. Layers
// fed the same array (q, k and v; gate and up) share one Gram. Each expert
// of a bank gets its own Gram of the rows routed to it, keyed
// "<bank path>[e]" (experts no row reached have none).
func CollectGrams(m Model, seqs [][]int32) (map[string]*Gram, error) {
	l, ok := m.(*Loaded)
	if !ok {
		return nil, errors.New("model: calibration needs a model returned by Load")
	}
	return collectGrams(l, seqs, nil)
}

// expertKey is the Gram key of expert e of the bank at mod.
func expertKey(mod string, e int) string { return fmt.Sprintf("%s[%d]", mod, e) }

// stopPass ends a calibration forward pass early, once every wanted
// module has seen its input.
type stopPass struct{}

// collectGrams is CollectGrams over the modules in want (nil: all). With
// a want set, each pass stops as soon as all of them have been fed.
func collectGrams(l *Loaded, seqs [][]int32, want map[string]bool) (grams map[string]*Gram, err error) {
	if len(seqs) == 0 {
		return nil, errors.New("model: calibration needs at least one sequence")
	}
	grams = map[string]*Gram{}
	seen := map[*tensor.Array]*Gram{} // inputs already counted in this pass
	fed := map[string]bool{}          // wanted modules fed in this pass
	tap := func(mod string, in int) func(*tensor.Array) {
		return func(x *tensor.Array) {
			if g, ok := seen[x]; ok {
				grams[mod] = g
			} else {
				g := grams[mod]
				if g == nil {
					g = &Gram{In: in, Sum: make([]float64, in*in)}
					grams[mod] = g
				}
				g.add(x)
				seen[x] = g
			}
			if want != nil && want[mod] {
				fed[mod] = true
				if len(fed) == len(want) {
					panic(stopPass{})
				}
			}
		}
	}
	for mod, lin := range l.w.linears {
		if want != nil && !want[mod] {
			continue
		}
		if lin.Quantized() {
			return nil, fmt.Errorf("model: calibration needs a float model (%s is quantized)", mod)
		}
		lin.tap = tap(mod, lin.Weight.Dim(1))
	}
	for mod, e := range l.w.embeds {
		if want == nil || want[mod] {
			e.tap = tap(mod, e.Weight.Dim(1))
		}
	}
	for mod, b := range l.w.banks {
		if want != nil && !want[mod] {
			continue
		}
		experts := make([]func(*tensor.Array), b.bank.Experts)
		for e := range experts {
			experts[e] = tap(expertKey(mod, e), b.bank.In)
		}
		b.bank.tap = func(e int, x *tensor.Array) {
			if e >= 0 {
				experts[e](x)
				return
			}
			if want != nil { // the bank has seen every routed row of this pass
				fed[mod] = true
				if len(fed) == len(want) {
					panic(stopPass{})
				}
			}
		}
	}
	defer func() {
		for _, lin := range l.w.linears {
			lin.tap = nil
		}
		for _, e := range l.w.embeds {
			e.tap = nil
		}
		for _, b := range l.w.banks {
			b.bank.tap = nil
		}
	}()
	be := l.w.Backend()
	for i, s := range seqs {
		if len(s) == 0 {
			return nil, fmt.Errorf("model: calibration sequence %d is empty", i)
		}
		clear(seen)
		clear(fed)
		err := tensor.Try(func() {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(stopPass); !ok {
						panic(r)
					}
				}
			}()
			sc := tensor.NewScope()
			defer sc.Close()
			ids := int32s(be, s, 1, len(s))
			h := l.arch.Forward(ids, nil, nil)
			l.arch.Logits(h)
		})
		if err != nil {
			return nil, fmt.Errorf("model: calibration sequence %d: %w", i, err)
		}
	}
	return grams, nil
}

// SampleSequences draws n sequences of length tokens from m itself at
// temperature 1, each starting with start: calibration data that needs no
// dataset and follows the distribution the model was trained on. The
// sequences are decoded together, up to sampleBatch at a time, and the
// draw is reproducible for a seed.
func SampleSequences(m Model, start []int32, n, length int, seed uint64) ([][]int32, error) {
	if len(start) == 0 || length <= len(start) || n < 1 {
		return nil, fmt.Errorf("model: sampling needs n ≥ 1, a start and a length beyond it (got n %d, %d of %d)", n, len(start), length)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d6c78676f))
	be := backendOf(m)
	out := make([][]int32, 0, n)
	for len(out) < n {
		seqs, err := sampleBatch(m, be, start, min(n-len(out), sampleBatchSize), length, rng)
		if err != nil {
			return nil, err
		}
		out = append(out, seqs...)
	}
	return out, nil
}

// backendOf is the backend m's weights live on (the default backend for a
// Model that is not a *Loaded).
func backendOf(m Model) tensor.Backend {
	if l, ok := m.(*Loaded); ok {
		return l.w.Backend()
	}
	return tensor.Default()
}

// sampleBatchSize bounds how many sequences SampleSequences decodes at once.
const sampleBatchSize = 16

// sampleBatch decodes b sequences as one batch through shared caches.
func sampleBatch(m Model, be tensor.Backend, start []int32, b, length int, rng *rand.Rand) ([][]int32, error) {
	caches := m.MakeCaches()
	defer FreeCaches(caches)
	seqs := make([][]int32, b)
	next := make([]int32, 0, b*len(start))
	for i := range seqs {
		seqs[i] = append(make([]int32, 0, length), start...)
		next = append(next, start...)
	}
	for len(seqs[0]) < length {
		var logits []float32
		err := func() error {
			sc := tensor.NewScope()
			defer sc.Close()
			t := len(next) / b
			var ids *tensor.Array
			if err := tensor.Try(func() { ids = int32s(be, next, b, t) }); err != nil {
				return err
			}
			h, err := m.Forward(ids, caches, nil)
			if err != nil {
				return err
			}
			var last *tensor.Array
			if err := tensor.Try(func() { last = tensor.SliceAxis(h, 1, t-1, t) }); err != nil {
				return err
			}
			lg, err := m.Logits(last)
			if err != nil {
				return err
			}
			return tensor.Try(func() { logits = lg.Float32s() })
		}()
		if err != nil {
			return nil, err
		}
		v := len(logits) / b
		next = next[:0]
		for i := range seqs {
			id := sampleSoftmax(logits[i*v:(i+1)*v], rng)
			seqs[i] = append(seqs[i], id)
			next = append(next, id)
		}
	}
	return seqs, nil
}

// sampleSoftmax draws an index from softmax(logits).
func sampleSoftmax(logits []float32, rng *rand.Rand) int32 {
	top := float32(math.Inf(-1))
	for _, v := range logits {
		top = max(top, v)
	}
	p := make([]float64, len(logits))
	sum := 0.0
	for i, v := range logits {
		p[i] = math.Exp(float64(v - top))
		sum += p[i]
	}
	r := rng.Float64() * sum
	for i, v := range p {
		if r < v {
			return int32(i)
		}
		r -= v
	}
	return int32(len(p) - 1)
}
