package grammar

import (
	"bytes"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"
	"unicode/utf8"
)

// tokenTrie is a byte trie of token strings laid out in pre-order: node i
// has byte b[i] at depth[i] (1-based), its subtree is i+1..next[i]-1, and
// the ids of tokens spelled by the path to it are ids[lo[i]:lo[i+1]].
// Sorted order lets the mask walk share the work of common prefixes and
// skip whole subtrees once a prefix is rejected.
type tokenTrie struct {
	b     []byte
	depth []uint16
	next  []int32
	lo    []int32
	ids   []int32
	// Subtree summaries (vocabulary trie only): the ASCII bytes occurring
	// below node i (sigLo: 0x00-0x3F, sigHi: 0x40-0x7F) and flags (bit 0:
	// a byte >= 0x80 occurs below; bit 1: every token's bytes below i
	// form valid UTF-8, possibly cut short). They let the mask walk accept
	// a whole subtree at once when a parser node loops on all its bytes.
	sigLo, sigHi []uint64
	flags        []uint8
	maxBelow     []uint16 // longest token suffix below node i, in bytes
	maxDepth     int
}

type tokStr struct {
	s  []byte
	id int32
}

func buildTrie(toks []tokStr) *tokenTrie { return buildTrieSig(toks, false) }

// validTruncatedUTF8 reports whether s is valid UTF-8 except that its
// last character may be cut short.
func validTruncatedUTF8(s []byte) bool {
	for len(s) > 0 {
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n <= 1 {
			// Accept an incomplete but so-far-valid final sequence.
			return len(s) < 4 && !utf8.FullRune(s) && validPrefix(s)
		}
		s = s[n:]
	}
	return true
}

func validPrefix(s []byte) bool {
	// s is a proper prefix of some valid encoding.
	for c := 0x80; c < 0xC0; c++ {
		t := append(append([]byte(nil), s...), byte(c))
		if utf8.FullRune(t) {
			if r, _ := utf8.DecodeRune(t); r != utf8.RuneError {
				return true
			}
		} else if validPrefix(t) {
			return true
		}
	}
	return false
}

func buildTrieSig(toks []tokStr, sig bool) *tokenTrie {
	sort.SliceStable(toks, func(i, j int) bool { return bytes.Compare(toks[i].s, toks[j].s) < 0 })
	t := &tokenTrie{}
	var path []int32 // trie node per depth-1
	var prev []byte
	for _, tk := range toks {
		l := 0
		for l < len(prev) && l < len(tk.s) && prev[l] == tk.s[l] {
			l++
		}
		for len(path) > l {
			t.next[path[len(path)-1]] = int32(len(t.b))
			path = path[:len(path)-1]
		}
		for d := l; d < len(tk.s); d++ {
			path = append(path, int32(len(t.b)))
			t.b = append(t.b, tk.s[d])
			t.depth = append(t.depth, uint16(d+1))
			t.next = append(t.next, 0)
			t.lo = append(t.lo, int32(len(t.ids)))
		}
		t.ids = append(t.ids, tk.id)
		prev = tk.s
		if sig {
			for len(t.sigLo) < len(t.b) {
				t.sigLo = append(t.sigLo, 0)
				t.sigHi = append(t.sigHi, 0)
				t.flags = append(t.flags, 2)
			}
			var lo, hi uint64
			non := false
			ascii := true
			for _, c := range tk.s {
				if c >= 0x80 {
					ascii = false
				}
			}
			for k := len(tk.s) - 1; k >= 1; k-- {
				c := tk.s[k]
				switch {
				case c < 0x40:
					lo |= 1 << c
				case c < 0x80:
					hi |= 1 << (c - 0x40)
				default:
					non = true
				}
				nd := path[k-1]
				t.sigLo[nd] |= lo
				t.sigHi[nd] |= hi
				if non {
					t.flags[nd] |= 1
				}
				if !ascii && !validTruncatedUTF8(tk.s[k:]) {
					t.flags[nd] &^= 2
				}
			}
		}
	}
	for _, p := range path {
		t.next[p] = int32(len(t.b))
	}
	t.lo = append(t.lo, int32(len(t.ids)))
	for _, d := range t.depth {
		if int(d) > t.maxDepth {
			t.maxDepth = int(d)
		}
	}
	if sig {
		t.maxBelow = make([]uint16, len(t.b))
		for i := len(t.b) - 1; i >= 0; i-- {
			// children of i: i+1, next[i+1], ... until next[i]
			var m uint16
			for c := i + 1; c < int(t.next[i]); c = int(t.next[c]) {
				if v := t.maxBelow[c] + 1; v > m {
					m = v
				}
			}
			t.maxBelow[i] = m
		}
	}
	// lo[i] currently is the count before node i was created; tokens of a
	// node are appended right after it is created or revisited, and since
	// input is sorted, ids of node i are exactly those appended while i was
	// the deepest node, i.e. ids[lo[i]:lo[i+1]].
	return t
}

