package lora

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/mlxgo/mlxgo/model"
	"github.com/mlxgo/mlxgo/tensor"
)

// Host stands in for every projection and expert bank of a model as it
// loads (it is a model.Wrapper: pass it as LoadOptions.Wrap) and holds
// the adapters mounted on that model. Its stand-ins run the base layer
// and add, for the adapters the forward pass in progress selects, each
// one's residual scale·B·A·x in order; base weights are never rewritten,
// so which adapters apply changes from one pass to the next for free.
//
// A pass's selection is set by Model (Forward, Logits) for the duration
// of the pass; passes through one Host are serialised by it, as mounts
// and unmounts are with passes.
type Host struct {
	// mu is held for a whole pass and by Mount/Unmount.
	mu sync.Mutex
	// sites are the stand-ins by model-relative module path.
	sites map[string]*site
	order []string
	// mounted adapters by id, and their ids in mount order.
	mounted map[string]*Mounted
	ids     []string
	// serial numbers mounts (Mounted.Serial).
	serial uint64
	// dtype is the type mounted pairs are cast to (the activations'); a
	// pair of another float type is cast at Mount.
	dtype tensor.DType
	// cur is the resolved selection of the pass in progress (nil: none).
	cur *plan
}

// NewHost returns a Host with nothing mounted.
func NewHost() *Host {
	return &Host{sites: map[string]*site{}, mounted: map[string]*Mounted{}}
}

// Mounted is an adapter mounted on a Host: its pairs cast to the model's
// activation type, checked against the layers they adapt.
type Mounted struct {
	// ID names it in selections.
	ID string
	// Adapter is what was mounted (its arrays stay the caller's).
	Adapter *Adapter
	// Serial is unique to this mount (increasing): an id unmounted and
	// mounted again, perhaps from other files, gets a new one.
	Serial uint64
	// deltas are the pairs as applied, by module path.
	deltas map[string]*pair
	owned  []*tensor.Array
}

// pair is a mounted adapter's pair as passes apply it, in the
// activations' type: a is scale·A (the scale folded in at Mount, so a
// pass multiplies nothing but the two products) and b is B (for a dense
// layer, transposed views of a dense Aᵀ and Bᵀ).
type pair struct {
	*Delta
	a, b *tensor.Array
	// experts, for a bank's pair (a [E, in, r] and b [E, r, out], the
	// experts' Aᵀ and Bᵀ stacked), is expert e's A [r, in] and B [out,
	// r] as transposed views into them (tensor.LowRankPair).
	experts []tensor.LowRankPair
}

// Layers is the number of model layers the adapter adds a residual to.
func (m *Mounted) Layers() int { return len(m.deltas) }

// site is what Host knows of one layer it stands in for.
type site struct {
	key     string // model-relative path
	path    string // full module path (model.Module.Path)
	source  string // model.Module.Source
	in, out int    // -1 when the layer's shape is not known
	experts int    // 0 for a dense layer
	proj    model.Projection
	bank    model.ExpertBank
	// lin and sw are the loaded layers when they are the package's types.
	lin  *model.Linear
	head *model.TiedHead
	sw   *model.SwitchLinear
}

// Projection implements model.Wrapper: every dense layer gets a stand-in.
func (h *Host) Projection(m model.Module, p model.Projection) model.Projection {
	s := &site{key: Relative(m.Path), path: m.Path, source: m.Source, in: -1, out: -1, proj: p}
	switch l := p.(type) {
	case *model.Linear:
		s.lin = l
		s.out, s.in = l.Weight.Dim(0), l.Weight.Dim(1)
		if l.Quantized() {
			s.in = l.Weight.Dim(1) * 32 / l.Bits
		}
	case *model.TiedHead:
		s.head = l
		e := l.Embedding
		s.out, s.in = e.Weight.Dim(0), e.Weight.Dim(1)
		if e.Scales != nil {
			s.in = e.Weight.Dim(1) * 32 / e.Bits
		}
	}
	h.add(s)
	return &dense{h: h, s: s}
}

