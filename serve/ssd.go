package serve

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/kv"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/tensor"
)

// Defaults of the SSD cold tier.
const (
	DefaultSSDCacheMaxBytes  = 16 << 30
	DefaultSSDCacheMinTokens = 256
)

// ssdExt names the tier's cache files; quarantined ones get
// ssdQuarantine appended.
const (
	ssdExt        = ".kvc"
	ssdQuarantine = ".quarantined"
)

// SSDStats is /stats.ssd_cache.
type SSDStats struct {
	Entries     int   `json:"entries"`
	Bytes       int64 `json:"bytes"`
	MaxBytes    int64 `json:"max_bytes"`
	Hits        int64 `json:"hits"`
	Misses      int64 `json:"misses"`
	Writes      int64 `json:"writes"`
	Evicted     int64 `json:"evicted"`
	Quarantined int64 `json:"quarantined"`
	// Spilled counts files written for prefixes the KV pool evicted
	// (Writes counts them too); Dropped, writes given up because the
	// queue was full; QueuedBytes is the KV copied out and waiting to be
	// written (memory outside the pool's budget).
	Spilled     int64 `json:"spilled"`
	Dropped     int64 `json:"dropped"`
	QueuedBytes int64 `json:"queued_bytes"`
}

// Bounds of the tier's write queue: at most ssdQueueJobs writes wait or
// run, holding at most maxQueued bytes of copied KV (a quarter of the KV
// budget) — or one write, whatever its size. A write that does not fit is
// dropped with a log line; the token loop never waits for the disk.
const ssdQueueJobs = 16

// ssdJob is one file to write: a prefix's token ids and its KV, copied
// on the engine goroutine, as caches (a prompt snapshot) or states (an
// evicted prefix).
type ssdJob struct {
	name, key string
	tokens    []int32
	caches    []kv.Cache
	states    []kv.State
	bytes     int64
	spill     bool
}

// free releases the job's copies.
func (j *ssdJob) free() {
	freeCaches(j.caches)
	for _, st := range j.states {
		st.Free()
	}
}

// saveJob writes a job's file (kv.Save or kv.SaveStates).
func saveJob(path string, j *ssdJob) error {
	if j.states != nil {
		return kv.SaveStates(path, j.states, j.tokens, kv.Meta{ModelID: j.key})
	}
	return kv.Save(path, j.caches, j.tokens, kv.Meta{ModelID: j.key})
}

// ssdTier is the batched lane's cold tier: the KV of long prefixes saved
// as kv cache files in a folder, one file per prefix — each long prompt
// once its prefill is done, and each prefix the paged pool evicts (its
// prompt and generated tokens in whole blocks, kv.PoolConfig.OnEvict)
// unless a file already holds it. The engine goroutine only copies the KV
// out; one writer goroutine writes the files, atomically (kv.Save writes
// a temporary file, syncs it and renames it), from a bounded queue (a
// write that does not fit is dropped with a log line). Files are found
// again by their token ids — also by a restarted server — and restored
// into a row's pool caches (the file is mapped, its arrays checksummed,
// then copied into the row's blocks), whole or, on models without
// sliding-window layers, as far as the prompt shares its tokens. Every file
// carries the server's cache key (model fingerprint, KV scheme) and the
// namespace of the adapters that computed it (nsKey): a row restores only
// files of its own namespace; a file with another model's key, or one
// that fails its checks, is renamed aside (quarantined) with a log line
// and never served. Rows whose namespace does not outlive the process
// (lora.Persistent) neither write nor restore files.
type ssdTier struct {
	dir       string
	max       int64
	minTokens int
	key       string
	layers    int
	be        tensor.Backend
	model     generate.Model
	log       *slog.Logger

	// partial: a file's leading tokens can be restored on their own (no
	// sliding-window layer: the loaded caches trim)
	partial bool

	mu      sync.Mutex
	entries map[string]*ssdEntry // by file name
	clock   int64
	stats   SSDStats
	pending sync.WaitGroup
	// the write queue: jobs reserved (waiting or being written), by file
	// name, their bytes and bound, and the writer goroutine's channel
	queued    map[string]*ssdJob
	maxQueued int64
	queue     chan *ssdJob
	writerEnd chan struct{}
	save      func(path string, j *ssdJob) error // saveJob; tests stand in
	// drops not yet logged, and when the last line was
	unlogged    int
	lastDropLog time.Time
}

