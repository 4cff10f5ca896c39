package kv

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/mlxgo/mlxgo/tensor"
)

// File layout (version 1), all integers little-endian:
//
//	[0, 16)       magic "MLXGOKV\x00", version uint32, reserved uint32
//	[4096, ...)   tensors and the token ids, each at a page-aligned offset
//	index         JSON describing the caches and where each array lies,
//	              with a CRC-32C per array
//	last 32 bytes index offset uint64, index length uint64, index CRC-32C
//	              uint32, reserved uint32, end magic "KVCACHE\x00"
//
// Page-aligned data can be mapped and handed to a backend without a copy;
// the index at the end lets Save stream arrays out one at a time and know
// their checksums before writing it.
const (
	fileVersion = 1
	pageSize    = 4096
	trailerSize = 32
)

var (
	fileMagic  = [8]byte{'M', 'L', 'X', 'G', 'O', 'K', 'V', 0}
	endMagic   = [8]byte{'K', 'V', 'C', 'A', 'C', 'H', 'E', 0}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// Errors Load returns (wrapped, with the file name); test with errors.Is.
var (
	ErrNotCacheFile  = errors.New("not an mlxgo KV cache file")
	ErrVersion       = errors.New("unsupported KV cache file version")
	ErrTruncated     = errors.New("KV cache file is truncated")
	ErrCorrupt       = errors.New("KV cache file is corrupt")
	ErrModelMismatch = errors.New("KV cache file belongs to another model")
	ErrLayerMismatch = errors.New("KV cache file has a different layer count")
)

// Meta describes what a saved cache belongs to.
type Meta struct {
	// ModelID identifies the model (and its weights) the cache was computed
	// with; Load refuses a file made for another one.
	ModelID string
	// Extra is free-form metadata kept with the file (chat template
	// version, sampler settings, ...).
	Extra map[string]string
}

// Expect is what the loader checks a file against; zero fields are not checked.
type Expect struct {
	ModelID string
	Layers  int
	// Backend receives the arrays (tensor.Default() when nil).
	Backend tensor.Backend
}

// Saved is a loaded file: one cache per layer and the token ids they cover.
type Saved struct {
	Caches []Cache
	Tokens []int32
	Meta   Meta
}

// Free frees every cache.
func (s *Saved) Free() {
	for _, c := range s.Caches {
		if c != nil {
			c.Free()
		}
	}
}

type arrayEntry struct {
	DType  string `json:"dtype"`
	Shape  []int  `json:"shape"`
	Offset int64  `json:"offset"`
	NBytes int64  `json:"nbytes"`
	CRC    uint32 `json:"crc32c"`
}

type cacheEntry struct {
	Kind      Kind         `json:"kind"`
	Offset    int          `json:"offset"`
	Idx       int          `json:"idx,omitempty"`
	MaxSize   int          `json:"max_size,omitempty"`
	Keep      int          `json:"keep,omitempty"`
	GroupSize int          `json:"group_size,omitempty"`
	Bits      int          `json:"bits,omitempty"`
	ValueBits int          `json:"value_bits,omitempty"`
	Arrays    []arrayEntry `json:"arrays"`
}

type index struct {
	Version int               `json:"version"`
	ModelID string            `json:"model_id"`
	Layers  int               `json:"layers"`
	Extra   map[string]string `json:"extra,omitempty"`
	Tokens  arrayEntry        `json:"tokens"`
	Caches  []cacheEntry      `json:"caches"`
}

// countingWriter tracks the file position for alignment.
type countingWriter struct {
	w   *bufio.Writer
	pos int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.pos += int64(n)
	return n, err
}

func (c *countingWriter) pad(to int64) error {
	if c.pos%to == 0 {
		return nil
	}
	_, err := c.Write(make([]byte, to-c.pos%to))
	return err
}

func (c *countingWriter) blob(raw []byte) (arrayEntry, error) {
	if err := c.pad(pageSize); err != nil {
		return arrayEntry{}, err
	}
	e := arrayEntry{Offset: c.pos, NBytes: int64(len(raw)), CRC: crc32.Checksum(raw, castagnoli)}
	_, err := c.Write(raw)
	return e, err
}

// Save writes caches (one per layer) and the token ids they cover to path,
// atomically: a temporary file in the same folder is renamed over path
// once complete and synced, so a crash never leaves a half-written cache
// behind under the real name. Arrays are streamed out one at a time.
func Save(path string, caches []Cache, tokens []int32, meta Meta) error {
	return save(path, len(caches), func(li int) (State, bool, error) {
		if caches[li] == nil {
			return State{}, false, fmt.Errorf("layer %d has no cache", li)
		}
		return caches[li].State(), true, nil
	}, tokens, meta)
}

// SaveStates is Save for caches given as their states (one per layer, in
// the format their State returns, e.g. Evicted.States): the file is the
// one Save writes for caches with those states. The caller keeps the
// states.
func SaveStates(path string, states []State, tokens []int32, meta Meta) error {
	return save(path, len(states), func(li int) (State, bool, error) {
		if states[li].Kind == "" {
			return State{}, false, fmt.Errorf("layer %d has no cache", li)
		}
		return states[li], false, nil
	}, tokens, meta)
}

// save writes the file of Save: state returns layer li's state and
// whether it is to be freed once written.
func save(path string, layers int, state func(li int) (State, bool, error), tokens []int32, meta Meta) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".kvcache-*")
	if err != nil {
		return fmt.Errorf("kv save: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	cw := &countingWriter{w: bufio.NewWriterSize(f, 1<<20)}
	var pre [16]byte
	copy(pre[:8], fileMagic[:])
	binary.LittleEndian.PutUint32(pre[8:], fileVersion)
	if _, err = cw.Write(pre[:]); err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	idx := index{Version: fileVersion, ModelID: meta.ModelID, Layers: layers, Extra: meta.Extra}
	tok := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(tok[4*i:], uint32(t))
	}
	if idx.Tokens, err = cw.blob(tok); err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	idx.Tokens.DType, idx.Tokens.Shape = tensor.Int32.String(), []int{len(tokens)}
	for li := range layers {
		var e cacheEntry
		var serr error
		err = tensor.Try(func() {
			var st State
			var owned bool
			if st, owned, serr = state(li); serr != nil {
				return
			}
			if owned {
				defer st.Free()
			}
			e = cacheEntry{Kind: st.Kind, Offset: st.Offset, Idx: st.Idx, MaxSize: st.MaxSize, Keep: st.Keep,
				GroupSize: st.GroupSize, Bits: st.Bits, ValueBits: st.ValueBits}
			for _, a := range st.Arrays {
				ae, werr := cw.blob(a.Bytes())
				if werr != nil {
					panic(werr)
				}
				ae.DType, ae.Shape = a.DType().String(), append([]int(nil), a.Shape()...)
				e.Arrays = append(e.Arrays, ae)
			}
		})
		if serr != nil {
			err = fmt.Errorf("kv save %s: %w", path, serr)
			return err
		}
		if err != nil {
			return fmt.Errorf("kv save %s: layer %d: %w", path, li, err)
		}
		idx.Caches = append(idx.Caches, e)
	}
	js, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	if err = cw.pad(8); err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	indexOff := cw.pos
	if _, err = cw.Write(js); err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	var tr [trailerSize]byte
	binary.LittleEndian.PutUint64(tr[0:], uint64(indexOff))
	binary.LittleEndian.PutUint64(tr[8:], uint64(len(js)))
	binary.LittleEndian.PutUint32(tr[16:], crc32.Checksum(js, castagnoli))
	copy(tr[24:], endMagic[:])
	if _, err = cw.Write(tr[:]); err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	if err = cw.w.Flush(); err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("kv save %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("kv save: %w", err)
	}
	return nil
}

