package model

import (
	"container/list"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/mlxgo/mlxgo/tensor"
)

// ExpertStreaming keeps a MoE checkpoint's routed experts on disk
// (LoadOptions.Experts): the dense spine loads as usual, and each expert
// matrix is read from its safetensors file when a forward pass routes a
// token to it, into a resident cache bounded by CacheBytes and evicted
// least recently used first. Results are those of the resident model:
// each expert is computed with the same kernel on the same bytes.
//
// The bound holds between MoE blocks: while a block runs, the experts its
// batch routes to (their union, each read once) stay resident even when
// they alone exceed CacheBytes, and the cache is trimmed when the block
// is done.
type ExpertStreaming struct {
	// CacheBytes bounds the expert bytes kept resident between blocks
	// (0 or less: none are kept, every pass reads its experts again).
	// Freed read buffers are kept for reuse up to an eighth of it more.
	CacheBytes int64
	// Workers is the number of reads in flight at once (0: 4).
	Workers int
	// Prefetch, at each MoE layer, routes the layer's input through the
	// next MoE layer's router and queues reads of the experts it picks, so
	// that they load while this layer and the next attention compute. It
	// is a guess (the next layer routes its own input); results are
	// unchanged, only what is read and when.
	Prefetch bool
	// PerBank splits CacheBytes evenly between the expert banks (one
	// matrix kind of one MoE layer), each evicting its own least recently
	// used experts, so that one layer's pass never evicts another's. The
	// default is one least-recently-used order over every bank.
	PerBank bool
}

// ExpertStats counts what expert streaming did (Loaded.ExpertStats). An
// expert here is one matrix of one bank (gate, up or down) of one layer.
type ExpertStats struct {
	// Hits and Misses count expert requests: a hit found the expert
	// resident (or already being read), a miss read it from disk.
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
	// BytesRead is the checkpoint bytes read for misses.
	BytesRead int64 `json:"bytes_read"`
	// Evictions counts experts dropped from the cache.
	Evictions int64 `json:"evictions"`
	// ResidentBytes is the expert bytes held now; PeakResidentBytes the
	// most held at once (a block's routed union can exceed the budget).
	ResidentBytes     int64 `json:"resident_bytes"`
	PeakResidentBytes int64 `json:"peak_resident_bytes"`
	// BudgetBytes is ExpertStreaming.CacheBytes.
	BudgetBytes int64 `json:"budget_bytes"`
	// TotalBytes is the checkpoint bytes of every streamed expert, and
	// Experts their number (matrices, over all banks and layers).
	TotalBytes int64 `json:"total_bytes"`
	Experts    int   `json:"experts"`
	// Blocks counts MoE block passes that loaded their experts together.
	Blocks int64 `json:"blocks"`
	// Prefetched counts experts read ahead (ExpertStreaming.Prefetch),
	// PrefetchUsed those a later pass asked for before they were evicted.
	Prefetched   int64 `json:"prefetched"`
	PrefetchUsed int64 `json:"prefetch_used"`
}

// ExpertStats reports the expert streaming counters; ok is false when the
// model was loaded without LoadOptions.Experts.
func (m *Loaded) ExpertStats() (s ExpertStats, ok bool) {
	if m.w.stream == nil {
		return ExpertStats{}, false
	}
	return m.w.stream.snapshot(), true
}

// ResetExpertStats zeroes the hit, miss, read, eviction and block
// counters (resident bytes and the budget stay) so that a caller can
// measure one phase, decode after prefill say.
func (m *Loaded) ResetExpertStats() {
	if s := m.w.stream; s != nil {
		s.mu.Lock()
		s.stats.Hits, s.stats.Misses, s.stats.BytesRead, s.stats.Evictions, s.stats.Blocks = 0, 0, 0, 0, 0
		s.stats.PeakResidentBytes = s.stats.ResidentBytes
		s.mu.Unlock()
	}
}

// expertPart is one stored array of an expert: a byte range of a file.
type expertPart struct {
	file  *os.File
	off   int64 // absolute file offset
	n     int64
	shape []int
	dt    tensor.DType
}