// ssdEntry is one file of the tier.
type ssdEntry struct {
	name   string
	key    string // the file's ModelID: nsKey of its namespace
	tokens []int32
	bytes  int64
	used   int64 // LRU clock
}

// cacheKey is what every tier file starts its key with: the model's
// fingerprint and the layout of its caches (nsKey adds the adapters).
func cacheKey(cfg *Config, specs []kv.LayerSpec) string {
	fp := cfg.ModelFingerprint
	if fp == "" {
		fp = fmt.Sprintf("%s/vocab%d", cfg.ModelID, cfg.Model.VocabSize())
	}
	// (the base model's files keep the key they had before namespaces)
	h := sha256.Sum256(fmt.Appendf(nil, "%s|kv:%+v|adapters:none", fp, specs))
	return "mlxgo-ssd:" + hex.EncodeToString(h[:16])
}

// nsKey is the key of the files of namespace ns (a generate.Options
// CacheNamespace: "" for the base model, lora.Host.Key's for adapters).
func (t *ssdTier) nsKey(ns string) string {
	if ns == "" {
		return t.key
	}
	h := sha256.Sum256([]byte(ns))
	return t.key + ssdNSSep + hex.EncodeToString(h[:16])
}

// ssdNSSep parts a file key's model key from its adapters' namespace.
const ssdNSSep = "/adapters:"

// ours reports whether a file key is this model's (any namespace).
func (t *ssdTier) ours(key string) bool {
	return key == t.key || strings.HasPrefix(key, t.key+ssdNSSep)
}

// newSSDTier opens (creating) the folder and indexes its files: each
// one's token ids are read (kv.Peek), or, with verify, the whole file is
// loaded and checksummed; files that fail or carry another key are
// quarantined. Temporary files a crash left behind are removed.
func newSSDTier(cfg *Config, specs []kv.LayerSpec, log *slog.Logger) (*ssdTier, error) {
	if err := os.MkdirAll(cfg.SSDCacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("serve: SSD cache: %w", err)
	}
	t := &ssdTier{dir: cfg.SSDCacheDir, max: cfg.SSDCacheMaxBytes, minTokens: cfg.SSDCacheMinTokens, key: cacheKey(cfg, specs),
		layers: len(specs), be: cfg.Backend, model: ssdModel(cfg), log: log, entries: map[string]*ssdEntry{},
		partial: true, queued: map[string]*ssdJob{}, queue: make(chan *ssdJob, ssdQueueJobs), writerEnd: make(chan struct{}), save: saveJob}
	for _, sp := range specs {
		if sp.Window > 0 || sp.Recurrent {
			t.partial = false
		}
	}
	if t.max <= 0 {
		t.max = DefaultSSDCacheMaxBytes
	}
	if t.minTokens <= 0 {
		t.minTokens = DefaultSSDCacheMinTokens
	}
	t.stats.MaxBytes = t.max
	des, err := os.ReadDir(t.dir)
	if err != nil {
		return nil, fmt.Errorf("serve: SSD cache: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasPrefix(name, ".kvcache-") { // a write a crash interrupted
			_ = os.Remove(filepath.Join(t.dir, name))
			continue
		}
		if de.IsDir() || !strings.HasSuffix(name, ssdExt) {
			continue
		}
		path := filepath.Join(t.dir, name)
		toks, meta, err := kv.Peek(path)
		if err == nil && !t.ours(meta.ModelID) {
			err = fmt.Errorf("made for another model or KV scheme (%s)", meta.ModelID)
		}
		if err == nil && cfg.SSDCacheVerify {
			err = t.verify(path, meta.ModelID)
		}
		if err != nil {
			t.quarantine(name, err)
			continue
		}
		info, _ := de.Info()
		t.entries[name] = &ssdEntry{name: name, key: meta.ModelID, tokens: toks, bytes: info.Size()}
		t.stats.Bytes += info.Size()
	}
	t.stats.Entries = len(t.entries)
	log.Info("SSD cache", "dir", t.dir, "entries", len(t.entries), "bytes", t.stats.Bytes, "max_bytes", t.max)
	go t.writer()
	return t, nil
}