// Experts implements model.Wrapper: every expert bank gets a stand-in.
func (h *Host) Experts(m model.Module, b model.ExpertBank) model.ExpertBank {
	s := &site{key: Relative(m.Path), path: m.Path, source: m.Source, in: -1, out: -1, experts: b.Len(), bank: b}
	if sw, ok := b.(*model.SwitchLinear); ok {
		s.sw = sw
		s.in, s.out = sw.In, sw.Out
	}
	h.add(s)
	return &bank{h: h, s: s}
}

// Embedding implements model.Wrapper (tables are not adapted).
func (h *Host) Embedding(m model.Module, e *model.Embedding) *model.Embedding {
	if !h.dtype.Valid() {
		h.dtype = e.DType
	}
	return e
}

func (h *Host) add(s *site) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := h.sites[s.key]; !dup {
		h.order = append(h.order, s.key)
	}
	h.sites[s.key] = s
}

// SetDType sets the type mounted pairs are cast to (by default the
// embedding table's, which is the activations' type).
func (h *Host) SetDType(dt tensor.DType) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dtype = dt
}

// Modules lists the model-relative paths of the layers the Host stands in
// for, in load order.
func (h *Host) Modules() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.order)
}

// Mount checks a against the model's layers and mounts it as id: every
// module it names must be a layer the Host stands in for, with the same
// input and output widths (and number of experts), or nothing is mounted
// and the error names the module and the shapes. The adapter's arrays
// stay the caller's (free them after Unmount); pairs of another float
// type than the model's activations are cast to it, in arrays the Host
// owns.
func (h *Host) Mount(id string, a *Adapter) (*Mounted, error) {
	if id == "" || id == "none" || containsPlus(id) {
		return nil, fmt.Errorf("lora: %w: adapter id %q (want a non-empty name other than \"none\", without '+')", ErrAdapter, id)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, dup := h.mounted[id]; dup {
		return nil, fmt.Errorf("lora: %w: an adapter is already mounted as %q", ErrAdapter, id)
	}
	for _, k := range slices.Sorted(maps.Keys(a.Deltas)) {
		if err := h.fits(a, k, a.Deltas[k]); err != nil {
			return nil, err
		}
	}
	m := &Mounted{ID: id, Adapter: a, deltas: map[string]*pair{}}
	err := tensor.Try(func() { h.prepare(m) })
	if err != nil {
		tensor.Free(m.owned...)
		return nil, err
	}
	h.serial++
	m.Serial = h.serial
	h.mounted[id] = m
	h.ids = append(h.ids, id)
	return m, nil
}

func containsPlus(s string) bool {
	for _, c := range s {
		if c == '+' {
			return true
		}
	}
	return false
}

// prepare makes m's pairs as passes apply them (h.mu held): a = scale·A
// and b = B in the activations' type (computed in float32 and rounded
// once).
func (h *Host) prepare(m *Mounted) {
	sc := tensor.NewScope()
	defer sc.Close()
	dt := h.dtype
	keep := func(x *tensor.Array) *tensor.Array {
		tensor.Detach(x)
		m.owned = append(m.owned, x)
		return x
	}
	for _, k := range slices.Sorted(maps.Keys(m.Adapter.Deltas)) {
		d := m.Adapter.Deltas[k]
		t := dt
		if !t.Valid() {
			t = d.A.DType()
		}
		p := &pair{Delta: d, a: d.A, b: d.B}
		if d.Scale != 1 || d.A.DType() != t {
			p.a = keep(tensor.AsType(tensor.MulScalar(tensor.AsType(d.A, tensor.Float32), d.Scale), t))
		}
		if d.B.DType() != t {
			p.b = keep(tensor.AsType(d.B, t))
		}
		if d.Experts == 0 {
			// a dense layer's A and B are kept as Aᵀ [in, r] and Bᵀ [r,
			// out] and passed as their transposed views, which
			// tensor.LowRank reads on the CPU with no transpose (each
			// input's or output's rank values side by side)
			p.a = keep(tensor.Transpose(keep(tensor.Contiguous(tensor.Transpose(p.a)))))
			p.b = keep(tensor.Transpose(keep(tensor.Contiguous(tensor.Transpose(p.b)))))
		} else {
			// a bank's are kept as the experts' Aᵀ [E, in, r] and Bᵀ [E,
			// r, out], with each expert's pair a view of its slices
			p.a = keep(tensor.Contiguous(tensor.SwapAxes(p.a, -1, -2)))
			p.b = keep(tensor.Contiguous(tensor.SwapAxes(p.b, -1, -2)))
			view := func(st *tensor.Array, e int) *tensor.Array {
				return keep(tensor.Transpose(tensor.Squeeze(tensor.SliceAxis(st, 0, e, e+1), 0)))
			}
			p.experts = make([]tensor.LowRankPair, d.Experts)
			for e := range d.Experts {
				p.experts[e] = tensor.LowRankPair{A: view(p.a, e), B: view(p.b, e)}
			}
		}
		m.deltas[k] = p
	}
}

// fits checks one pair against the layer it adapts.
func (h *Host) fits(a *Adapter, key string, d *Delta) error {
	s := h.sites[key]
	if s == nil {
		return fmt.Errorf("lora: %w: %s: module %q (%q in the model) is not a projection or expert bank of the model", ErrAdapter, a.Dir, d.Name, key)
	}
	shape := func() string {
		if d.Experts > 0 {
			return fmt.Sprintf("A [%d, %d, %d] (experts, r, in) and B [%d, %d, %d] (experts, out, r)", d.Experts, d.Rank, d.In, d.Experts, d.Out, d.Rank)
		}
		return fmt.Sprintf("A [%d, %d] (r, in) and B [%d, %d] (out, r)", d.Rank, d.In, d.Out, d.Rank)
	}
	switch {
	case s.in < 0:
		return fmt.Errorf("lora: %w: %s: module %q: the model's layer %s is a %T, whose shape is unknown", model.ErrUnsupported, a.Dir, d.Name, s.path, s.proj)
	case (d.Experts > 0) != (s.experts > 0):
		what := "a dense layer"
		if s.experts > 0 {
			what = fmt.Sprintf("a bank of %d experts", s.experts)
		}
		return fmt.Errorf("lora: %w: %s: module %q: %s does not fit %s, which is %s", ErrAdapter, a.Dir, d.Name, shape(), s.path, what)
	case d.In != s.in || d.Out != s.out || d.Experts != s.experts:
		layer := fmt.Sprintf("[in %d → out %d]", s.in, s.out)
		if s.experts > 0 {
			layer = fmt.Sprintf("%d experts [in %d → out %d]", s.experts, s.in, s.out)
		}
		return fmt.Errorf("lora: %w: %s: module %q: %s does not fit %s, which is %s", ErrAdapter, a.Dir, d.Name, shape(), s.path, layer)
	}
	return nil
}

// Unmount removes the adapter mounted as id (false if none is) and frees
// what Mount made for it; the Adapter itself stays the caller's.
func (h *Host) Unmount(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.mounted[id]
	if !ok {
		return false
	}
	delete(h.mounted, id)
	h.ids = slices.DeleteFunc(h.ids, func(s string) bool { return s == id })
	tensor.Free(m.owned...)
	return true
}

// Mounted returns the adapter mounted as id.
func (h *Host) Mounted(id string) (*Mounted, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.mounted[id]
	return m, ok
}

// IDs lists the mounted adapters' ids in mount order.
func (h *Host) IDs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ids)
}

