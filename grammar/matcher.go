package grammar

import (
	"errors"
	"fmt"
)

// TokenMatcher is what a generation loop needs from a grammar: it is the
// interface generate consumes (defined here so generate can depend on it
// without naming this package's concrete type; *Matcher implements it).
//
// Per step: FillNextTokenBitmask before sampling (it may run while the
// model's forward pass is in flight), AcceptToken with the sampled id.
// JumpForward gives text the grammar forces next, which a loop may
// tokenize and feed in one forward pass. Rollback undoes accepted tokens
// (speculative decoding); Fork copies the state for another sequence.
type TokenMatcher interface {
	AcceptToken(id int) bool
	FillNextTokenBitmask(mask []int32) error
	IsCompleted() bool
	IsTerminated() bool
	Rollback(n int) error
	JumpForward() string
	Reset()
	Fork() TokenMatcher
}

type mstate struct {
	pos        []pos
	done       bool
	terminated bool
	overflow   bool // the parse outgrew maxPositions: nothing more is allowed (ErrAmbiguous)
}

// Matcher tracks one sequence's progress through a compiled grammar. It is
// not safe for concurrent use; Fork gives an independent copy.
type Matcher struct {
	cg   *CompiledGrammar
	hist []mstate // hist[0] is the initial state
	st   stepper
	fill stepper
	bufs [][]pos
	// maxRollback bounds the history kept (0: unbounded).
	maxRollback int
}

var _ TokenMatcher = (*Matcher)(nil)

// NewMatcher starts a matcher at the beginning of the grammar.
func NewMatcher(cg *CompiledGrammar) *Matcher {
	m := &Matcher{cg: cg, st: stepper{g: cg.g}, fill: stepper{g: cg.g, arena: true}}
	m.Reset()
	return m
}

// Reset returns to the start of the grammar and forgets the history.
func (m *Matcher) Reset() {
	ps := m.st.close([]pos{{m.cg.g.root, nil}}, nil)
	m.hist = append(m.hist[:0], mstate{pos: ps, done: m.st.done && !m.st.overflow, overflow: m.st.overflow})
}

func (m *Matcher) cur() *mstate { return &m.hist[len(m.hist)-1] }

// IsCompleted reports whether the text so far is a complete match, so a
// stop token is allowed now.
func (m *Matcher) IsCompleted() bool { return m.cur().done }

// IsTerminated reports whether a stop token was accepted: nothing more is.
func (m *Matcher) IsTerminated() bool { return m.cur().terminated }

// AcceptToken advances by one token. It returns false and leaves the
// state unchanged when the grammar does not allow the token here.
func (m *Matcher) AcceptToken(id int) bool {
	s := m.cur()
	ti := m.cg.ti
	if s.terminated || s.overflow || id < 0 || id >= ti.size {
		return false
	}
	if ti.isStop(id) {
		if !s.done {
			return false
		}
		m.push(mstate{terminated: true, done: true})
		return true
	}
	b := ti.bytes[id]
	if ti.spec[id] || len(b) == 0 {
		return false
	}
	ps, done, over, ok := m.advanceBytes(s.pos, b)
	if !ok {
		return false
	}
	m.push(mstate{pos: ps, done: done, overflow: over})
	return true
}

// AcceptString advances by raw text (for example a forced continuation
// from JumpForward) as one history step. It returns false and changes
// nothing when the text is not allowed.
func (m *Matcher) AcceptString(s string) bool {
	st := m.cur()
	if st.terminated || st.overflow {
		return false
	}
	if s == "" {
		return true
	}
	ps, done, over, ok := m.advanceBytes(st.pos, []byte(s))
	if !ok {
		return false
	}
	m.push(mstate{pos: ps, done: done, overflow: over})
	return true
}

func (m *Matcher) advanceBytes(cur []pos, b []byte) (ps []pos, done, overflow, ok bool) {
	for len(m.bufs) < 2 {
		m.bufs = append(m.bufs, nil)
	}
	from := cur
	for k, c := range b {
		out := m.st.advance(from, c, m.bufs[k&1][:0])
		m.bufs[k&1] = out
		done = m.st.done
		if m.st.overflow {
			// the state outgrew its bound: the bytes so far were allowed, and
			// nothing after them is (the next mask is ErrAmbiguous)
			return nil, false, true, true
		}
		if len(out) == 0 && !(done && k == len(b)-1) {
			return nil, false, false, false
		}
		from = out
	}
	return append([]pos(nil), from...), done, false, true
}

func (m *Matcher) push(s mstate) {
	m.hist = append(m.hist, s)
	if m.maxRollback > 0 && len(m.hist) > m.maxRollback+1 {
		copy(m.hist, m.hist[1:])
		m.hist = m.hist[:len(m.hist)-1]
	}
}

// SetMaxRollback bounds how many steps Rollback can undo (0: unbounded),
// capping the memory a long generation keeps.
func (m *Matcher) SetMaxRollback(n int) { m.maxRollback = n }