// verify loads a file in full (every checksum) and frees it.
func (t *ssdTier) verify(path, key string) error {
	s, err := kv.Load(path, kv.Expect{ModelID: key, Layers: t.layers, Backend: t.be})
	if err != nil {
		return err
	}
	s.Free()
	return nil
}

// quarantine renames a bad file aside, with a log line.
func (t *ssdTier) quarantine(name string, why error) {
	path := filepath.Join(t.dir, name)
	t.log.Warn("SSD cache: file quarantined, not served", "file", name, "reason", why.Error())
	if err := os.Rename(path, path+ssdQuarantine); err != nil {
		_ = os.Remove(path)
	}
	t.stats.Quarantined++
}

// fileName is the file a prefix is saved under: a hash of its key (nsKey)
// and the token ids.
func (t *ssdTier) fileName(key string, tokens []int32) string {
	h := sha256.New()
	h.Write([]byte(key))
	var b [4]byte
	for _, id := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16]) + ssdExt
}

// restore is the batch's Restore hook: the file saved in the row's
// namespace ns sharing the longest run of leading tokens with the prompt
// (leaving its last token to compute), longer than what the caches hold
// and at least the tier's minimum, replaces their state — the whole file,
// or, where the caches can be trimmed (no sliding-window layer), its
// leading tokens the prompt shares. A file that fails its checks is
// quarantined and the row goes on without it. A namespace that is not
// persistent restores nothing.
func (t *ssdTier) restore(ns string, prompt []int32, caches []kv.Cache, held int) (int, error) {
	if !lora.Persistent(ns) {
		return held, nil
	}
	key := t.nsKey(ns)
	want := prompt[:len(prompt)-1]
	t.mu.Lock()
	var best *ssdEntry
	use := 0
	for _, e := range t.entries {
		if e.key != key {
			continue
		}
		n := commonPrefix(e.tokens, want)
		if n < len(e.tokens) && !t.partial {
			continue
		}
		if n > held && (n >= t.minTokens || n == len(e.tokens)) && (n > use || n == use && len(e.tokens) < len(best.tokens)) {
			best, use = e, n
		}
	}
	if best == nil {
		t.stats.Misses++
		t.mu.Unlock()
		return held, nil
	}
	t.clock++
	best.used = t.clock
	t.mu.Unlock()
	s, err := kv.Load(filepath.Join(t.dir, best.name), kv.Expect{ModelID: key, Layers: t.layers, Backend: t.be})
	if err == nil && !slices.Equal(s.Tokens, best.tokens) {
		s.Free()
		err = fmt.Errorf("%w: the file's token ids changed", kv.ErrCorrupt)
	}
	if err != nil {
		t.mu.Lock()
		t.drop(best)
		t.quarantine(best.name, err)
		t.stats.Misses++
		t.mu.Unlock()
		return held, nil
	}
	defer s.Free()
	if cut := len(s.Tokens) - use; cut > 0 {
		for _, c := range s.Caches {
			if c != nil && (!c.IsTrimmable() || c.Trim(cut) != cut) {
				t.mu.Lock()
				t.stats.Misses++
				t.mu.Unlock()
				return held, nil
			}
		}
	}
	err = tensor.Try(func() {
		for i, c := range caches {
			if c == nil {
				continue
			}
			st := s.Caches[i].State()
			serr := c.SetState(st)
			st.Free()
			if serr != nil {
				panic(serr)
			}
		}
	})
	if err != nil {
		return 0, fmt.Errorf("restoring %d cached tokens: %w", use, err)
	}
	t.mu.Lock()
	t.stats.Hits++
	t.mu.Unlock()
	return use, nil
}

// commonPrefix is the number of leading tokens a and b share.
func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// drop removes an entry from the index (the caller holds mu).
func (t *ssdTier) drop(e *ssdEntry) {
	if _, ok := t.entries[e.name]; ok {
		delete(t.entries, e.name)
		t.stats.Bytes -= e.bytes
		t.stats.Entries = len(t.entries)
	}
}