// mapping is a file's read-only memory map shared by the loaded caches that
// borrow from it; the last one to let go unmaps it.
type mapping struct {
	data  []byte
	refs  atomic.Int32
	unmap func([]byte) error
}

func (m *mapping) acquire() *mapping {
	if m != nil {
		m.refs.Add(1)
	}
	return m
}

func (m *mapping) release() {
	if m != nil && m.refs.Add(-1) == 0 && m.unmap != nil {
		m.unmap(m.data)
		m.data = nil
	}
}

// Load maps the file at path and returns its caches, whose arrays borrow
// the mapping (no copy; the first write to a cache copies what it needs).
// The mapping is released when the last cache loaded from it (or cloned
// from one) is freed; State views taken from a loaded cache must not
// outlive it. Every array and the index are checksummed before use. A file
// that is not a cache file, of another version, truncated, corrupt, or for
// another model or layer count than want says, is refused with an error
// wrapping ErrNotCacheFile, ErrVersion, ErrTruncated, ErrCorrupt,
// ErrModelMismatch or ErrLayerMismatch.
func Load(path string, want Expect) (*Saved, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("kv load: %w", err)
	}
	m := &mapping{data: data, unmap: unmap}
	m.refs.Store(1)
	defer m.release() // Load's own reference
	idx, err := parseFile(data)
	if err != nil {
		return nil, fmt.Errorf("kv load %s: %w", path, err)
	}
	if want.ModelID != "" && idx.ModelID != want.ModelID {
		return nil, fmt.Errorf("kv load %s: %w: made for %q, want %q", path, ErrModelMismatch, idx.ModelID, want.ModelID)
	}
	if want.Layers > 0 && idx.Layers != want.Layers {
		return nil, fmt.Errorf("kv load %s: %w: %d layers, want %d", path, ErrLayerMismatch, idx.Layers, want.Layers)
	}
	be := want.Backend
	if be == nil {
		be = tensor.Default()
	}
	out := &Saved{Meta: Meta{ModelID: idx.ModelID, Extra: idx.Extra}}
	tok := data[idx.Tokens.Offset : idx.Tokens.Offset+idx.Tokens.NBytes]
	out.Tokens = make([]int32, len(tok)/4)
	for i := range out.Tokens {
		out.Tokens[i] = int32(binary.LittleEndian.Uint32(tok[4*i:]))
	}
	err = tensor.Try(func() {
		for li, e := range idx.Caches {
			c, cerr := newCacheFor(e)
			if cerr != nil {
				panic(fmt.Errorf("%w: layer %d: %w", ErrCorrupt, li, cerr))
			}
			st := State{Kind: e.Kind, Offset: e.Offset, Idx: e.Idx, MaxSize: e.MaxSize, Keep: e.Keep, GroupSize: e.GroupSize, Bits: e.Bits, ValueBits: e.ValueBits}
			for _, a := range e.Arrays {
				dt, _ := tensor.ParseDType(a.DType)
				st.Arrays = append(st.Arrays, tensor.FromBytesOn(be, data[a.Offset:a.Offset+a.NBytes], a.Shape, dt, true))
			}
			serr := c.SetState(st)
			st.Free()
			if serr != nil {
				panic(fmt.Errorf("%w: layer %d: %w", ErrCorrupt, li, serr))
			}
			if len(e.Arrays) > 0 {
				setPin(c, m.acquire())
			}
			if e.Kind == KindKV || e.Kind == KindQuantized || e.Kind == KindTurbo || e.Kind == KindTurboQJL {
				// the state's arrays are the live prefix; the offset is theirs
				if c.Offset() != e.Offset {
					c.Free()
					panic(fmt.Errorf("%w: layer %d: offset %d for %d stored tokens", ErrCorrupt, li, e.Offset, c.Offset()))
				}
			}
			out.Caches = append(out.Caches, c)
		}
	})
	if err != nil {
		out.Free()
		return nil, fmt.Errorf("kv load %s: %w", path, err)
	}
	return out, nil
}