// ParseSet reads an adapter spec as requests give it: "" and "none" are
// the base model, "id" one adapter, "a+b" several whose residuals are
// added in that order.
func ParseSet(spec string) []string {
	if spec == "" || spec == "none" {
		return nil
	}
	return strings.Split(spec, "+")
}

// Check reports an error naming the first id of set that is not mounted
// (an unknown adapter is an error, never a silent fallback to the base).
func (h *Host) Check(set []string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range set {
		if _, ok := h.mounted[id]; !ok {
			return fmt.Errorf("lora: %w: no adapter is mounted as %q (mounted: %v)", ErrAdapter, id, h.ids)
		}
	}
	return nil
}

// Key names what set computes, for caches of its results (a prompt
// cache's namespace): one part per adapter, in order, joined with "+";
// "" for the base model. An adapter read by Load is named by its Digest
// ("sha256:…": the same files give the same key, in any mount, under any
// id, in any process); one made otherwise by its id and its mount's
// Serial ("id#N", which no other mount shares). Unknown ids are an error.
func (h *Host) Key(set []string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	parts := make([]string, len(set))
	for i, id := range set {
		m, ok := h.mounted[id]
		if !ok {
			return "", fmt.Errorf("lora: %w: no adapter is mounted as %q (mounted: %v)", ErrAdapter, id, h.ids)
		}
		if d := m.Adapter.Digest; d != "" {
			parts[i] = digestPrefix + d
		} else {
			parts[i] = id + "#" + strconv.FormatUint(m.Serial, 10)
		}
	}
	return strings.Join(parts, "+"), nil
}