// covered reports whether a file of key, written or queued, already
// holds tokens: one with exactly these tokens, or, with longer, one that
// starts with them (the caller holds mu).
func (t *ssdTier) covered(key string, tokens []int32, longer bool) bool {
	has := func(k string, toks []int32) bool {
		return k == key && (len(toks) == len(tokens) || longer && len(toks) > len(tokens)) && slices.Equal(toks[:len(tokens)], tokens)
	}
	for _, e := range t.entries {
		if has(e.key, e.tokens) {
			return true
		}
	}
	for _, j := range t.queued {
		if has(j.key, j.tokens) {
			return true
		}
	}
	return false
}

// reserve takes a place in the write queue for a job of that many bytes,
// or counts it dropped when the queue is full (the caller holds mu).
func (t *ssdTier) reserve(j *ssdJob) bool {
	if len(t.queued) >= ssdQueueJobs || len(t.queued) > 0 && t.stats.QueuedBytes+j.bytes > t.maxQueued {
		t.stats.Dropped++
		return false
	}
	t.queued[j.name] = j
	t.stats.QueuedBytes += j.bytes
	t.pending.Add(1)
	return true
}

// release gives a job's place back (the caller holds mu).
func (t *ssdTier) release(j *ssdJob) {
	delete(t.queued, j.name)
	t.stats.QueuedBytes -= j.bytes
	t.pending.Done()
}

// snapshot is a row's OnPrefillDone (ns its namespace, which must be
// persistent): the caches hold the prompt but its last token; unless a
// file of ns already covers those tokens, their state is copied here (on
// the engine goroutine) and queued for the writer goroutine.
func (t *ssdTier) snapshot(ns string, tokens []int32, caches []kv.Cache) {
	if len(tokens) < t.minTokens || !lora.Persistent(ns) {
		return
	}
	key := t.nsKey(ns)
	j := &ssdJob{name: t.fileName(key, tokens), key: key, tokens: slices.Clone(tokens)}
	for _, c := range caches {
		if c != nil {
			j.bytes += int64(c.Bytes())
		}
	}
	t.mu.Lock()
	if t.covered(key, tokens, t.partial) { // (a longer file serves a prompt only where it trims)
		t.mu.Unlock()
		return
	}
	ok := t.reserve(j)
	t.mu.Unlock()
	if !ok {
		t.dropped(j)
		return
	}
	err := tensor.Try(func() {
		j.caches = t.model.MakeCaches()
		for i, c := range caches {
			if c == nil {
				continue
			}
			st := c.State() // a copy: the row goes on writing its blocks
			tensor.Eval(st.Arrays...)
			serr := j.caches[i].SetState(st)
			st.Free()
			if serr != nil {
				panic(serr)
			}
		}
	})
	if err != nil {
		t.log.Warn("SSD cache: snapshot failed", "err", err.Error())
		t.abandon(j)
		return
	}
	t.queue <- j // never blocks: the channel holds every reserved job
}

// spill is the pool's OnEvict hook (on the engine goroutine, inside the
// write that needs the blocks): an evicted prefix of at least the tier's
// minimum, in a persistent namespace and not already in a file (nor the
// start of one), is copied out of the pool and queued for the writer
// goroutine, so that a later request (or a restarted server) restores it
// instead of recomputing it.
func (t *ssdTier) spill(ev *kv.Evicted) {
	ns := ev.Namespace()
	if ev.Len() < t.minTokens || !lora.Persistent(ns) {
		return
	}
	key := t.nsKey(ns)
	tokens := ev.Tokens()
	j := &ssdJob{name: t.fileName(key, tokens), key: key, tokens: tokens, bytes: int64(ev.Bytes()), spill: true}
	t.mu.Lock()
	// a file holding a longer chain covers this one: the rest of a chain
	// whose tail was written goes unwritten (where caches do not trim, a
	// prompt that shares only this part is not served from that file —
	// the price of writing each chain once, not once per evicted block)
	if t.covered(key, tokens, true) {
		t.mu.Unlock()
		return
	}
	ok := t.reserve(j)
	t.mu.Unlock()
	if !ok {
		t.dropped(j)
		return
	}
	states, err := ev.States()
	if err != nil {
		t.log.Warn("SSD cache: copying an evicted prefix failed", "err", err.Error())
		t.abandon(j)
		return
	}
	j.states = states
	t.queue <- j
}

