package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// gram is the Gram matrix XᵀX of the inputs one dense layer saw during
// calibration: what GPTQ uses to weigh each weight's rounding error by how
// the layer is actually driven.
type gram struct {
	In   int       // input width
	Sum  []float64 // In×In, row-major: Σ xᵀx over every input row
	Rows int       // number of input rows summed
}

// add accumulates the rows of x [..., In].
func (g *gram) add(x *tensor.Array) {
	sc := tensor.NewScope()
	defer sc.Close()
	xf := tensor.AsType(tensor.Reshape(x, -1, g.In), tensor.Float32)
	p := tensor.Matmul(tensor.Transpose(xf), xf).Float32s()
	for i, v := range p {
		g.Sum[i] += float64(v)
	}
	g.Rows += xf.Dim(0)
}

// expertKey is the Gram key of expert e of the bank at mod.
func expertKey(mod string, e int) string { return fmt.Sprintf("%s[%d]", mod, e) }

// stopPass ends a calibration forward pass early, once a layer deeper
// than the ones being calibrated is reached.
type stopPass struct{}

// calibrator is the model.Wrapper calibration loads the float model
// with, as mlx-lm's GPTQ wraps each layer in a catcher: it keeps every
// dense layer, expert bank and embedding table by module path (GPTQ swaps
// their weights for quantized stand-ins), and stands a probe in front of
// each dense layer and bank that records, during collect, the inputs of
// the layers asked for. The layers themselves carry nothing for it.
type calibrator struct {
	layers  int // decoder layers (for depths)
	linears map[string]*model.Linear
	heads   map[string]*model.TiedHead // tied heads, by their table's path
	embeds  map[string]*model.Embedding
	banks   map[string]*model.SwitchLinear
	source  map[string]string // module path → stored tensor of its weight

	// the pass in progress (collect)
	want  map[string]bool         // modules whose inputs are recorded
	depth int                     // their depth: a deeper probe stops the pass
	grams map[string]*gram        // by module path (experts: expertKey)
	seen  map[*tensor.Array]*gram // inputs already counted in this sequence
}

func newCalibrator() *calibrator {
	return &calibrator{
		linears: map[string]*model.Linear{}, heads: map[string]*model.TiedHead{},
		embeds: map[string]*model.Embedding{}, banks: map[string]*model.SwitchLinear{},
		source: map[string]string{},
	}
}

// Projection implements model.Wrapper.
func (c *calibrator) Projection(m model.Module, p model.Projection) model.Projection {
	switch l := p.(type) {
	case *model.Linear:
		c.linears[m.Path] = l
	case *model.TiedHead:
		c.heads[m.Path] = l
	default:
		return p
	}
	c.source[m.Path] = m.Source
	return &probe{c: c, mod: m.Path, base: p}
}

// Experts implements model.Wrapper.
func (c *calibrator) Experts(m model.Module, b model.ExpertBank) model.ExpertBank {
	s, ok := b.(*model.SwitchLinear)
	if !ok {
		return b
	}
	c.banks[m.Path] = s
	c.source[m.Path] = m.Source
	return &bankProbe{c: c, mod: m.Path, base: s}
}

// Embedding implements model.Wrapper.
func (c *calibrator) Embedding(m model.Module, e *model.Embedding) *model.Embedding {
	c.embeds[m.Path] = e
	c.source[m.Path] = m.Source
	return e
}

// depthOf orders modules for sequential GPTQ: layer i's modules at depth
// i, modules outside the layers before them (input projections) or, for
// the output head, after them; a tied head after an untied one would be.
func (c *calibrator) depthOf(mod string) int {
	if c.heads[mod] != nil {
		return c.layers + 1
	}
	return moduleDepth(mod, c.layers)
}

// record counts x as an input of the module key (a Gram of in columns) in
// the pass in progress; modules fed the same array share one Gram.
func (c *calibrator) record(key string, in int, x *tensor.Array) {
	if g, ok := c.seen[x]; ok {
		c.grams[key] = g
		return
	}
	g := c.grams[key]
	if g == nil {
		g = &gram{In: in, Sum: make([]float64, in*in)}
		c.grams[key] = g
	}
	g.add(x)
	c.seen[x] = g
}

// reached is called as module mod runs during a pass: it reports whether
// its inputs are wanted, and ends the pass (panicking with stopPass, which
// collect recovers) at the first module deeper than the wanted ones, by
// when every wanted one has seen its whole input.
func (c *calibrator) reached(mod string) bool {
	if c.want == nil {
		return false
	}
	if c.want[mod] {
		return true
	}
	if c.depthOf(mod) > c.depth {
		panic(stopPass{})
	}
	return false
}

// probe stands in front of a dense layer (or tied head).
type probe struct {
	c    *calibrator
	mod  string
	base model.Projection
}