// Rollback undoes the last n accepted tokens (or strings).
func (m *Matcher) Rollback(n int) error {
	if n < 0 || n > len(m.hist)-1 {
		return fmt.Errorf("grammar: cannot roll back %d steps, %d available", n, len(m.hist)-1)
	}
	m.hist = m.hist[:len(m.hist)-n]
	return nil
}

// Fork returns an independent matcher in the same state. The history is
// copied; the grammar and parser stacks are shared (they are immutable).
func (m *Matcher) Fork() TokenMatcher {
	f := &Matcher{cg: m.cg, st: stepper{g: m.cg.g}, fill: stepper{g: m.cg.g, arena: true}, maxRollback: m.maxRollback}
	f.hist = append([]mstate(nil), m.hist...)
	return f
}

// ErrMaskTooSmall is returned when a bitmask has fewer words than the
// vocabulary needs.
var ErrMaskTooSmall = errors.New("grammar: bitmask smaller than the vocabulary")

// ErrAmbiguous is FillNextTokenBitmask's error once the text so far has
// more simultaneous parses than the matcher follows (maxPositions): the
// grammar is too ambiguous to constrain further, and the matcher allows
// nothing more (bounded work for any grammar, instead of time exponential
// in the text's length).
var ErrAmbiguous = fmt.Errorf("grammar: the text so far has more than %d simultaneous parses (an ambiguous grammar); nothing more can be matched", maxPositions)

// FillNextTokenBitmask writes the allowed next tokens into mask: bit i%32
// of word i/32 is 1 when token i is allowed. mask may be longer than the
// vocabulary needs (models often pad their logits); the extra bits are 0.
// After termination no token is allowed.
func (m *Matcher) FillNextTokenBitmask(mask []int32) error {
	ti := m.cg.ti
	if len(mask) < ti.words {
		return ErrMaskTooSmall
	}
	clear(mask)
	s := m.cur()
	if s.terminated {
		return nil
	}
	if s.overflow {
		return ErrAmbiguous
	}
	for _, p := range s.pos {
		nm := m.cg.mask(p.node, &m.fill)
		if nm.acceptBits != nil {
			for i, w := range nm.acceptBits {
				mask[i] |= int32(w)
			}
		} else {
			for _, id := range nm.acceptList {
				mask[id>>5] |= int32(uint32(1) << (uint(id) & 31))
			}
		}
		if nm.unc != nil {
			m.checkUncertain(p, nm.unc, mask)
		}
	}
	if s.done {
		for _, id := range ti.stop {
			mask[id>>5] |= int32(uint32(1) << (uint(id) & 31))
		}
	}
	return nil
}

// checkUncertain walks the uncertain-token trie of p's node with p's real
// stack, sharing prefixes and skipping subtrees that die.
func (m *Matcher) checkUncertain(p pos, t *tokenTrie, mask []int32) {
	st := &m.fill
	st.slabPos = 0
	need := t.maxDepth + 1
	for len(m.bufs) < need+2 {
		m.bufs = append(m.bufs, nil)
	}
	sets := m.bufs[2:]
	sets[0] = append(sets[0][:0], p)
	for i := 0; i < len(t.b); {
		d := int(t.depth[i])
		cur := st.advance(sets[d-1], t.b[i], sets[d][:0])
		sets[d] = cur
		if len(cur) == 0 {
			if st.done {
				for _, id := range t.tokens(i) {
					mask[id>>5] |= int32(uint32(1) << (uint(id) & 31))
				}
			}
			i = int(t.next[i])
			continue
		}
		for _, id := range t.tokens(i) {
			mask[id>>5] |= int32(uint32(1) << (uint(id) & 31))
		}
		i++
	}
}

// JumpForward returns the longest text the grammar forces from here (every
// allowed continuation starts with it), without changing the state. It is
// empty when there is a choice or the grammar may end.
func (m *Matcher) JumpForward() string {
	s := m.cur()
	if s.terminated || s.done || s.overflow {
		return ""
	}
	st := &stepper{g: m.cg.g}
	cur := s.pos
	var out []byte
	for len(out) < 4096 {
		var only byte
		n := 0
		for c := 0; c < 256 && n < 2; c++ {
			for _, p := range cur {
				if m.cg.g.trans[int(p.node)*m.cg.g.nclass+int(m.cg.g.class[c])] >= 0 {
					if n == 0 || only != byte(c) {
						n++
						only = byte(c)
					}
					break
				}
			}
		}
		if n != 1 {
			break
		}
		nxt := st.advance(cur, only, nil)
		out = append(out, only)
		if st.done || len(nxt) == 0 {
			break
		}
		cur = nxt
	}
	return string(out)
}

// minRemaining estimates the fewest bytes that complete the grammar from
// the current state (used to steer random generation in tests).
func (m *Matcher) minRemaining() int {
	s := m.cur()
	if s.done {
		return 0
	}
	g := m.cg.g
	best := 1 << 30
	for _, p := range s.pos {
		v := int(g.minDone[p.node])
		for f := p.parent; f != nil && v < best; f = f.parent {
			v += int(g.minDone[f.ret])
		}
		if v < best {
			best = v
		}
	}
	return best
}