const digestPrefix = "sha256:"

// Persistent reports whether a Key names every adapter by its files'
// digest, so that it means the same thing after a restart (a cache on
// disk may be keyed by it); the base model's "" is persistent too.
func Persistent(key string) bool {
	if key == "" {
		return true
	}
	for _, p := range strings.Split(key, "+") {
		if !strings.HasPrefix(p, digestPrefix) {
			return false
		}
	}
	return true
}

// Selection says which mounted adapters a forward pass applies.
type Selection struct {
	// Set is applied to every row: adapter ids whose residuals are added
	// in this order. Empty: the base model.
	Set []string
	// Spans, when set, applies a set per run of rows instead of Set: the
	// rows of a pass are its inputs' leading dimensions flattened (B·T
	// token positions for Forward, the rows of the hidden states for
	// Logits), taken by the spans in order; their Rows must add up to
	// the pass's rows. Every layer runs the base matmul over all rows at
	// once and adds each span's low-rank terms to that span's rows alone,
	// so each row computes exactly what it would in a pass of its own.
	Spans []Span
}

// Span is a run of consecutive rows and the adapter set applied to them.
type Span struct {
	Rows int
	Set  []string
}

// plan is a resolved selection.
type plan struct {
	// sets are the resolved sets of the spans (one, covering every row,
	// for a Selection without spans: rows -1).
	sets []resolved
}

type resolved struct {
	rows int
	set  []*Mounted
}

// resolve turns a selection's ids into mounted adapters (h.mu held).
func (h *Host) resolve(sel Selection) (*plan, error) {
	one := func(ids []string) ([]*Mounted, error) {
		var out []*Mounted
		for _, id := range ids {
			m, ok := h.mounted[id]
			if !ok {
				return nil, fmt.Errorf("lora: %w: no adapter is mounted as %q (mounted: %v)", ErrAdapter, id, h.ids)
			}
			out = append(out, m)
		}
		return out, nil
	}
	p := &plan{}
	if sel.Spans == nil {
		s, err := one(sel.Set)
		if err != nil {
			return nil, err
		}
		if len(s) == 0 {
			return nil, nil
		}
		p.sets = []resolved{{rows: -1, set: s}}
		return p, nil
	}
	any := false
	for i, sp := range sel.Spans {
		if sp.Rows < 0 {
			return nil, fmt.Errorf("lora: %w: span %d has %d rows", ErrAdapter, i, sp.Rows)
		}
		s, err := one(sp.Set)
		if err != nil {
			return nil, err
		}
		any = any || len(s) > 0
		p.sets = append(p.sets, resolved{rows: sp.Rows, set: s})
	}
	if !any {
		return nil, nil
	}
	return p, nil
}

// run runs f as one pass with sel applied.
func (h *Host) run(sel Selection, f func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p, err := h.resolve(sel)
	if err != nil {
		return err
	}
	h.cur = p
	defer func() { h.cur = nil }()
	return f()
}

// deltas returns the pairs of set that adapt the site, in order.
func (s *site) deltas(set []*Mounted) []*pair {
	var out []*pair
	for _, m := range set {
		if d := m.deltas[s.key]; d != nil {
			out = append(out, d)
		}
	}
	return out
}