// Forward records x when wanted and runs the layer.
func (p *probe) Forward(x *tensor.Array) *tensor.Array {
	if p.c.reached(p.mod) {
		p.c.record(p.mod, x.Dim(-1), x)
	}
	return p.base.Forward(x)
}

// bankProbe stands in front of an expert bank.
type bankProbe struct {
	c    *calibrator
	mod  string
	base *model.SwitchLinear
}

// Gather implements model.ExpertBank. Calibration runs float banks, which
// SwitchGLU applies expert by expert, so there is nothing to record here.
func (b *bankProbe) Gather(x, inds *tensor.Array) *tensor.Array {
	b.c.reached(b.mod)
	return b.base.Gather(x, inds)
}

// Expert records the rows routed to expert e when wanted and runs it.
func (b *bankProbe) Expert(e int, x *tensor.Array) *tensor.Array {
	if b.c.reached(b.mod) {
		b.c.record(expertKey(b.mod, e), b.base.In, x)
	}
	return b.base.Expert(e, x)
}

// Quantized implements model.ExpertBank.
func (b *bankProbe) Quantized() bool { return b.base.Quantized() }

// Len implements model.ExpertBank.
func (b *bankProbe) Len() int { return b.base.Len() }

// collect runs the model m (loaded with c as its Wrapper) over each
// calibration sequence in one forward pass with its logits, and returns
// the Gram matrix of the inputs of every module in want, all at depth
// depth, keyed by module path. A tied head appears under its table's
// path. Layers fed the same array (q, k and v; gate and up) share one
// Gram. Each expert of a bank gets its own Gram of the rows routed to it,
// keyed expertKey (experts no row reached have none). Each pass stops at
// the first layer deeper than depth.
func (c *calibrator) collect(m *model.Loaded, seqs [][]int32, want map[string]bool, depth int) (map[string]*gram, error) {
	if len(seqs) == 0 {
		return nil, errors.New("quant: calibration needs at least one sequence")
	}
	for mod := range want {
		if l := c.linears[mod]; l != nil && l.Quantized() {
			return nil, fmt.Errorf("quant: calibration needs a float model (%s is quantized)", mod)
		}
	}
	c.want, c.depth, c.grams, c.seen = want, depth, map[string]*gram{}, map[*tensor.Array]*gram{}
	defer func() { c.want, c.seen = nil, nil }()
	be, arch := m.Backend(), m.Arch() // the panicking API: a stopPass must reach the recover below
	for i, s := range seqs {
		if len(s) == 0 {
			return nil, fmt.Errorf("quant: calibration sequence %d is empty", i)
		}
		clear(c.seen)
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
			h := arch.Forward(int32s(be, s, 1, len(s)), nil, nil)
			arch.Logits(h)
		})
		if err != nil {
			return nil, fmt.Errorf("quant: calibration sequence %d: %w", i, err)
		}
	}
	return c.grams, nil
}

// moduleDepth orders modules for sequential GPTQ: layer i's modules at
// depth i, modules outside the layers before them (input projections)
// or, for the output head, after them.
func moduleDepth(mod string, layers int) int {
	if i := strings.Index(mod, "layers."); i >= 0 {
		rest := mod[i+len("layers."):]
		if j := strings.IndexByte(rest, '.'); j > 0 {
			if n, err := strconv.Atoi(rest[:j]); err == nil {
				return n
			}
		}
	}
	if strings.HasSuffix(mod, "lm_head") {
		return layers
	}
	return -1
}

// SampleSequences draws n sequences of length tokens from m itself at
// temperature 1, each starting with start: calibration data that needs no
// dataset and follows the distribution the model was trained on. The
// sequences are decoded together, up to sampleBatchSize at a time, and
// the draw is reproducible for a seed. It is calibration sampling only
// (no sampler settings, no stop tokens); generation is the generate
// package's.
func SampleSequences(m model.Model, start []int32, n, length int, seed uint64) ([][]int32, error) {
	if len(start) == 0 || length <= len(start) || n < 1 {
		return nil, fmt.Errorf("quant: sampling needs n ≥ 1, a start and a length beyond it (got n %d, %d of %d)", n, len(start), length)
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
// Model that does not say).
func backendOf(m model.Model) tensor.Backend {
	if l, ok := m.(interface{ Backend() tensor.Backend }); ok {
		return l.Backend()
	}
	return tensor.Default()
}

// sampleBatchSize bounds how many sequences SampleSequences decodes at once.
const sampleBatchSize = 16

// sampleBatch decodes b sequences as one batch through shared caches.
func sampleBatch(m model.Model, be tensor.Backend, start []int32, b, length int, rng *rand.Rand) ([][]int32, error) {
	caches := m.MakeCaches()
	defer model.FreeCaches(caches)
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

// int32s makes an int32 array of v on be, shaped shape.
func int32s(be tensor.Backend, v []int32, shape ...int) *tensor.Array {
	raw := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(x))
	}
	return tensor.FromBytesOn(be, raw, shape, tensor.Int32, false)
}
