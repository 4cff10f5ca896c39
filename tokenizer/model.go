package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// model turns one pre-tokenized piece into ids (HF "model").
type model interface {
	tokenize(s string, dst []int) []int
	tokenID(tok string) (int, bool)
	idToken(id int) (string, bool)
	size() int  // one more than the largest id
	count() int // number of entries (HF's get_vocab_size)
}

// vocab is a token↔id table.
type vocab struct {
	ids    map[string]int
	tokens []string // by id; "" where unassigned
}

func (v *vocab) tokenID(tok string) (int, bool) { id, ok := v.ids[tok]; return id, ok }
func (v *vocab) idToken(id int) (string, bool) {
	if id < 0 || id >= len(v.tokens) {
		return "", false
	}
	t := v.tokens[id]
	if t == "" {
		if _, ok := v.ids[""]; !ok {
			return "", false
		}
	}
	return t, true
}
func (v *vocab) size() int  { return len(v.tokens) }
func (v *vocab) count() int { return len(v.ids) }

func parseVocab(raw json.RawMessage, path string) (*vocab, error) {
	// Decode with the key order irrelevant; ids come from the values.
	if !present(raw) {
		return nil, fieldErr(path, fmt.Errorf("missing"))
	}
	m, err := fastVocab(raw)
	if err != nil {
		// The fast scanner is strict; encoding/json decides (and words the error).
		m = nil
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fieldErr(path, err)
		}
	}
	v := &vocab{ids: m}
	max := -1
	for tok, id := range m {
		if id < 0 {
			return nil, fieldErr(path, fmt.Errorf("token %q has negative id %d", tok, id))
		}
		if id > max {
			max = id
		}
	}
	if max > 1<<26 {
		return nil, fieldErr(path, fmt.Errorf("id %d is implausibly large", max))
	}
	v.tokens = make([]string, max+1)
	for tok, id := range m {
		v.tokens[id] = tok
	}
	return v, nil
}

// bpe is HF's BPE model (dropout unsupported: it is for training).
type bpe struct {
	*vocab
	merges       map[uint64]bpeMerge // (left id << 32 | right id) → merge
	unk          int                 // -1 when none
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	byteIDs      [256]int32
	// spmSplit enables cutting long SentencePiece-style pieces before each
	// run of "▁": no merge can cross such a cut when no token contains the
	// preceding character followed by "▁" (glued holds the characters that
	// do), so the pieces can be merged, and cached, one word at a time.
	spmSplit bool
	glued    map[rune]bool
	cache    wordCache // merged words shorter than cacheMaxLen
}

type bpeMerge struct {
	rank  int32
	newID int32
}

const (
	cacheMaxLen     = 256
	cacheMaxEntries = 1 << 17
)

func parseBPE(c *rawModel, path string) (*bpe, error) {
	v, err := parseVocab(c.Vocab, path+".vocab")
	if err != nil {
		return nil, err
	}
	if c.Dropout != nil && *c.Dropout != 0 {
		return nil, fieldErr(path+".dropout", fmt.Errorf("BPE dropout %v is not supported (it is a training feature)", *c.Dropout))
	}
	b := &bpe{vocab: v, unk: -1, merges: make(map[uint64]bpeMerge)}
	if c.UnkToken != nil {
		id, ok := v.ids[*c.UnkToken]
		if !ok {
			return nil, fieldErr(path+".unk_token", fmt.Errorf("%q is not in the vocab", *c.UnkToken))
		}
		b.unk = id
	}
	b.fuseUnk = c.FuseUnk
	b.byteFallback = c.ByteFallback
	b.ignoreMerges = c.IgnoreMerges
	if c.Prefix != nil {
		b.prefix = *c.Prefix
	}
	if c.Suffix != nil {
		b.suffix = *c.Suffix
	}
	for i := range b.byteIDs {
		b.byteIDs[i] = -1
		if id, ok := v.ids[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.byteIDs[i] = int32(id)
		}
	}
	b.initSPMSplit()
	merges, err := parseMerges(c.Merges, path+".merges")
	if err != nil {
		return nil, err
	}
	var buf []byte
	for i, m := range merges {
		a, ok := v.ids[m[0]]
		if !ok {
			return nil, fieldErr(fmt.Sprintf("%s.merges[%d]", path, i), fmt.Errorf("token %q is not in the vocab", m[0]))
		}
		bb, ok := v.ids[m[1]]
		if !ok {
			return nil, fieldErr(fmt.Sprintf("%s.merges[%d]", path, i), fmt.Errorf("token %q is not in the vocab", m[1]))
		}
		right := m[1]
		if len(b.prefix) > 0 && strings.HasPrefix(right, b.prefix) {
			right = right[len(b.prefix):]
		}
		buf = append(append(buf[:0], m[0]...), right...)
		n, ok := v.ids[string(buf)]
		if !ok {
			return nil, fieldErr(fmt.Sprintf("%s.merges[%d]", path, i), fmt.Errorf("merged token %q is not in the vocab", buf))
		}
		b.merges[uint64(a)<<32|uint64(bb)] = bpeMerge{int32(i), int32(n)}
	}
	return b, nil
}