// bySpan applies add to the runs of rows of x and y (leading dims
// flattened) that the pass's spans select pairs for, leaving the other
// rows of y as they are, and returns y in its shape. lead is the number
// of leading dims that count as rows; add is told the span's index and
// its first row.
func bySpan(p *plan, s *site, x, y *tensor.Array, lead int, add func(span, lo int, x, y *tensor.Array, ds []*pair) *tensor.Array) *tensor.Array {
	if len(p.sets) == 1 && p.sets[0].rows < 0 {
		ds := s.deltas(p.sets[0].set)
		if len(ds) == 0 {
			return y
		}
		return add(0, 0, x, y, ds)
	}
	per := make([][]*pair, len(p.sets))
	anyHere := false
	for i, r := range p.sets {
		per[i] = s.deltas(r.set)
		anyHere = anyHere || len(per[i]) > 0
	}
	if !anyHere {
		return y
	}
	xs, ys := x.Shape(), y.Shape()
	n := 1
	for _, d := range ys[:lead] {
		n *= d
	}
	if err := p.cover(s, n); err != nil {
		panic(err)
	}
	x2 := tensor.Reshape(x, append([]int{n}, xs[lead:]...)...)
	y2 := tensor.Reshape(y, append([]int{n}, ys[lead:]...)...)
	var parts []*tensor.Array
	at := 0
	for i, r := range p.sets {
		if r.rows == 0 {
			continue
		}
		yp := tensor.SliceAxis(y2, 0, at, at+r.rows)
		if len(per[i]) > 0 {
			yp = add(i, at, tensor.SliceAxis(x2, 0, at, at+r.rows), yp, per[i])
		}
		parts = append(parts, yp)
		at += r.rows
	}
	return tensor.Reshape(tensor.Concatenate(parts, 0), ys...)
}

// dense stands in for a dense layer.
type dense struct {
	h *Host
	s *site
}

// Forward implements model.Projection: the base layer, plus the selected
// adapters' residuals.
func (l *dense) Forward(x *tensor.Array) *tensor.Array {
	p := l.h.cur
	if p == nil {
		return l.s.proj.Forward(x)
	}
	sc := tensor.NewScope()
	defer sc.Close()
	y := l.s.proj.Forward(x)
	return sc.Keep(p.lowRank(l.s, x, y))
}

// lowRank adds to y (the base layer's output for x [..., in]) each
// selected pair's residual x·(scale·A)ᵀ·Bᵀ, in order, with
// tensor.LowRank: one pass per pair with float32 in between. With spans,
// every row takes its own span's pairs: stage k adds the k-th pair of
// each row's set in one tensor.LowRankGather call over all rows (rows
// whose set has fewer pairs add nothing), so the low-rank products of a
// mixed batch are shared per adapter rather than run span by span, and
// each row gets exactly the bits its solo pass gets.
func (p *plan) lowRank(s *site, x, y *tensor.Array) *tensor.Array {
	if len(p.sets) == 1 && p.sets[0].rows < 0 {
		for _, d := range s.deltas(p.sets[0].set) {
			y = tensor.LowRank(y, x, d.a, d.b)
		}
		return y
	}
	per := make([][]*pair, len(p.sets))
	stages := 0
	for i, r := range p.sets {
		per[i] = s.deltas(r.set)
		stages = max(stages, len(per[i]))
	}
	if stages == 0 {
		return y
	}
	n := 1
	for _, d := range y.Shape()[:y.NDim()-1] {
		n *= d
	}
	if err := p.cover(s, n); err != nil {
		panic(err)
	}
	ids := make([]int, n)
	for k := range stages {
		var pairs []tensor.LowRankPair
		index := map[*pair]int{}
		at := 0
		for i, r := range p.sets {
			id := -1
			if k < len(per[i]) {
				d := per[i][k]
				j, ok := index[d]
				if !ok {
					j = len(pairs)
					index[d] = j
					pairs = append(pairs, tensor.LowRankPair{A: d.a, B: d.b})
				}
				id = j
			}
			for row := at; row < at+r.rows; row++ {
				ids[row] = id
			}
			at += r.rows
		}
		y = tensor.LowRankGather(y, x, pairs, ids)
	}
	return y
}

// cover checks that the spans cover the n rows of a pass at s.
func (p *plan) cover(s *site, n int) error {
	total := 0
	for _, r := range p.sets {
		total += r.rows
	}
	if total != n {
		return &tensor.Error{Op: "lora", Err: fmt.Errorf("%w: the selection's spans cover %d rows, the pass at %s has %d", tensor.ErrShape, total, s.path, n)}
	}
	return nil
}

// Base is the layer the stand-in runs.
func (l *dense) Base() model.Projection { return l.s.proj }

// bank stands in for an expert bank.
type bank struct {
	h *Host
	s *site
}