// streamBank is an ExpertBank whose experts live on disk until routed to.
type streamBank struct {
	store   *expertStore
	id      int
	n       int            // experts
	parts   [][]expertPart // per expert: weight, then scales and biases when quantized
	quant   bool
	spec    tensor.QuantSpec
	in, out int
	// active holds the slots a SwitchGLU pass pinned for this bank (Load).
	active map[int]*expertSlot
	// lru and resident are the bank's own order and bytes (PerBank).
	lru      *list.List
	resident int64
}

type slotKey struct{ bank, expert int }

// expertSlot is one expert of one bank in the cache.
type expertSlot struct {
	key   slotKey
	bank  *streamBank
	done  chan struct{} // closed once bufs (or err) are set
	bufs  [][]byte
	free  func() // gives bufs' memory back (nil once done)
	err   error
	lin   *Linear // made on the compute goroutine from bufs
	pins  int
	elem  *list.Element // in the store's order
	belem *list.Element // in the bank's order
	bytes int64
	// ahead marks a slot read by prefetch and not yet asked for.
	ahead bool
}

// prefetchHint is what a MoE layer knows of the next one.
type prefetchHint struct {
	experts *SwitchGLU
	router  Projection
	topK    int
}

// link records, while layers load in order, each SwitchGLU's successor
// (the hint Prefetch follows).
func (s *expertStore) link(g *SwitchGLU, router Projection, topK int) {
	if s.prefetch && s.last != nil {
		s.last.next = &prefetchHint{experts: g, router: router, topK: topK}
	}
	s.last = g
}

// expertStore is a model's expert cache and its readers.
type expertStore struct {
	mu       sync.Mutex
	budget   int64
	perBank  bool
	prefetch bool
	last     *SwitchGLU // the last MoE layer loaded (link)
	be       tensor.Backend
	cast     tensor.DType
	files    map[string]*os.File
	slots    map[slotKey]*expertSlot
	lru      *list.List // front: most recently used
	banks    []*streamBank
	stats    ExpertStats
	jobs     chan *expertSlot
	failed   int // slots whose read failed, still in slots
	// pool holds freed read regions by size (recycle), pooled bytes in
	// all; nil once closed.
	poolMu sync.Mutex
	pool   map[int][]region
	pooled int64
	wg     sync.WaitGroup
	closed bool
}

func newExpertStore(opts *ExpertStreaming, be tensor.Backend, cast tensor.DType) *expertStore {
	workers := opts.Workers
	if workers <= 0 {
		workers = 4
	}
	s := &expertStore{
		budget: max(opts.CacheBytes, 0), perBank: opts.PerBank, prefetch: opts.Prefetch, be: be, cast: cast,
		files: map[string]*os.File{}, slots: map[slotKey]*expertSlot{}, lru: list.New(),
		jobs: make(chan *expertSlot, 1024), pool: map[int][]region{},
	}
	s.stats.BudgetBytes = s.budget
	for range workers {
		s.wg.Add(1)
		go s.reader()
	}
	return s
}

// reader serves reads until the store closes.
func (s *expertStore) reader() {
	defer s.wg.Done()
	for sl := range s.jobs {
		var read int64
		parts := sl.bank.parts[sl.key.expert]
		bufs := make([][]byte, len(parts))
		var err error
		total := 0
		for _, p := range parts {
			total += (int(p.n) + 63) &^ 63 // each part 64-byte aligned
		}
		mem, free := s.memory(total)
		at := 0
		for i, p := range parts {
			b := mem[at : at+int(p.n) : at+int(p.n)]
			at += (int(p.n) + 63) &^ 63
			if _, e := p.file.ReadAt(b, p.off); e != nil {
				err = fmt.Errorf("%w: read expert %d: %s: %v", ErrCheckpoint, sl.key.expert, p.file.Name(), e)
				break
			}
			bufs[i] = b
			read += p.n
		}
		s.mu.Lock()
		s.stats.BytesRead += read
		if err != nil {
			s.failed++
		}
		sl.bufs, sl.err, sl.free = bufs, err, func() { s.recycle(mem, free) }
		if err != nil {
			sl.dropBufs()
		}
		s.mu.Unlock()
		close(sl.done)
	}
}