func (t *tokenTrie) tokens(i int) []int32 { return t.ids[t.lo[i]:t.lo[i+1]] }

// TokenizerInfo is a vocabulary prepared for masking: the byte-sorted trie
// of its ordinary tokens plus its stop tokens. Build it once per tokenizer
// and share it between compiled grammars.
type TokenizerInfo struct {
	size  int
	words int
	trie  *tokenTrie
	stop  []int32
	bytes [][]byte
	spec  []bool
}

// NewTokenizerInfo prepares v. Special tokens and tokens without bytes are
// left out of the trie: no grammar ever allows them (stop tokens excepted).
func NewTokenizerInfo(v Vocabulary) (*TokenizerInfo, error) {
	n := v.Size()
	if n <= 0 {
		return nil, fmt.Errorf("grammar: empty vocabulary")
	}
	ti := &TokenizerInfo{size: n, words: (n + 31) / 32, bytes: make([][]byte, n), spec: make([]bool, n)}
	toks := make([]tokStr, 0, n)
	for id := 0; id < n; id++ {
		ti.spec[id] = v.IsSpecial(id)
		b := v.TokenBytes(id)
		ti.bytes[id] = b
		if ti.spec[id] || len(b) == 0 {
			continue
		}
		if len(b) > 0xFFFF {
			return nil, fmt.Errorf("grammar: token %d is %d bytes long", id, len(b))
		}
		toks = append(toks, tokStr{b, int32(id)})
	}
	for _, s := range v.StopTokens() {
		if s < 0 || s >= n {
			return nil, fmt.Errorf("grammar: stop token %d outside vocabulary of %d", s, n)
		}
		ti.stop = append(ti.stop, int32(s))
	}
	ti.trie = buildTrieSig(toks, true)
	return ti, nil
}

// VocabSize is the number of token ids.
func (ti *TokenizerInfo) VocabSize() int { return ti.size }

// BitmaskWords is the fewest int32 words a bitmask for this vocabulary needs.
func (ti *TokenizerInfo) BitmaskWords() int { return ti.words }

func (ti *TokenizerInfo) isStop(id int) bool {
	for _, s := range ti.stop {
		if int(s) == id {
			return true
		}
	}
	return false
}

// nodeMask is the adaptive token-mask cache entry of one automaton node:
// the tokens accepted whatever the stack below holds (as a bitset when
// many, a list when few) and a trie of the uncertain tokens, which depend
// on the stack and are checked at run time. Every other token is rejected.
type nodeMask struct {
	acceptBits []uint32
	acceptList []int32
	unc        *tokenTrie
	nAccept    int
	nUnc       int
}