// Gather implements model.ExpertBank: x [..., 1, 1, in] (or [..., k, 1,
// in]) through the experts inds [..., k] picks, plus the selected
// adapters' per-expert residuals.
func (b *bank) Gather(x, inds *tensor.Array) *tensor.Array {
	p := b.h.cur
	if p == nil {
		return b.s.bank.Gather(x, inds)
	}
	sc := tensor.NewScope()
	defer sc.Close()
	y := b.s.bank.Gather(x, inds)
	if _, fused := y.Backend().(tensor.LowRanker); fused {
		return sc.Keep(p.expertLowRank(b.s, x, y, inds))
	}
	// rows: x, y and inds share their leading dims
	lead := inds.NDim() - 1
	if len(p.sets) == 1 && p.sets[0].rows < 0 {
		ds := b.s.deltas(p.sets[0].set)
		if len(ds) == 0 {
			return sc.Keep(y)
		}
		return sc.Keep(gathered(x, y, inds, ds))
	}
	// spans: slice inds with the rows
	n := 1
	for _, d := range inds.Shape()[:lead] {
		n *= d
	}
	flat := tensor.Reshape(inds, append([]int{n}, inds.Shape()[lead:]...)...)
	out := bySpan(p, b.s, x, y, lead, func(_, lo int, xs, ys *tensor.Array, ds []*pair) *tensor.Array {
		return gathered(xs, ys, tensor.SliceAxis(flat, 0, lo, lo+xs.Dim(0)), ds)
	})
	return sc.Keep(out)
}

// expertLowRank adds the selected pairs' residuals for the experts inds
// picks (x [..., m, 1, in] with m 1 or k, y [..., k, 1, out], inds
// [..., k]) with tensor.LowRankGather: every (token, slot) is a row
// whose pair is its expert's in its token's set, stage by stage as
// plan.lowRank adds a dense layer's (a token's spans are its leading
// dims flattened), so each row gets the bits it gets in a pass alone.
func (p *plan) expertLowRank(s *site, x, y, inds *tensor.Array) *tensor.Array {
	lead := inds.NDim() - 1
	k := inds.Dim(-1)
	n := 1
	for _, d := range inds.Shape()[:lead] {
		n *= d
	}
	per := make([][]*pair, n) // each token's pairs, in order
	stages := 0
	if len(p.sets) == 1 && p.sets[0].rows < 0 {
		ds := s.deltas(p.sets[0].set)
		for t := range per {
			per[t] = ds
		}
		stages = len(ds)
	} else {
		if err := p.cover(s, n); err != nil {
			panic(err)
		}
		at := 0
		for _, r := range p.sets {
			ds := s.deltas(r.set)
			for t := at; t < at+r.rows; t++ {
				per[t] = ds
			}
			stages = max(stages, len(ds))
			at += r.rows
		}
	}
	if stages == 0 {
		return y
	}
	experts := tensor.AsType(inds, tensor.Int32).Int32s()
	in, out := x.Dim(-1), y.Dim(-1)
	x2 := tensor.Reshape(x, n, x.Size()/(n*in), in)
	if x2.Dim(1) != k {
		x2 = tensor.Contiguous(tensor.BroadcastTo(x2, n, k, in))
	}
	x2 = tensor.Reshape(x2, n*k, in)
	y2 := tensor.Reshape(y, n*k, out)
	ids := make([]int, n*k)
	type use struct {
		d *pair
		e int32
	}
	for st := range stages {
		var pairs []tensor.LowRankPair
		index := map[use]int{}
		for t := range n {
			for j := range k {
				id := -1
				if st < len(per[t]) {
					u := use{per[t][st], experts[t*k+j]}
					var ok bool
					if id, ok = index[u]; !ok {
						id = len(pairs)
						index[u] = id
						pairs = append(pairs, u.d.experts[u.e])
					}
				}
				ids[t*k+j] = id
			}
		}
		y2 = tensor.LowRankGather(y2, x2, pairs, ids)
	}
	return tensor.Reshape(y2, y.Shape()...)
}