const spmSpace = '\u2581' // ▁

func (b *bpe) initSPMSplit() {
	if b.prefix != "" || b.suffix != "" || b.ignoreMerges {
		return
	}
	if _, ok := b.ids[string(spmSpace)]; !ok {
		return
	}
	b.glued = map[rune]bool{}
	for tok := range b.ids {
		prev := spmSpace
		for _, r := range tok {
			if r == spmSpace && prev != spmSpace {
				b.glued[prev] = true
			}
			prev = r
		}
	}
	b.spmSplit = true
}

// splitSPM calls fn for each word of s: cuts go before a run of "▁" whose
// preceding character is a single-character token that never precedes "▁"
// inside a token.
func (b *bpe) splitSPM(s string, dst []int) []int {
	start := 0
	prev := spmSpace
	prevLen := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == spmSpace && prev != spmSpace && i > start && !b.glued[prev] {
			if _, ok := b.ids[s[i-prevLen:i]]; ok {
				dst = b.tokenizeWord(s[start:i], dst)
				start = i
			}
		}
		prev, prevLen = r, n
		i += n
	}
	return b.tokenizeWord(s[start:], dst)
}

// parseMerges accepts both serializations: ["a b", ...] and [["a","b"], ...].
func parseMerges(raw json.RawMessage, path string) ([][2]string, error) {
	if !present(raw) {
		return nil, fieldErr(path, fmt.Errorf("missing"))
	}
	if out, err := fastMerges(raw); err == nil {
		return out, nil
	}
	// Slow path, for a precise error.
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fieldErr(path, err)
	}
	out := make([][2]string, 0, len(items))
	for i, it := range items {
		it = bytes.TrimSpace(it)
		if len(it) > 0 && it[0] == '"' {
			var s string
			if err := json.Unmarshal(it, &s); err != nil {
				return nil, fieldErr(fmt.Sprintf("%s[%d]", path, i), err)
			}
			if strings.HasPrefix(s, "#version") {
				continue
			}
			parts := strings.Split(s, " ")
			if len(parts) != 2 {
				return nil, fieldErr(fmt.Sprintf("%s[%d]", path, i), fmt.Errorf("want two space-separated tokens, got %q", s))
			}
			out = append(out, [2]string{parts[0], parts[1]})
			continue
		}
		var pair []string
		if err := json.Unmarshal(it, &pair); err != nil || len(pair) != 2 {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", path, i), fmt.Errorf("want \"a b\" or [\"a\", \"b\"], got %s", truncate(string(it), 60)))
		}
		out = append(out, [2]string{pair[0], pair[1]})
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// wordCache maps words to their merged ids, like HF's BPE cache. It is
// sharded to keep lock contention low when goroutines share a tokenizer.
type wordCache struct {
	shards [16]cacheShard
	n      atomic.Int64 // entries, all shards
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int
}

func (c *wordCache) shard(s string) *cacheShard {
	h := uint(len(s))
	if len(s) > 0 {
		h = h*31 + uint(s[0]) + uint(s[len(s)-1])*7
	}
	return &c.shards[h%uint(len(c.shards))]
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	dead       bool
}

// mergeItem is a candidate merge of the symbol at pos with the one after it.
// left and right record the pair's ids so that a stale entry is recognized
// without another map lookup.
type mergeItem struct {
	pos         int32
	rank        int32
	newID       int32
	left, right int32
}

func (a mergeItem) less(b mergeItem) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// mergeHeap is a binary min-heap ordered by (rank, pos), like the
// BinaryHeap HF merges with.
type mergeHeap []mergeItem