func setPin(c Cache, m *mapping) {
	if p, ok := c.(interface{ setPin(*mapping) }); ok {
		p.setPin(m)
		return
	}
	m.release()
}

func newCacheFor(e cacheEntry) (Cache, error) {
	if c, ok, err := turboCacheFor(e.Kind, e.MaxSize, e.Keep, e.Bits, e.ValueBits); ok {
		return c, err
	}
	switch e.Kind {
	case KindKV:
		return NewKVCache(), nil
	case KindQuantized:
		return NewQuantizedKVCache(e.GroupSize, e.Bits)
	case KindRotating:
		if e.MaxSize <= 0 || e.Keep < 0 || e.Keep >= e.MaxSize {
			return nil, fmt.Errorf("rotating cache with max size %d, keep %d", e.MaxSize, e.Keep)
		}
		return NewRotatingKVCache(e.MaxSize, e.Keep), nil
	case KindQuantizedRotating:
		return NewQuantizedRotatingKVCache(e.MaxSize, e.Keep, e.GroupSize, e.Bits)
	case KindRecurrent:
		return NewRecurrentCache(), nil
	}
	return nil, fmt.Errorf("unknown cache kind %q", e.Kind)
}

// parseFile validates the structure and checksums of a whole file.
func parseFile(data []byte) (*index, error) { return parseIndex(data, true) }