// region is read-buffer memory and the function that frees it.
type region struct {
	mem  []byte
	free func()
}

// memory returns n bytes for a read: a recycled region of that size, or
// fresh memory (expertMemory).
func (s *expertStore) memory(n int) ([]byte, func()) {
	s.poolMu.Lock()
	if rs := s.pool[n]; len(rs) > 0 {
		r := rs[len(rs)-1]
		s.pool[n] = rs[:len(rs)-1]
		s.pooled -= int64(n)
		s.poolMu.Unlock()
		return r.mem, r.free
	}
	s.poolMu.Unlock()
	return expertMemory(n)
}

// recycle keeps a freed region for the next read of its size while the
// pool holds less than an eighth of the budget (so that a miss reuses
// mapped pages instead of faulting fresh ones), and frees it otherwise
// (or once the store is closed).
func (s *expertStore) recycle(mem []byte, free func()) {
	s.poolMu.Lock()
	if s.pool != nil && s.pooled+int64(len(mem)) <= s.budget/8 {
		s.pool[len(mem)] = append(s.pool[len(mem)], region{mem, free})
		s.pooled += int64(len(mem))
		s.poolMu.Unlock()
		return
	}
	s.poolMu.Unlock()
	free()
}

// file returns the store's read handle on path.
func (s *expertStore) file(path string) (*os.File, error) {
	if f, ok := s.files[path]; ok {
		return f, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	s.files[path] = f
	return f, nil
}

func (s *expertStore) snapshot() ExpertStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// request pins expert e of b, queueing its read on a miss. The caller
// holds no lock.
func (s *expertStore) request(b *streamBank, e int) *expertSlot {
	s.mu.Lock()
	k := slotKey{b.id, e}
	sl, ok := s.slots[k]
	if ok {
		s.stats.Hits++
		if sl.ahead {
			sl.ahead = false
			s.stats.PrefetchUsed++
		}
		s.lru.MoveToFront(sl.elem)
		b.lru.MoveToFront(sl.belem)
		sl.pins++
		s.mu.Unlock()
		return sl
	}
	if s.closed {
		s.mu.Unlock()
		panic(&tensor.Error{Op: "experts", Err: fmt.Errorf("%w: model is closed", tensor.ErrArgument)})
	}
	s.stats.Misses++
	sl = &expertSlot{key: k, bank: b, done: make(chan struct{}), pins: 1}
	for _, p := range b.parts[e] {
		sl.bytes += p.n
	}
	sl.elem, sl.belem = s.lru.PushFront(sl), b.lru.PushFront(sl)
	s.slots[k] = sl
	s.grow(sl.bank, sl.bytes)
	s.mu.Unlock()
	s.jobs <- sl
	return sl
}

// ahead queues the read of expert e of b unless it is resident or being
// read; the slot is not pinned, and counts as neither hit nor miss.
func (s *expertStore) ahead(b *streamBank, e int) {
	s.mu.Lock()
	k := slotKey{b.id, e}
	if _, ok := s.slots[k]; ok || s.closed || e < 0 || e >= b.n {
		s.mu.Unlock()
		return
	}
	sl := &expertSlot{key: k, bank: b, done: make(chan struct{}), ahead: true}
	for _, p := range b.parts[e] {
		sl.bytes += p.n
	}
	sl.elem, sl.belem = s.lru.PushFront(sl), b.lru.PushFront(sl)
	s.slots[k] = sl
	s.grow(b, sl.bytes)
	s.stats.Prefetched++
	s.mu.Unlock()
	s.jobs <- sl
}

// grow adds n resident bytes to b (mu held).
func (s *expertStore) grow(b *streamBank, n int64) {
	b.resident += n
	s.stats.ResidentBytes += n
	s.stats.PeakResidentBytes = max(s.stats.PeakResidentBytes, s.stats.ResidentBytes)
}

// ready waits for sl's read and makes its arrays (on the calling, compute
// goroutine, so the backend sees its ops where the forward pass runs).
func (s *expertStore) ready(sl *expertSlot) *Linear {
	<-sl.done
	if sl.err != nil {
		panic(&tensor.Error{Op: "experts", Err: sl.err})
	}
	if sl.lin != nil {
		return sl.lin
	}
	b := sl.bank
	parts := b.parts[sl.key.expert]
	// The CPU backend borrows the read buffer; MLX copies it into its own
	// memory, so the buffer is dropped there.
	borrow := s.be.Name() == "cpu"
	arrs := make([]*tensor.Array, len(parts))
	var size int64
	for i, p := range parts {
		a := tensor.FromBytesOn(s.be, sl.bufs[i], slices.Clone(p.shape), p.dt, borrow)
		if s.cast.Valid() && a.DType().IsFloat() && a.DType() != s.cast {
			c := tensor.AsType(a, s.cast)
			a.Free()
			a = c
		}
		tensor.Detach(a)
		arrs[i] = a
		size += int64(a.NBytes())
	}
	l := &Linear{Weight: arrs[0]}
	if b.quant {
		l.Scales, l.Biases, l.QuantSpec = arrs[1], arrs[2], b.spec
	}
	if !borrow || s.cast.Valid() {
		sl.dropBufs() // copied: the arrays do not point into them
	}
	s.mu.Lock()
	sl.lin = l
	s.grow(b, size-sl.bytes)
	sl.bytes = size
	s.mu.Unlock()
	return l
}

// release unpins slots and trims the cache to its budget.
func (s *expertStore) release(slots ...*expertSlot) {
	s.mu.Lock()
	for _, sl := range slots {
		sl.pins--
	}
	var drop []*expertSlot
	evict := func(sl *expertSlot) {
		s.lru.Remove(sl.elem)
		sl.bank.lru.Remove(sl.belem)
		delete(s.slots, sl.key)
		s.grow(sl.bank, -sl.bytes)
		s.stats.Evictions++
		if sl.err != nil {
			s.failed--
		}
		drop = append(drop, sl)
	}
	free := func(sl *expertSlot) bool { return sl.pins == 0 && isDone(sl) }
	// failed reads are dropped whatever the budget, so that a later pass
	// reads again
	for e := s.lru.Back(); e != nil && s.failed > 0; {
		prev := e.Prev()
		if sl := e.Value.(*expertSlot); sl.err != nil && free(sl) {
			evict(sl)
		}
		e = prev
	}
	if s.perBank {
		share := s.budget / int64(max(len(s.banks), 1))
		seen := map[*streamBank]bool{}
		for _, sl := range slots {
			b := sl.bank
			if seen[b] {
				continue
			}
			seen[b] = true
			for e := b.lru.Back(); e != nil && b.resident > share; {
				prev := e.Prev()
				if sl := e.Value.(*expertSlot); free(sl) {
					evict(sl)
				}
				e = prev
			}
		}
	} else {
		for e := s.lru.Back(); e != nil && s.stats.ResidentBytes > s.budget; {
			prev := e.Prev()
			if sl := e.Value.(*expertSlot); free(sl) {
				evict(sl)
			}
			e = prev
		}
	}
	s.mu.Unlock()
	for _, sl := range drop {
		sl.discard()
	}
}

// discard frees an evicted slot's arrays, then the memory they borrowed:
// every view of them was made inside a pass whose scope has closed.
func (sl *expertSlot) discard() {
	if l := sl.lin; l != nil {
		tensor.Free(l.Weight, l.Scales, l.Biases)
		sl.lin = nil
	}
	sl.dropBufs()
}

// dropBufs frees the read buffers (once no array borrows them).
func (sl *expertSlot) dropBufs() {
	if sl.free != nil {
		sl.free()
	}
	sl.bufs, sl.free = nil, nil
}

func isDone(sl *expertSlot) bool {
	select {
	case <-sl.done:
		return true
	default:
		return false
	}
}

// close stops the readers and frees every cached expert.
func (s *expertStore) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.jobs)
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range s.slots {
		if isDone(sl) {
			sl.discard()
		}
	}
	s.slots, s.stats.ResidentBytes = map[slotKey]*expertSlot{}, 0
	s.lru.Init()
	for _, b := range s.banks {
		b.lru.Init()
		b.resident = 0
	}
	for _, f := range s.files {
		_ = f.Close()
	}
	s.files = map[string]*os.File{}
	s.poolMu.Lock()
	for _, rs := range s.pool {
		for _, r := range rs {
			r.free()
		}
	}
	s.pool, s.pooled = nil, 0
	s.poolMu.Unlock()
}