func (h *mergeHeap) push(x mergeItem) {
	*h = append(*h, x)
	q := *h
	i := len(q) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeItem {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && q[r].less(q[l]) {
			m = r
		}
		if !q[m].less(q[i]) {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		j := i
		for {
			l := 2*j + 1
			if l >= len(h) {
				break
			}
			m := l
			if r := l + 1; r < len(h) && h[r].less(h[l]) {
				m = r
			}
			if !h[m].less(h[j]) {
				break
			}
			h[j], h[m] = h[m], h[j]
			j = m
		}
	}
}

type bpeScratch struct {
	syms []symbol
	heap mergeHeap
	buf  []byte
}

var scratchPool = sync.Pool{New: func() any { return new(bpeScratch) }}

func (b *bpe) tokenize(s string, dst []int) []int {
	if s == "" {
		return dst
	}
	if b.ignoreMerges {
		if id, ok := b.ids[s]; ok {
			return append(dst, id)
		}
	}
	if b.spmSplit {
		return b.splitSPM(s, dst)
	}
	return b.tokenizeWord(s, dst)
}

// tokenizeWord merges one word, through the cache for short words.
func (b *bpe) tokenizeWord(s string, dst []int) []int {
	if len(s) >= cacheMaxLen {
		return b.merge(s, dst)
	}
	sh := b.cache.shard(s)
	sh.mu.RLock()
	v, ok := sh.m[s]
	sh.mu.RUnlock()
	if ok {
		return append(dst, v...)
	}
	start := len(dst)
	dst = b.merge(s, dst)
	if b.cache.n.Load() < cacheMaxEntries {
		sh.mu.Lock()
		if sh.m == nil {
			sh.m = make(map[string][]int)
		}
		if _, ok := sh.m[s]; !ok {
			sh.m[strings.Clone(s)] = append([]int(nil), dst[start:]...)
			b.cache.n.Add(1)
		}
		sh.mu.Unlock()
	}
	return dst
}

// merge is HF's BPE::merge_word followed by Word::merge_all.
func (b *bpe) merge(s string, dst []int) []int {
	sc := scratchPool.Get().(*bpeScratch)
	defer scratchPool.Put(sc)
	syms := sc.syms[:0]
	add := func(id int) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: int32(id), prev: n - 1, next: n + 1})
	}
	unkPending := false
	flushUnk := func() {
		if unkPending {
			add(b.unk)
			unkPending = false
		}
	}
	for i := 0; i < len(s); {
		_, n := utf8.DecodeRuneInString(s[i:])
		ch := s[i : i+n]
		key := ch
		if (i > 0 && b.prefix != "") || (i+n == len(s) && b.suffix != "") {
			buf := sc.buf[:0]
			if i > 0 {
				buf = append(buf, b.prefix...)
			}
			buf = append(buf, ch...)
			if i+n == len(s) {
				buf = append(buf, b.suffix...)
			}
			sc.buf = buf
			key = string(buf)
		}
		i += n
		if id, ok := b.ids[key]; ok {
			flushUnk()
			add(id)
			continue
		}
		if b.byteFallback {
			all := true
			for k := 0; k < len(key); k++ {
				if b.byteIDs[key[k]] < 0 {
					all = false
					break
				}
			}
			if all {
				for k := 0; k < len(key); k++ {
					add(int(b.byteIDs[key[k]]))
				}
				continue
			}
		}
		if b.unk >= 0 {
			if unkPending && !b.fuseUnk {
				add(b.unk)
			}
			unkPending = true
		}
	}
	flushUnk()
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		l, r := syms[i].id, syms[i+1].id
		if m, ok := b.merges[uint64(uint32(l))<<32|uint64(uint32(r))]; ok {
			h = append(h, mergeItem{int32(i), m.rank, m.newID, l, r})
		}
	}
	h.init()
	for len(h) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.dead || cur.next < 0 {
			continue
		}
		// An entry is stale when its pair changed, unless (as HF checks) the
		// current pair merges into the same token.
		if cur.id != top.left || syms[cur.next].id != top.right {
			m, ok := b.merges[uint64(uint32(cur.id))<<32|uint64(uint32(syms[cur.next].id))]
			if !ok || m.newID != top.newID {
				continue
			}
		}
		nextPos := cur.next
		right := syms[nextPos]
		cur.id = top.newID
		cur.next = right.next
		syms[nextPos].dead = true
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			p := syms[cur.prev].id
			if m, ok := b.merges[uint64(uint32(p))<<32|uint64(uint32(cur.id))]; ok {
				h.push(mergeItem{cur.prev, m.rank, m.newID, p, cur.id})
			}
		}
		if cur.next >= 0 {
			nx := syms[cur.next].id
			if m, ok := b.merges[uint64(uint32(cur.id))<<32|uint64(uint32(nx))]; ok {
				h.push(mergeItem{top.pos, m.rank, m.newID, cur.id, nx})
			}
		}
	}
	for i := range syms {
		if !syms[i].dead {
			dst = append(dst, int(syms[i].id))
		}
	}
	sc.syms, sc.heap = syms, h
	return dst
}