// parseIndex checks the file's framing, index and token ids, and, when
// arrays is set, every array's placement and checksum.
func parseIndex(data []byte, arrays bool) (*index, error) {
	if len(data) < 16 || [8]byte(data[:8]) != fileMagic {
		return nil, ErrNotCacheFile
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != fileVersion {
		return nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrVersion, v, fileVersion)
	}
	size := int64(len(data))
	if size < pageSize+trailerSize || [8]byte(data[size-8:]) != endMagic {
		return nil, fmt.Errorf("%w: no end marker (%d bytes)", ErrTruncated, size)
	}
	tr := data[size-trailerSize:]
	off := int64(binary.LittleEndian.Uint64(tr[0:]))
	n := int64(binary.LittleEndian.Uint64(tr[8:]))
	if off < pageSize || n <= 0 || off > size-trailerSize || n > size-trailerSize-off {
		return nil, fmt.Errorf("%w: index at %d+%d in a %d-byte file", ErrCorrupt, off, n, size)
	}
	js := data[off : off+n]
	if crc32.Checksum(js, castagnoli) != binary.LittleEndian.Uint32(tr[16:]) {
		return nil, fmt.Errorf("%w: index checksum mismatch", ErrCorrupt)
	}
	var idx index
	if err := json.Unmarshal(js, &idx); err != nil {
		return nil, fmt.Errorf("%w: index: %v", ErrCorrupt, err)
	}
	if idx.Version != fileVersion || idx.Layers != len(idx.Caches) {
		return nil, fmt.Errorf("%w: index version %d, %d layers for %d caches", ErrCorrupt, idx.Version, idx.Layers, len(idx.Caches))
	}
	end := int64(pageSize) // arrays lie in order, page-aligned, without overlap, before the index
	check := func(what string, a arrayEntry, dt tensor.DType, sum bool) error {
		elems := int64(1)
		for _, d := range a.Shape {
			if d < 0 || (d > 0 && elems > (1<<40)/int64(d)) {
				return fmt.Errorf("%w: %s has shape %v", ErrCorrupt, what, a.Shape)
			}
			elems *= int64(d)
		}
		if a.NBytes != elems*int64(dt.Size()) || a.Offset%pageSize != 0 || a.Offset < end || a.NBytes > off-a.Offset {
			return fmt.Errorf("%w: %s at %d+%d (shape %v) does not fit", ErrCorrupt, what, a.Offset, a.NBytes, a.Shape)
		}
		if sum && crc32.Checksum(data[a.Offset:a.Offset+a.NBytes], castagnoli) != a.CRC {
			return fmt.Errorf("%w: %s checksum mismatch", ErrCorrupt, what)
		}
		end = a.Offset + a.NBytes
		return nil
	}
	if len(idx.Tokens.Shape) != 1 {
		return nil, fmt.Errorf("%w: token ids of shape %v", ErrCorrupt, idx.Tokens.Shape)
	}
	if err := check("token ids", idx.Tokens, tensor.Int32, true); err != nil {
		return nil, err
	}
	for li, c := range idx.Caches {
		for ai, a := range c.Arrays {
			dt, err := tensor.ParseDType(a.DType)
			if err != nil || len(a.Shape) != 4 {
				return nil, fmt.Errorf("%w: layer %d array %d: dtype %q, shape %v", ErrCorrupt, li, ai, a.DType, a.Shape)
			}
			if err := check(fmt.Sprintf("layer %d array %d", li, ai), a, dt, arrays); err != nil {
				return nil, err
			}
		}
	}
	return &idx, nil
}

// Peek reads what a cache file at path covers — its token ids and
// metadata — without loading its caches or checksumming their arrays (the
// framing, the index and the token ids are checked): enough to index a
// folder of cache files cheaply. Load still verifies everything.
func Peek(path string) (tokens []int32, meta Meta, err error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, Meta{}, fmt.Errorf("kv peek: %w", err)
	}
	if unmap != nil {
		defer unmap(data)
	}
	idx, err := parseIndex(data, false)
	if err != nil {
		return nil, Meta{}, fmt.Errorf("kv peek %s: %w", path, err)
	}
	tok := data[idx.Tokens.Offset : idx.Tokens.Offset+idx.Tokens.NBytes]
	tokens = make([]int32, len(tok)/4)
	for i := range tokens {
		tokens[i] = int32(binary.LittleEndian.Uint32(tok[4*i:]))
	}
	return tokens, Meta{ModelID: idx.ModelID, Extra: idx.Extra}, nil
}

// readAll is the fallback where files cannot be mapped.
func readAll(path string) ([]byte, func([]byte) error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	return b, nil, err
}