// dropped logs a write given up because the queue was full: at most one
// line a second, counting the writes dropped since the last one (a slow
// disk under heavy eviction would otherwise log every evicted block).
func (t *ssdTier) dropped(j *ssdJob) {
	t.mu.Lock()
	t.unlogged++
	now := time.Now()
	if now.Sub(t.lastDropLog) < time.Second {
		t.mu.Unlock()
		return
	}
	n := t.unlogged
	t.unlogged, t.lastDropLog = 0, now
	t.mu.Unlock()
	t.log.Warn("SSD cache: write queue full, prefix not written", "tokens", len(j.tokens), "bytes", j.bytes, "dropped", n)
}

// abandon frees a reserved job that will not be written.
func (t *ssdTier) abandon(j *ssdJob) {
	j.free()
	t.mu.Lock()
	t.release(j)
	t.mu.Unlock()
}

// writer is the tier's goroutine: it writes queued jobs in order, each
// atomically (kv.Save: temporary file, sync, rename), indexes the file
// and keeps the tier under its cap.
func (t *ssdTier) writer() {
	defer close(t.writerEnd)
	for j := range t.queue {
		t.write(j)
	}
}

// write writes one job and gives its place in the queue back.
func (t *ssdTier) write(j *ssdJob) {
	t.mu.Lock()
	save := t.save
	t.mu.Unlock()
	path := filepath.Join(t.dir, j.name)
	err := save(path, j)
	j.free()
	var info os.FileInfo
	if err == nil {
		info, err = os.Stat(path)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	defer t.release(j)
	if err != nil {
		t.log.Warn("SSD cache: write failed", "err", err.Error())
		return
	}
	if old, ok := t.entries[j.name]; ok {
		t.drop(old)
	}
	t.clock++
	t.entries[j.name] = &ssdEntry{name: j.name, key: j.key, tokens: j.tokens, bytes: info.Size(), used: t.clock}
	t.stats.Bytes += info.Size()
	t.stats.Writes++
	if j.spill {
		t.stats.Spilled++
	}
	t.evict()
	t.stats.Entries = len(t.entries)
}

// setSave replaces the function that writes a job's file (tests).
func (t *ssdTier) setSave(f func(path string, j *ssdJob) error) {
	t.mu.Lock()
	t.save = f
	t.mu.Unlock()
}

// evict removes least recently used files until the tier fits its cap
// (the caller holds mu).
func (t *ssdTier) evict() {
	if t.stats.Bytes <= t.max {
		return
	}
	es := make([]*ssdEntry, 0, len(t.entries))
	for _, e := range t.entries {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].used < es[j].used })
	for _, e := range es {
		if t.stats.Bytes <= t.max {
			break
		}
		_ = os.Remove(filepath.Join(t.dir, e.name))
		t.drop(e)
		t.stats.Evicted++
	}
}

// flush waits for the writes queued so far: once it returns, every
// prefix queued before it is durable (synced and renamed into place).
func (t *ssdTier) flush() { t.pending.Wait() }

// stop flushes the queue and ends the writer goroutine; nothing may be
// queued after it.
func (t *ssdTier) stop() {
	t.flush()
	close(t.queue)
	<-t.writerEnd
}

// snapshotStats returns the tier's counters.
func (t *ssdTier) snapshotStats() SSDStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stats
}

// handleCacheFlush is POST /admin/cache/flush: 200 once every SSD cache
// write taken so far is durable.
func (s *Server) handleCacheFlush(w http.ResponseWriter, r *http.Request) {
	if s.eng.lane == nil || s.eng.lane.ssd == nil {
		s.fail(w, r, &apiError{status: http.StatusNotFound, message: "no SSD cache is configured (--ssd-cache DIR)", typ: "invalid_request_error", code: "not_found"})
		return
	}
	t := s.eng.lane.ssd
	t.flush()
	st := t.snapshotStats()
	writeJSON(w, http.StatusOK, struct {
		Flushed bool  `json:"flushed"`
		Entries int   `json:"entries"`
		Bytes   int64 `json:"bytes"`
	}{true, st.Entries, st.Bytes})
}