// Quantized implements ExpertBank.
func (b *streamBank) Quantized() bool { return b.quant }

// Len implements ExpertBank.
func (b *streamBank) Len() int { return b.n }

// pinned returns expert e's slot: the one a pass's Load pinned, or a
// fresh pin the caller releases (own true).
func (b *streamBank) pinned(e int) (sl *expertSlot, own bool) {
	if e < 0 || e >= b.n {
		panic(&tensor.Error{Op: "experts", Err: fmt.Errorf("%w: expert index %d of %d", tensor.ErrArgument, e, b.n)})
	}
	if sl, ok := b.active[e]; ok {
		return sl, false
	}
	return b.store.request(b, e), true
}

// Expert implements ExpertBank.
func (b *streamBank) Expert(e int, x *tensor.Array) *tensor.Array {
	sl, own := b.pinned(e)
	if own {
		defer b.store.release(sl)
	}
	return b.store.ready(sl).Forward(x)
}

// Gather implements ExpertBank: each used expert runs over the slots
// routed to it, with the kernel the resident bank's gather uses per slot,
// and the outputs are put back in slot order.
func (b *streamBank) Gather(x, inds *tensor.Array) *tensor.Array {
	var own []*expertSlot // pins of this call, released after its scope closes
	defer func() { b.store.release(own...) }()
	sc := tensor.NewScope()
	defer sc.Close()
	ids := hostIDs(inds)
	k := inds.Dim(-1)
	lead := inds.Shape()[:inds.NDim()-1]
	if x.NDim() != inds.NDim()+2 || !equalInts(x.Shape()[:len(lead)], lead) || (x.Dim(-3) != 1 && x.Dim(-3) != k) {
		panic(&tensor.Error{Op: "experts.Gather", Err: fmt.Errorf("%w: x %v, indices %v", tensor.ErrShape, x.Shape(), inds.Shape())})
	}
	kx, m, in := x.Dim(-3), x.Dim(-2), x.Dim(-1)
	used, slots := groupSlots(ids, b.n)
	lins := make(map[int]*Linear, len(used))
	for _, e := range used {
		sl, o := b.pinned(e)
		if o {
			own = append(own, sl)
		}
		lins[e] = b.store.ready(sl)
	}
	outShape := append(append(slices.Clone(lead), k, m), b.out)
	if !b.quant {
		// as SwitchLinear.Gather over a bank of the used experts only
		pos := make(map[int]int32, len(used))
		ws := make([]*tensor.Array, len(used))
		for i, e := range used {
			pos[e] = int32(i)
			ws[i] = lins[e].Weight
		}
		remap := make([]int32, len(ids))
		for i, e := range ids {
			remap[i] = pos[int(e)]
		}
		bank := tensor.Stack(ws, 0)
		w := tensor.Take(bank, int32s(x.Backend(), remap, inds.Shape()...), 0)
		return sc.Keep(tensor.Matmul(x, tensor.SwapAxes(w, -1, -2)))
	}
	flat := tensor.Reshape(x, -1, m, in) // [N·kx, m, in]
	var outs []*tensor.Array
	where := make([]int32, len(ids))
	at := 0
	for _, e := range used {
		xi := make([]int32, len(slots[e]))
		for j, p := range slots[e] {
			r, c := p/k, p%k
			if kx == 1 {
				c = 0
			}
			xi[j] = int32(r*kx + c)
			where[p] = int32(at)
			at++
		}
		l := lins[e]
		xe := tensor.Take(flat, int32s(x.Backend(), xi), 0) // [n, m, in]
		zero := int32s(x.Backend(), make([]int32, len(xi)))
		w3 := tensor.ExpandDims(l.Weight, 0)
		s3 := tensor.ExpandDims(l.Scales, 0)
		b3 := tensor.ExpandDims(l.Biases, 0)
		outs = append(outs, tensor.GatherQMM(xe, w3, s3, b3, nil, zero, true, l.GroupSize, l.Bits))
	}
	all := tensor.Concatenate(outs, 0) // [slots, m, out]
	y := tensor.Take(all, int32s(x.Backend(), where), 0)
	return sc.Keep(tensor.Reshape(y, outShape...))
}