// computeNodeMask walks the whole vocabulary trie from node n with an
// unknown stack below it.
func (cg *CompiledGrammar) computeNodeMask(n int32, st *stepper) *nodeMask {
	g, tr := cg.g, cg.ti.trie
	st.arena = true
	st.slabPos = 0
	maxDepth := tr.maxDepth
	sets := make([][]pos, maxDepth+1)
	// esc[d]: the node's rule may end right after byte d. uncOK[d]: some
	// earlier end e < d is followed by a byte the rule's callers accept, so
	// the token may go on in the caller and must be checked at run time.
	esc := make([]bool, maxDepth+1)
	uncOK := make([]bool, maxDepth+1)
	follow := g.follow[g.nodeRule[n]]
	sets[0] = []pos{{n, bottom}}
	var accept []int32
	var unc []tokStr
	var path = make([]byte, maxDepth+1)
	markUnc := func(i int) {
		d := int(tr.depth[i])
		for _, id := range tr.tokens(i) {
			unc = append(unc, tokStr{append([]byte(nil), path[:d]...), id})
		}
	}
	nb := len(tr.b)
	for i := 0; i < nb; {
		d := int(tr.depth[i])
		prev := sets[d-1]
		path[d-1] = tr.b[i]
		var cur []pos
		if len(prev) > 0 {
			// Fast path: one position moving to a node without calls or end.
			if len(prev) == 1 {
				p := prev[0]
				t := g.trans[int(p.node)*g.nclass+int(g.class[tr.b[i]])]
				if t < 0 {
					cur = sets[d][:0]
					st.escaped = false
				} else if len(g.calls[t]) == 0 && !g.final[t] {
					cur = append(sets[d][:0], pos{t, p.parent})
					st.escaped = false
				} else {
					cur = st.advance(prev, tr.b[i], sets[d][:0])
				}
			} else {
				cur = st.advance(prev, tr.b[i], sets[d][:0])
			}
		} else {
			cur = sets[d][:0]
			st.escaped = false
		}
		sets[d] = cur
		esc[d] = st.escaped
		uncOK[d] = uncOK[d-1] || (d >= 2 && esc[d-1] && follow.has(tr.b[i]))
		toks := tr.tokens(i)
		if len(cur) == 0 {
			// Nothing inside the node's rule goes on: the token here is
			// accepted if the rule ended exactly at its last byte; deeper
			// tokens are uncertain if the rule could have ended earlier
			// and the next byte may follow the rule.
			if esc[d] {
				accept = append(accept, toks...)
			} else if uncOK[d] {
				markUnc(i)
			}
			if uncOK[d] || esc[d] {
				end := int(tr.next[i])
				for j := i + 1; j < end; j++ {
					dj := int(tr.depth[j])
					path[dj-1] = tr.b[j]
					if !uncOK[d] && dj == d+1 && !follow.has(tr.b[j]) {
						j = int(tr.next[j]) - 1
						continue
					}
					for _, id := range tr.tokens(j) {
						unc = append(unc, tokStr{append([]byte(nil), path[:dj]...), id})
					}
				}
			}
			i = int(tr.next[i])
			continue
		}
		// A node that loops on every byte below this trie node accepts
		// the whole subtree: take it in one step.
		skip := false
		for _, p := range cur {
			x := p.node
			if tr.sigLo[i]&^cg.loopLo[x] == 0 && tr.sigHi[i]&^cg.loopHi[x] == 0 &&
				(tr.flags[i]&1 == 0 || (cg.utf8Loop[x] && tr.flags[i]&2 != 0)) &&
				(cg.chainLen[x] < 0 || int(tr.maxBelow[i]) <= int(cg.chainLen[x])) {
				skip = true
				break
			}
		}
		if skip {
			accept = append(accept, tr.ids[tr.lo[i]:tr.lo[tr.next[i]]]...)
			i = int(tr.next[i])
			continue
		}
		if len(toks) > 0 {
			accept = append(accept, toks...)
		}
		i++
	}
	m := &nodeMask{nAccept: len(accept), nUnc: len(unc)}
	if len(accept) > cg.ti.size/32 {
		m.acceptBits = make([]uint32, cg.ti.words)
		for _, id := range accept {
			m.acceptBits[id>>5] |= 1 << (uint(id) & 31)
		}
	} else {
		m.acceptList = accept
	}
	if len(unc) > 0 {
		m.unc = buildTrie(unc)
	}
	st.arena = false
	return m
}

