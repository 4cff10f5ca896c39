package grammar

import (
	"container/heap"
	"encoding/binary"
	"fmt"
	"sort"
)

// Limits keep hostile input (a regex, EBNF grammar or JSON Schema taken
// from a request) from exhausting memory or CPU. Each is enforced with a
// compile error naming the rule or schema location, never by running on.
const (
	// maxNFAStates bounds the expanded automaton of one rule or regular
	// combination: counted repetitions are unrolled, so a{100}{100} costs
	// 10000 states. It is checked up front by exprSize and again while
	// building.
	maxNFAStates = 1 << 20
	// maxDFANodes bounds the deterministic nodes of the whole grammar.
	maxDFANodes = 1 << 18
	// maxDeterminizeWork bounds the NFA-state visits of the subset
	// construction (all rules together). Node counts alone do not bound
	// the time: each node may stand for thousands of NFA states, as with
	// (?i)\p{L}{200}. About a second of work on current hardware.
	maxDeterminizeWork = 1 << 27
)

// exprSize estimates the NFA states e expands to, repetitions unrolled,
// saturating just above limit. Shared subexpressions are counted once per
// use (the NFA copies them) but visited once, so the estimate is linear
// in the expression DAG.
func exprSize(e *expr, limit int64) int64 {
	memo := map[*expr]int64{}
	var size func(e *expr) int64
	size = func(e *expr) int64 {
		if v, ok := memo[e]; ok {
			return v
		}
		var v int64 = 1
		switch e.op {
		case opSeq, opAlt:
			for _, s := range e.subs {
				v += size(s)
				if v > limit {
					v = limit + 1
					break
				}
			}
		case opRepeat:
			reps := int64(e.max)
			if e.max < 0 {
				reps = int64(e.min) + 1
			}
			v = 2 + reps
			if sub := size(e.subs[0]); reps > 0 && sub > (limit+1)/reps {
				v = limit + 1
			} else {
				v += sub * reps
			}
		case opGraph:
			v = int64(e.gn) + 1
			for _, ed := range e.gedges {
				v += size(ed.e)
				if v > limit {
					v = limit + 1
					break
				}
			}
		}
		if v > limit {
			v = limit + 1
		}
		memo[e] = v
		return v
	}
	return size(e)
}

// sizeError is the error for an expression over maxNFAStates.
func sizeError() error {
	return fmt.Errorf("grammar too large: expands to more than %d automaton states (limit maxNFAStates); lower repetition counts or lengths", maxNFAStates)
}

type nedge struct {
	set byteSet
	to  int32
}

type ncall struct{ rule, to int32 }

type nstate struct {
	eps   []int32
	edges []nedge
	calls []ncall
}

type nfaBuilder struct {
	st  []nstate
	err error
}

func (n *nfaBuilder) newState() int32 {
	if len(n.st) >= maxNFAStates {
		if n.err == nil {
			n.err = fmt.Errorf("grammar too large (more than %d automaton states); lower repetition counts or lengths", maxNFAStates)
		}
		return 0
	}
	n.st = append(n.st, nstate{})
	return int32(len(n.st) - 1)
}