// wordLevel is HF's WordLevel model: the whole piece is one token or unk.
type wordLevel struct {
	*vocab
	unk int
}

func (w *wordLevel) tokenize(s string, dst []int) []int {
	if id, ok := w.ids[s]; ok {
		return append(dst, id)
	}
	if w.unk >= 0 {
		return append(dst, w.unk)
	}
	return dst
}

// wordPiece is HF's WordPiece model: greedy longest-match-first.
type wordPiece struct {
	*vocab
	unk      int
	prefix   string
	maxChars int
}

func (w *wordPiece) tokenize(s string, dst []int) []int {
	if utf8.RuneCountInString(s) > w.maxChars {
		return append(dst, w.unk)
	}
	start := len(dst)
	for i := 0; i < len(s); {
		end := len(s)
		found := -1
		for end > i {
			sub := s[i:end]
			if i > 0 {
				sub = w.prefix + sub
			}
			if id, ok := w.ids[sub]; ok {
				found = id
				break
			}
			_, n := utf8.DecodeLastRuneInString(s[i:end])
			end -= n
		}
		if found < 0 {
			return append(dst[:start], w.unk)
		}
		dst = append(dst, found)
		i = end
	}
	return dst
}

var modelTypes = map[string]bool{"BPE": true, "WordPiece": true, "WordLevel": true}

type rawModel struct {
	Type         string          `json:"type"`
	Vocab        json.RawMessage `json:"vocab"`
	Merges       json.RawMessage `json:"merges"`
	Dropout      *float64        `json:"dropout"`
	UnkToken     *string         `json:"unk_token"`
	Prefix       *string         `json:"continuing_subword_prefix"`
	Suffix       *string         `json:"end_of_word_suffix"`
	FuseUnk      bool            `json:"fuse_unk"`
	ByteFallback bool            `json:"byte_fallback"`
	IgnoreMerges bool            `json:"ignore_merges"`
	MaxChars     *int            `json:"max_input_chars_per_word"`
}

func parseModel(raw json.RawMessage, path string) (model, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, fieldErr(path, fmt.Errorf("missing"))
	}
	f, err := objectFields(raw)
	if err != nil {
		return nil, fieldErr(path, err)
	}
	var c rawModel
	c.Vocab, c.Merges = f["vocab"], f["merges"]
	for name, dst := range map[string]any{
		"type": &c.Type, "dropout": &c.Dropout, "unk_token": &c.UnkToken,
		"continuing_subword_prefix": &c.Prefix, "end_of_word_suffix": &c.Suffix, "fuse_unk": &c.FuseUnk,
		"byte_fallback": &c.ByteFallback, "ignore_merges": &c.IgnoreMerges, "max_input_chars_per_word": &c.MaxChars,
	} {
		if v, ok := f[name]; ok && present(v) {
			if err := json.Unmarshal(v, dst); err != nil {
				return nil, fieldErr(path+"."+name, err)
			}
		}
	}
	if c.Type == "" && len(c.Merges) > 0 {
		c.Type = "BPE" // older files omit the type
	}
	switch c.Type {
	case "BPE":
		return parseBPE(&c, path)
	case "WordLevel", "WordPiece":
		v, err := parseVocab(c.Vocab, path+".vocab")
		if err != nil {
			return nil, err
		}
		unk := -1
		if c.UnkToken != nil {
			id, ok := v.ids[*c.UnkToken]
			if !ok {
				return nil, fieldErr(path+".unk_token", fmt.Errorf("%q is not in the vocab", *c.UnkToken))
			}
			unk = id
		}
		if c.Type == "WordLevel" {
			return &wordLevel{v, unk}, nil
		}
		if unk < 0 {
			return nil, fieldErr(path+".unk_token", fmt.Errorf("WordPiece needs an unk_token"))
		}
		w := &wordPiece{vocab: v, unk: unk, prefix: "##", maxChars: 100}
		if c.Prefix != nil {
			w.prefix = *c.Prefix
		}
		if c.MaxChars != nil {
			w.maxChars = *c.MaxChars
		}
		return w, nil
	}
	return nil, typeErr(path, "model", c.Type, modelTypes)
}