// CompiledGrammar is a Grammar bound to a vocabulary with its token-mask
// cache. It is immutable after compilation and shared by all matchers.
type CompiledGrammar struct {
	// Per node: a chain of nodes each of which moves on every byte of a
	// set to one successor (a loop when it is the node itself). The mask
	// walk accepts a vocabulary subtree at once when its bytes stay in the
	// set and its tokens are no longer than the chain (chainLen < 0:
	// unbounded). loopLo/loopHi hold the ASCII set; utf8Loop says whether
	// every multi-byte UTF-8 character also moves along the chain.
	loopLo, loopHi []uint64
	utf8Loop       []bool
	chainLen       []int32
	g              *Grammar
	ti             *TokenizerInfo
	masks          []*nodeMask
	once           []sync.Once
}

// Grammar returns the vocabulary-independent grammar.
func (cg *CompiledGrammar) Grammar() *Grammar { return cg.g }

// TokenizerInfo returns the vocabulary the grammar was compiled for.
func (cg *CompiledGrammar) TokenizerInfo() *TokenizerInfo { return cg.ti }

// CompileOptions tune CompileGrammar.
type CompileOptions struct {
	// Lazy computes a node's token-mask cache the first time a matcher
	// reaches it instead of at compile time: compile is instant, first
	// visits are slow.
	Lazy bool
	// Workers bounds the goroutines computing the cache (0: GOMAXPROCS).
	Workers int
	// Budget, when positive, bounds the time spent computing the cache at
	// compile time; nodes not reached by then are computed on first use.
	// It caps compile latency for schemas with many counted repetitions.
	Budget time.Duration
}

// CompileGrammar binds g to a vocabulary and builds the token-mask cache
// for every node that can start a token.
func CompileGrammar(g *Grammar, ti *TokenizerInfo, opt CompileOptions) *CompiledGrammar {
	cg := &CompiledGrammar{g: g, ti: ti, masks: make([]*nodeMask, len(g.final)), once: make([]sync.Once, len(g.final))}
	cg.computeChains()
	if opt.Lazy {
		return cg
	}
	var todo []int32
	for i, hb := range g.hasBytes {
		if hb {
			todo = append(todo, int32(i))
		}
	}
	w := opt.Workers
	if w <= 0 {
		w = runtime.GOMAXPROCS(0)
	}
	if w > len(todo) {
		w = len(todo)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	start := time.Now()
	for k := 0; k < w; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stepper{g: g}
			for {
				mu.Lock()
				if next >= len(todo) || (opt.Budget > 0 && time.Since(start) > opt.Budget) {
					mu.Unlock()
					return
				}
				n := todo[next]
				next++
				mu.Unlock()
				cg.once[n].Do(func() { cg.masks[n] = cg.computeNodeMask(n, st) })
			}
		}()
	}
	wg.Wait()
	return cg
}

func (cg *CompiledGrammar) mask(n int32, st *stepper) *nodeMask {
	cg.once[n].Do(func() {
		s := &stepper{g: cg.g}
		cg.masks[n] = cg.computeNodeMask(n, s)
	})
	return cg.masks[n]
}

// CacheStats summarises the token-mask cache: how many nodes, and how
// many tokens in total are accepted or left uncertain across them.
type CacheStats struct {
	Nodes, Accepted, Uncertain int
	MaxUncertain               int
}