func (n *nfaBuilder) build(e *expr, from, to int32) {
	if n.err != nil {
		return
	}
	switch e.op {
	case opEmpty:
		n.st[from].eps = append(n.st[from].eps, to)
	case opNone:
	case opBytes:
		n.st[from].edges = append(n.st[from].edges, nedge{e.set, to})
	case opRef:
		n.st[from].calls = append(n.st[from].calls, ncall{int32(e.ref), to})
	case opSeq:
		cur := from
		for i, s := range e.subs {
			next := to
			if i < len(e.subs)-1 {
				next = n.newState()
			}
			n.build(s, cur, next)
			cur = next
		}
	case opAlt:
		for _, s := range e.subs {
			n.build(s, from, to)
		}
	case opRepeat:
		cur := from
		for i := 0; i < e.min; i++ {
			next := n.newState()
			n.build(e.subs[0], cur, next)
			cur = next
			if n.err != nil {
				return
			}
		}
		if e.max < 0 {
			loop := n.newState()
			n.st[cur].eps = append(n.st[cur].eps, loop)
			back := n.newState()
			n.build(e.subs[0], loop, back)
			n.st[back].eps = append(n.st[back].eps, loop)
			n.st[loop].eps = append(n.st[loop].eps, to)
			return
		}
		for i := e.min; i < e.max; i++ {
			n.st[cur].eps = append(n.st[cur].eps, to)
			next := n.newState()
			n.build(e.subs[0], cur, next)
			cur = next
			if n.err != nil {
				return
			}
		}
		n.st[cur].eps = append(n.st[cur].eps, to)
	case opGraph:
		ids := make([]int32, e.gn)
		for i := range ids {
			ids[i] = n.newState()
		}
		n.st[from].eps = append(n.st[from].eps, ids[e.gstart])
		for _, ed := range e.gedges {
			n.build(ed.e, ids[ed.from], ids[ed.to])
		}
		for _, f := range e.gfinal {
			n.st[ids[f]].eps = append(n.st[ids[f]].eps, to)
		}
	}
}

// byteClasses partitions the bytes into the coarsest classes that no edge
// of the automaton tells apart (every edge set holds all of a class or
// none of it). It returns each byte's class and, per class, its smallest
// byte as the representative; len(rep) is the number of classes.
func (n *nfaBuilder) byteClasses() (cls [256]uint8, rep []byte) {
	var id [256]int
	ncls := 1
	seen := map[byteSet]bool{}
	for _, st := range n.st {
		for _, e := range st.edges {
			if seen[e.set] {
				continue
			}
			seen[e.set] = true
			remap := map[[2]int]int{}
			for c := 0; c < 256; c++ {
				k := [2]int{id[c], 0}
				if e.set.has(byte(c)) {
					k[1] = 1
				}
				j, ok := remap[k]
				if !ok {
					j = len(remap)
					remap[k] = j
				}
				id[c] = j
			}
			ncls = len(remap)
		}
	}
	rep = make([]byte, ncls)
	for c := 255; c >= 0; c-- {
		cls[c] = uint8(id[c])
		rep[id[c]] = byte(c)
	}
	return cls, rep
}

// subsetWalker runs the two moves of a subset construction over an NFA:
// epsilon closure and the step on one byte. work counts the NFA states and
// edges visited, so that callers can bound the time a hostile input takes.
type subsetWalker struct {
	nb   *nfaBuilder
	mark []int32 // mark[s] == gen: s is already in the closure being built
	gen  int32
	work int
}

func newSubsetWalker(nb *nfaBuilder) *subsetWalker {
	return &subsetWalker{nb: nb, mark: make([]int32, len(nb.st))}
}