// hostIDs reads int expert ids to the host.
func hostIDs(inds *tensor.Array) []int32 {
	c := tensor.AsType(tensor.Reshape(inds, -1), tensor.Int32)
	raw := c.Bytes()
	out := make([]int32, len(raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// groupSlots lists the experts ids uses, ascending, and each one's slots.
func groupSlots(ids []int32, n int) (used []int, slots map[int][]int) {
	slots = map[int][]int{}
	for p, v := range ids {
		e := int(v)
		if e < 0 || e >= n {
			panic(&tensor.Error{Op: "experts", Err: fmt.Errorf("%w: expert index %d of %d", tensor.ErrArgument, e, n)})
		}
		if _, ok := slots[e]; !ok {
			used = append(used, e)
		}
		slots[e] = append(slots[e], p)
	}
	slices.Sort(used)
	return used, slots
}

// loadRouted pins, for a SwitchGLU pass, the experts inds routes to in
// every streamed bank of s, queueing the gate bank's reads first, then
// up's, then down's, so that later banks read while earlier ones compute.
// It returns the function that unpins them (nil when no bank streams).
func (s *SwitchGLU) loadRouted(x, inds *tensor.Array) func() {
	var banks []*streamBank
	for _, b := range []ExpertBank{s.Gate, s.Up, s.Down} {
		if sb, ok := b.(*streamBank); ok && sb.active == nil {
			banks = append(banks, sb)
		}
	}
	if len(banks) == 0 {
		return nil
	}
	used, _ := groupSlots(hostIDs(inds), banks[0].n)
	var pinned []*expertSlot
	for _, b := range banks {
		b.active = make(map[int]*expertSlot, len(used))
		for _, e := range used {
			if e >= b.n {
				continue
			}
			sl := b.store.request(b, e)
			b.active[e] = sl
			pinned = append(pinned, sl)
		}
	}
	st := banks[0].store
	st.mu.Lock()
	st.stats.Blocks++
	st.mu.Unlock()
	if h := s.next; h != nil {
		h.prefetch(x)
	}
	return func() {
		for _, b := range banks {
			b.active = nil
		}
		st.release(pinned...)
	}
}

// prefetch routes x through the next layer's router and queues reads of
// the experts its top k pick, in every streamed bank of that layer.
func (h *prefetchHint) prefetch(x *tensor.Array) {
	var banks []*streamBank
	for _, b := range []ExpertBank{h.experts.Gate, h.experts.Up, h.experts.Down} {
		if sb, ok := b.(*streamBank); ok {
			banks = append(banks, sb)
		}
	}
	if len(banks) == 0 || h.router == nil || h.topK < 1 {
		return
	}
	var ids []int32
	func() {
		sc := tensor.NewScope()
		defer sc.Close()
		logits := h.router.Forward(x)
		if k := min(h.topK, logits.Dim(-1)); k > 0 {
			inds, _ := TopKRouting(tensor.AsType(logits, tensor.Float32), k)
			ids = hostIDs(inds)
		}
	}()
	used, _ := groupSlots(ids, banks[0].n)
	for _, b := range banks {
		for _, e := range used {
			b.store.ahead(b, e)
		}
	}
}