// gathered adds each pair's residual for the experts inds picks:
// x [..., m, 1, in] (m 1 or k), y [..., k, 1, out], inds [..., k]
// (backends without a fused low-rank op).
func gathered(x, y, inds *tensor.Array, ds []*pair) *tensor.Array {
	for _, d := range ds {
		at := tensor.Take(d.a, inds, 0)                            // [..., k, in, r]
		bt := tensor.Take(d.b, inds, 0)                            // [..., k, r, out]
		y = tensor.Add(y, tensor.Matmul(tensor.Matmul(x, at), bt)) // [..., k, 1, out]
	}
	return y
}

// Expert implements model.ExpertBank: expert e over its rows x [n, in],
// plus the selected adapters' expert-e residuals. Rows reach it grouped
// by expert, out of their pass order, so only a selection that applies
// the same pairs to every row can be honoured here (ExpertRows, which
// SwitchGLU calls, is told each row's token).
func (b *bank) Expert(e int, x *tensor.Array) *tensor.Array {
	p := b.h.cur
	if p == nil {
		return b.s.bank.Expert(e, x)
	}
	var ds []*pair
	for i, r := range p.sets {
		d := b.s.deltas(r.set)
		if i > 0 && !sameDeltas(d, ds) {
			panic(&tensor.Error{Op: "lora", Err: fmt.Errorf("%w: rows with different adapter sets through the floating-point expert bank %s (it runs rows grouped by expert; quantized banks gather per row)", model.ErrUnsupported, b.s.path)})
		}
		ds = d
	}
	if len(ds) == 0 {
		return b.s.bank.Expert(e, x)
	}
	sc := tensor.NewScope()
	defer sc.Close()
	y := b.s.bank.Expert(e, x)
	for _, d := range ds {
		y = tensor.LowRank(y, x, d.experts[e].A, d.experts[e].B)
	}
	return sc.Keep(y)
}

// ExpertRows implements model.RowExpertBank: Expert for rows that are
// the pass's tokens tokens[i], each adding the residuals of its own
// token's set (the spans count tokens: the leading dims of the pass
// flattened), one tensor.LowRankGather per stage of the sets, so rows
// with different adapter sets share a floating-point bank's grouped pass
// and each gets the bits of its pass alone.
func (b *bank) ExpertRows(e int, x *tensor.Array, tokens []int32) *tensor.Array {
	p := b.h.cur
	if p == nil || len(p.sets) == 1 && p.sets[0].rows < 0 {
		return b.Expert(e, x)
	}
	per := make([][]*pair, len(p.sets))
	ends := make([]int, len(p.sets)) // each span's first token past it
	stages, at := 0, 0
	for i, r := range p.sets {
		per[i] = b.s.deltas(r.set)
		stages = max(stages, len(per[i]))
		at += r.rows
		ends[i] = at
	}
	if stages == 0 {
		return b.s.bank.Expert(e, x)
	}
	if len(tokens) != x.Dim(0) {
		panic(&tensor.Error{Op: "lora", Err: fmt.Errorf("%w: %d token indices for %d rows of expert %d at %s", tensor.ErrShape, len(tokens), x.Dim(0), e, b.s.path)})
	}
	span := make([]int, len(tokens))
	for i, t := range tokens {
		j, _ := slices.BinarySearch(ends, int(t)+1)
		if t < 0 || j >= len(ends) {
			panic(&tensor.Error{Op: "lora", Err: fmt.Errorf("%w: token %d of a pass whose spans cover %d tokens, at %s", tensor.ErrShape, t, at, b.s.path)})
		}
		span[i] = j
	}
	sc := tensor.NewScope()
	defer sc.Close()
	y := b.s.bank.Expert(e, x)
	ids := make([]int, len(tokens))
	for st := range stages {
		var pairs []tensor.LowRankPair
		index := map[*pair]int{}
		for i, j := range span {
			id := -1
			if st < len(per[j]) {
				d := per[j][st]
				var ok bool
				if id, ok = index[d]; !ok {
					id = len(pairs)
					index[d] = id
					pairs = append(pairs, d.experts[e])
				}
			}
			ids[i] = id
		}
		y = tensor.LowRankGather(y, x, pairs, ids)
	}
	return sc.Keep(y)
}

func sameDeltas(a, b []*pair) bool { return slices.Equal(a, b) }

// Quantized implements model.ExpertBank.
func (b *bank) Quantized() bool { return b.s.bank.Quantized() }

// Len implements model.ExpertBank.
func (b *bank) Len() int { return b.s.bank.Len() }