// closure returns the states reachable from seed by epsilon moves, sorted.
func (w *subsetWalker) closure(seed []int32) []int32 {
	w.gen++
	w.work += len(seed)
	var out []int32
	stack := append([]int32(nil), seed...)
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if w.mark[s] == w.gen {
			continue
		}
		w.mark[s] = w.gen
		out = append(out, s)
		stack = append(stack, w.nb.st[s].eps...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// step returns the closure of the states set reaches on byte c, or nil
// when it reaches none.
func (w *subsetWalker) step(set []int32, c byte) []int32 {
	var tg []int32
	w.work += len(set)
	for _, s := range set {
		w.work += len(w.nb.st[s].edges)
		for _, e := range w.nb.st[s].edges {
			if e.set.has(c) {
				tg = append(tg, e.to)
			}
		}
	}
	if len(tg) == 0 {
		return nil
	}
	return w.closure(tg)
}

type call struct{ rule, ret int32 }

// Grammar is a compiled grammar independent of any vocabulary: one
// deterministic byte automaton per rule whose states may call other rules
// (a recursive transition network, i.e. a pushdown automaton). Nodes are
// numbered globally. It is immutable and safe to share.
type Grammar struct {
	nclass    int
	class     [256]uint8
	classRep  []byte
	trans     []int32 // node*nclass + class -> node or -1
	final     []bool
	hasBytes  []bool
	calls     [][]call
	nodeRule  []int32
	ruleStart []int32
	ruleNames []string
	root      int32
	minDone   []int32 // fewest bytes that finish the node's rule
	ruleMin   []int32
	nullable  []bool
	follow    []byteSet // per rule: bytes that may come right after it ends
}

// NumNodes is the number of automaton states, a measure of grammar size.
func (g *Grammar) NumNodes() int { return len(g.final) }

func finishGrammar(b *builder, root int) (*Grammar, error) {
	for i, body := range b.bodies {
		if body == nil {
			return nil, &Error{Location: "rule " + b.names[i], Msg: "rule is used but never defined"}
		}
	}
	// Byte classes: refine the partition by every byte set in use.
	nb := &nfaBuilder{}
	type rnfa struct{ start, accept int32 }
	rn := make([]rnfa, len(b.bodies))
	var total int64
	for i, body := range b.bodies {
		total += exprSize(body, maxNFAStates)
		if total > maxNFAStates {
			return nil, &Error{Location: "rule " + b.names[i], Keyword: "size", Msg: sizeError().Error()}
		}
		s, a := nb.newState(), nb.newState()
		nb.build(body, s, a)
		rn[i] = rnfa{s, a}
		if nb.err != nil {
			return nil, &Error{Location: "rule " + b.names[i], Keyword: "size", Msg: nb.err.Error()}
		}
	}
	g := &Grammar{ruleNames: b.names}
	g.class, g.classRep = nb.byteClasses()
	g.nclass = len(g.classRep)
	ncls := g.nclass
	// Subset construction per rule.
	g.ruleStart = make([]int32, len(b.bodies))
	sw := newSubsetWalker(nb)
	key := func(set []int32) string {
		buf := make([]byte, 4*len(set))
		for i, s := range set {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(s))
		}
		return string(buf)
	}
	for r := range b.bodies {
		ids := map[string]int32{}
		var sets [][]int32
		add := func(set []int32) (int32, error) {
			k := key(set)
			if id, ok := ids[k]; ok {
				return id, nil
			}
			if len(g.final) >= maxDFANodes {
				return 0, &Error{Location: "rule " + b.names[r], Keyword: "size", Msg: fmt.Sprintf("grammar too large: more than %d automaton nodes (limit maxDFANodes)", maxDFANodes)}
			}
			if sw.work > maxDeterminizeWork {
				return 0, &Error{Location: "rule " + b.names[r], Keyword: "size", Msg: fmt.Sprintf("grammar too complex: determinizing it needs more than %d steps (limit maxDeterminizeWork); simplify repetitions of large character classes", maxDeterminizeWork)}
			}
			id := int32(len(g.final))
			ids[k] = id
			sets = append(sets, set)
			g.final = append(g.final, false)
			g.nodeRule = append(g.nodeRule, int32(r))
			g.calls = append(g.calls, nil)
			for c := 0; c < ncls; c++ {
				g.trans = append(g.trans, -1)
			}
			return id, nil
		}
		base := int32(len(g.final))
		start, err := add(sw.closure([]int32{rn[r].start}))
		if err != nil {
			return nil, err
		}
		g.ruleStart[r] = start
		for i := 0; i < len(sets); i++ {
			id := base + int32(i)
			set := sets[i]
			var callOrder []int32
			callTo := map[int32][]int32{}
			for _, s := range set {
				if s == rn[r].accept {
					g.final[id] = true
				}
				for _, c := range nb.st[s].calls {
					if _, ok := callTo[c.rule]; !ok {
						callOrder = append(callOrder, c.rule)
					}
					callTo[c.rule] = append(callTo[c.rule], c.to)
				}
			}
			for _, cr := range callOrder {
				t, err := add(sw.closure(callTo[cr]))
				if err != nil {
					return nil, err
				}
				g.calls[id] = append(g.calls[id], call{cr, t})
			}
			for c := 0; c < ncls; c++ {
				tg := sw.step(set, g.classRep[c])
				if tg == nil {
					continue
				}
				t, err := add(tg)
				if err != nil {
					return nil, err
				}
				g.trans[int(id)*ncls+c] = t
			}
		}
	}
	g.root = g.ruleStart[root]
	if err := g.trim(); err != nil {
		return nil, err
	}
	if err := g.checkLeftRecursion(); err != nil {
		return nil, err
	}
	g.computeMinDone()
	g.computeFollow()
	return g, nil
}

// trim removes everything that cannot lead to the end of its rule, so that
// every reachable parser state can still complete: the token-mask cache
// relies on that to call a token "accepted" without looking further.
//
// Liveness is propagated backwards from the final nodes with a worklist
// over reversed edges, so the cost is linear in the automaton size; a
// forward fixpoint would need one pass per node of a long chain such as
// x{4096}, which is quadratic and took minutes on hostile inputs.
func (g *Grammar) trim() error {
	n := len(g.final)
	nr := len(g.ruleStart)
	live := make([]bool, n)
	prod := make([]bool, nr)
	rv := g.reverse()
	pred, predStart := rv.pred, rv.predStart
	retCaller, retStart := rv.retCaller, rv.retStart
	ruleCall, ruleCallStart := rv.ruleCall, rv.ruleCallStart
	startRule := make([]int32, n)
	for i := range startRule {
		startRule[i] = -1
	}
	for r, s := range g.ruleStart {
		startRule[s] = int32(r)
	}
	var work []int32
	mark := func(i int32) {
		if !live[i] {
			live[i] = true
			work = append(work, i)
		}
	}
	for i := 0; i < n; i++ {
		if g.final[i] {
			mark(int32(i))
		}
	}
	for len(work) > 0 {
		x := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range pred[predStart[x]:predStart[x+1]] {
			mark(p)
		}
		for _, cs := range retCaller[retStart[x]:retStart[x+1]] {
			if prod[cs.rule] {
				mark(cs.node)
			}
		}
		if r := startRule[x]; r >= 0 && !prod[r] {
			prod[r] = true
			for _, cs := range ruleCall[ruleCallStart[r]:ruleCallStart[r+1]] {
				if live[cs.ret] {
					mark(cs.node)
				}
			}
		}
	}
	if !live[g.root] {
		return &Error{Location: "rule " + g.ruleNames[g.nodeRule[g.root]], Msg: "grammar matches no string"}
	}
	g.hasBytes = make([]bool, n)
	for i := 0; i < n; i++ {
		for c := 0; c < g.nclass; c++ {
			k := i*g.nclass + c
			if t := g.trans[k]; t >= 0 && !live[t] {
				g.trans[k] = -1
			}
			if g.trans[k] >= 0 {
				g.hasBytes[i] = true
			}
		}
		cs := g.calls[i][:0]
		for _, c := range g.calls[i] {
			if prod[c.rule] && live[c.ret] {
				cs = append(cs, c)
			}
		}
		g.calls[i] = cs
	}
	return nil
}

// checkLeftRecursion rejects rules that can call themselves without
// consuming a byte: the parser would loop forever on them.
func (g *Grammar) checkLeftRecursion() error {
	nr := len(g.ruleStart)
	nullable := make([]bool, nr)
	// epsReach returns the nodes of rule r reachable from its start
	// through calls of nullable rules only.
	epsReach := func(r int) []int32 {
		seen := map[int32]bool{g.ruleStart[r]: true}
		stack := []int32{g.ruleStart[r]}
		var out []int32
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			out = append(out, s)
			for _, c := range g.calls[s] {
				if nullable[c.rule] && !seen[c.ret] {
					seen[c.ret] = true
					stack = append(stack, c.ret)
				}
			}
		}
		return out
	}
	for changed := true; changed; {
		changed = false
		for r := 0; r < nr; r++ {
			if nullable[r] {
				continue
			}
			for _, s := range epsReach(r) {
				if g.final[s] {
					nullable[r] = true
					changed = true
					break
				}
			}
		}
	}
	g.nullable = nullable
	left := make([][]int32, nr)
	for r := 0; r < nr; r++ {
		for _, s := range epsReach(r) {
			for _, c := range g.calls[s] {
				left[r] = append(left[r], c.rule)
			}
		}
	}
	state := make([]uint8, nr)
	var visit func(r int32) error
	visit = func(r int32) error {
		state[r] = 1
		for _, s := range left[r] {
			if state[s] == 1 {
				return &Error{Location: "rule " + g.ruleNames[s], Msg: "left recursion is not supported (the rule can call itself before consuming input)"}
			}
			if state[s] == 0 {
				if err := visit(s); err != nil {
					return err
				}
			}
		}
		state[r] = 2
		return nil
	}
	for r := 0; r < nr; r++ {
		if state[r] == 0 {
			if err := visit(int32(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// computeMinDone finds, per node, the fewest bytes that complete its rule;
// tests use it to steer random generations toward an end.
//
// It is a shortest-path computation where a call costs the callee's own
// minimum, done Dijkstra-style (Knuth's generalisation to such
// "superior" functions): every candidate distance is at least the value
// that produced it, so nodes settle in increasing order and the whole run
// is O(E log N) instead of one Bellman-Ford pass per node of a long chain.
func (g *Grammar) computeMinDone() {
	const inf = int32(1 << 30)
	n := len(g.final)
	nr := len(g.ruleStart)
	g.minDone = make([]int32, n)
	g.ruleMin = make([]int32, nr)
	for i := range g.minDone {
		g.minDone[i] = inf
	}
	for r := range g.ruleMin {
		g.ruleMin[r] = inf
	}
	rv := g.reverse()
	pred, predStart := rv.pred, rv.predStart
	retCaller, retStart := rv.retCaller, rv.retStart
	ruleCall, ruleCallStart := rv.ruleCall, rv.ruleCallStart
	rulesAt := map[int32][]int32{}
	for r, s := range g.ruleStart {
		rulesAt[s] = append(rulesAt[s], int32(r))
	}
	done := make([]bool, n)
	h := &distHeap{}
	relax := func(i, d int32) {
		if d < g.minDone[i] {
			g.minDone[i] = d
			heap.Push(h, distItem{i, d})
		}
	}
	for i := 0; i < n; i++ {
		if g.final[i] {
			relax(int32(i), 0)
		}
	}
	for h.Len() > 0 {
		it := heap.Pop(h).(distItem)
		x := it.node
		if done[x] || it.d != g.minDone[x] {
			continue
		}
		done[x] = true
		d := it.d
		for _, p := range pred[predStart[x]:predStart[x+1]] {
			relax(p, d+1)
		}
		for _, cs := range retCaller[retStart[x]:retStart[x+1]] {
			if rm := g.ruleMin[cs.rule]; rm < inf {
				relax(cs.node, rm+d)
			}
		}
		for _, r := range rulesAt[x] {
			if g.ruleMin[r] <= d {
				continue
			}
			g.ruleMin[r] = d
			for _, cs := range ruleCall[ruleCallStart[r]:ruleCallStart[r+1]] {
				if done[cs.ret] {
					relax(cs.node, d+g.minDone[cs.ret])
				}
			}
		}
	}
}

// callEdge is one call site: the calling node, the rule it calls and the
// node the call returns to.
type callEdge struct{ node, rule, ret int32 }

// reverseEdges is the automaton's edges reversed, in CSR form (the edges
// of node or rule i are [start[i], start[i+1])), for the backward passes
// trim and computeMinDone.
type reverseEdges struct {
	predStart, pred []int32    // byte-transition predecessors of each node
	retStart        []int32    // calls returning to each node…
	retCaller       []callEdge // …in one array
	ruleCallStart   []int32    // call sites of each rule…
	ruleCall        []callEdge // …in one array
}

// reverse builds the reversed adjacency in two linear passes (count, fill).
func (g *Grammar) reverse() *reverseEdges {
	n, nr := len(g.final), len(g.ruleStart)
	rv := &reverseEdges{predStart: make([]int32, n+1), retStart: make([]int32, n+1), ruleCallStart: make([]int32, nr+1)}
	for i := 0; i < n; i++ {
		for c := 0; c < g.nclass; c++ {
			if t := g.trans[i*g.nclass+c]; t >= 0 {
				rv.predStart[t+1]++
			}
		}
		for _, c := range g.calls[i] {
			rv.retStart[c.ret+1]++
			rv.ruleCallStart[c.rule+1]++
		}
	}
	for i := 0; i < n; i++ {
		rv.predStart[i+1] += rv.predStart[i]
		rv.retStart[i+1] += rv.retStart[i]
	}
	for r := 0; r < nr; r++ {
		rv.ruleCallStart[r+1] += rv.ruleCallStart[r]
	}
	rv.pred = make([]int32, rv.predStart[n])
	rv.retCaller = make([]callEdge, rv.retStart[n])
	rv.ruleCall = make([]callEdge, rv.ruleCallStart[nr])
	pf := append([]int32(nil), rv.predStart[:n]...)
	rf := append([]int32(nil), rv.retStart[:n]...)
	cf := append([]int32(nil), rv.ruleCallStart[:nr]...)
	for i := 0; i < n; i++ {
		for c := 0; c < g.nclass; c++ {
			if t := g.trans[i*g.nclass+c]; t >= 0 {
				rv.pred[pf[t]] = int32(i)
				pf[t]++
			}
		}
		for _, c := range g.calls[i] {
			e := callEdge{int32(i), c.rule, c.ret}
			rv.retCaller[rf[c.ret]] = e
			rf[c.ret]++
			rv.ruleCall[cf[c.rule]] = e
			cf[c.rule]++
		}
	}
	return rv
}

type distItem struct{ node, d int32 }

// distHeap is the priority queue of computeMinDone.
type distHeap []distItem

func (h distHeap) Len() int           { return len(h) }
func (h distHeap) Less(i, j int) bool { return h[i].d < h[j].d }
func (h distHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *distHeap) Push(x any)        { *h = append(*h, x.(distItem)) }
func (h *distHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

// computeFollow finds, per rule, the bytes that can follow its end in any
// context. The token-mask cache uses it to reject tokens that run past the
// end of a rule into bytes no caller accepts, so fewer stay uncertain.
func (g *Grammar) computeFollow() {
	n := len(g.final)
	first := make([]byteSet, n)
	endable := make([]bool, n)
	members := make([]byteSet, g.nclass)
	for b := 0; b < 256; b++ {
		members[g.class[b]].addRange(byte(b), byte(b))
	}
	for i := 0; i < n; i++ {
		for c := 0; c < g.nclass; c++ {
			if g.trans[i*g.nclass+c] >= 0 {
				for w := 0; w < 4; w++ {
					first[i][w] |= members[c][w]
				}
			}
		}
		endable[i] = g.final[i]
	}
	or := func(dst *byteSet, src byteSet) bool {
		ch := false
		for w := 0; w < 4; w++ {
			if dst[w]|src[w] != dst[w] {
				dst[w] |= src[w]
				ch = true
			}
		}
		return ch
	}
	for changed := true; changed; {
		changed = false
		for i := 0; i < n; i++ {
			for _, c := range g.calls[i] {
				if or(&first[i], first[g.ruleStart[c.rule]]) {
					changed = true
				}
				if g.nullable[c.rule] {
					if or(&first[i], first[c.ret]) {
						changed = true
					}
					if endable[c.ret] && !endable[i] {
						endable[i] = true
						changed = true
					}
				}
			}
		}
	}
	g.follow = make([]byteSet, len(g.ruleStart))
	for changed := true; changed; {
		changed = false
		for i := 0; i < n; i++ {
			for _, c := range g.calls[i] {
				if or(&g.follow[c.rule], first[c.ret]) {
					changed = true
				}
				if endable[c.ret] && or(&g.follow[c.rule], g.follow[g.nodeRule[i]]) {
					changed = true
				}
			}
		}
	}
}