// Stats reports the cache contents (computed nodes only when lazy).
func (cg *CompiledGrammar) Stats() CacheStats {
	var s CacheStats
	for _, m := range cg.masks {
		if m == nil {
			continue
		}
		s.Nodes++
		s.Accepted += m.nAccept
		s.Uncertain += m.nUnc
		if m.nUnc > s.MaxUncertain {
			s.MaxUncertain = m.nUnc
		}
	}
	return s
}

// computeChains fills the chain tables (see CompiledGrammar).
func (cg *CompiledGrammar) computeChains() {
	g := cg.g
	n := len(g.final)
	cg.loopLo, cg.loopHi = make([]uint64, n), make([]uint64, n)
	cg.utf8Loop, cg.chainLen = make([]bool, n), make([]int32, n)
	succ := make([]int32, n)
	state := make([]uint8, n) // 0 new, 1 in progress, 2 done
	var visit func(x int32)
	visit = func(x int32) {
		state[x] = 1
		// The successor most ASCII bytes lead to.
		count := map[int32]int{}
		best, bestN := int32(-1), 0
		for b := 0; b < 0x80; b++ {
			t := g.trans[int(x)*g.nclass+int(g.class[b])]
			if t < 0 {
				continue
			}
			count[t]++
			if count[t] > bestN || (count[t] == bestN && t == x) {
				best, bestN = t, count[t]
			}
		}
		succ[x] = best
		if best < 0 {
			state[x] = 2
			return
		}
		var lo, hi uint64
		for b := 0; b < 0x80; b++ {
			if g.trans[int(x)*g.nclass+int(g.class[b])] == best {
				if b < 0x40 {
					lo |= 1 << b
				} else {
					hi |= 1 << (b - 0x40)
				}
			}
		}
		u := g.leadsUTF8(x, best)
		// One step on these bytes is always possible; the chain goes on
		// through the successor when its set covers ours.
		cg.chainLen[x] = 1
		switch {
		case best == x:
			cg.chainLen[x] = -1
		case state[best] == 1:
		default:
			if state[best] == 0 {
				visit(best)
			}
			if l := cg.chainLen[best]; l != 0 && cg.loopLo[best]&lo == lo && cg.loopHi[best]&hi == hi && (!u || cg.utf8Loop[best]) {
				if l < 0 {
					cg.chainLen[x] = -1
				} else {
					cg.chainLen[x] = l + 1
				}
			}
		}
		cg.loopLo[x], cg.loopHi[x], cg.utf8Loop[x] = lo, hi, u
		state[x] = 2
	}
	for x := 0; x < n; x++ {
		if state[x] == 0 {
			visit(int32(x))
		}
	}
}

// leadsUTF8 reports whether every UTF-8 encoded character of two or more
// bytes leads from node x to node to.
func (g *Grammar) leadsUTF8(x, to int32) bool {
	var walk func(node int32, left int, lo, hi int) bool
	walk = func(node int32, left int, lo, hi int) bool {
		if left == 0 {
			return node == to
		}
		seen := map[uint8]bool{}
		for c := lo; c <= hi; c++ {
			cl := g.class[c]
			if seen[cl] {
				continue
			}
			seen[cl] = true
			t := g.trans[int(node)*g.nclass+int(cl)]
			if t < 0 || !walk(t, left-1, 0x80, 0xBF) {
				return false
			}
		}
		return true
	}
	for b := 0xC2; b <= 0xF4; b++ {
		t := g.trans[int(x)*g.nclass+int(g.class[b])]
		if t < 0 {
			return false
		}
		lo, hi, n := 0x80, 0xBF, 1
		switch {
		case b >= 0xF0:
			n = 3
		case b >= 0xE0:
			n = 2
		}
		switch b {
		case 0xE0:
			lo = 0xA0
		case 0xED:
			hi = 0x9F
		case 0xF0:
			lo = 0x90
		case 0xF4:
			hi = 0x8F
		}
		if !walk(t, n, lo, hi) {
			return false
		}
	}
	return true
}
