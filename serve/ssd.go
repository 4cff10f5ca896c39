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
}

// ssdTier is the batched lane's cold tier: the KV of long prompt prefixes
// saved as kv cache files in a folder (one file per prefix, written off
// the token loop, atomically: kv.Save writes a temporary file, syncs it
// and renames it), found again by their token ids — also by a restarted
// server — and restored into a row's pool caches (the file is mapped, its
// arrays checksummed, then copied into the row's blocks). Every file
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

	mu      sync.Mutex
	entries map[string]*ssdEntry // by file name
	clock   int64
	stats   SSDStats
	pending sync.WaitGroup
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
		layers: len(specs), be: cfg.Backend, model: ssdModel(cfg), log: log, entries: map[string]*ssdEntry{}}
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

// restore is the batch's Restore hook: the longest prefix of the prompt
// (leaving its last token to compute) saved in the row's namespace ns and
// longer than what the caches hold replaces their state. A file that
// fails its checks is quarantined and the row goes on without it. A
// namespace that is not persistent restores nothing.
func (t *ssdTier) restore(ns string, prompt []int32, caches []kv.Cache, held int) (int, error) {
	if !lora.Persistent(ns) {
		return held, nil
	}
	key := t.nsKey(ns)
	t.mu.Lock()
	var best *ssdEntry
	for _, e := range t.entries {
		n := len(e.tokens)
		if e.key == key && n > held && n < len(prompt) && (best == nil || n > len(best.tokens)) && slices.Equal(e.tokens, prompt[:n]) {
			best = e
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
		return 0, fmt.Errorf("restoring %d cached tokens: %w", len(best.tokens), err)
	}
	t.mu.Lock()
	t.stats.Hits++
	t.mu.Unlock()
	return len(best.tokens), nil
}

// drop removes an entry from the index (the caller holds mu).
func (t *ssdTier) drop(e *ssdEntry) {
	if _, ok := t.entries[e.name]; ok {
		delete(t.entries, e.name)
		t.stats.Bytes -= e.bytes
		t.stats.Entries = len(t.entries)
	}
}

// snapshot is a row's OnPrefillDone (ns its namespace, which must be
// persistent): the caches hold the prompt but its last token; unless a
// file of ns already covers those tokens, their state is copied here (on
// the engine goroutine) and written by a goroutine of its own.
func (t *ssdTier) snapshot(ns string, tokens []int32, caches []kv.Cache) {
	if len(tokens) < t.minTokens || !lora.Persistent(ns) {
		return
	}
	key := t.nsKey(ns)
	name := t.fileName(key, tokens)
	t.mu.Lock()
	_, have := t.entries[name]
	t.mu.Unlock()
	if have {
		return
	}
	var cs []kv.Cache
	err := tensor.Try(func() {
		cs = t.model.MakeCaches()
		for i, c := range caches {
			if c == nil {
				continue
			}
			st := c.State() // a copy: the row goes on writing its blocks
			tensor.Eval(st.Arrays...)
			serr := cs[i].SetState(st)
			st.Free()
			if serr != nil {
				panic(serr)
			}
		}
	})
	if err != nil {
		freeCaches(cs)
		t.log.Warn("SSD cache: snapshot failed", "err", err.Error())
		return
	}
	tokens = slices.Clone(tokens)
	t.pending.Add(1)
	go func() {
		defer t.pending.Done()
		defer freeCaches(cs)
		path := filepath.Join(t.dir, name)
		if err := kv.Save(path, cs, tokens, kv.Meta{ModelID: key}); err != nil {
			t.log.Warn("SSD cache: write failed", "err", err.Error())
			return
		}
		info, err := os.Stat(path)
		if err != nil {
			return
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		t.clock++
		t.entries[name] = &ssdEntry{name: name, key: key, tokens: tokens, bytes: info.Size(), used: t.clock}
		t.stats.Bytes += info.Size()
		t.stats.Writes++
		t.evict()
		t.stats.Entries = len(t.entries)
	}()
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

// flush waits for the writes in flight: once it returns, every snapshot
// taken before it is durable (synced and renamed into place).
func (t *ssdTier) flush() { t.pending.Wait() }

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
