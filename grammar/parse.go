package grammar

// A parser state is a set of positions; a position is an automaton node
// (with byte transitions) plus the stack of return nodes below it. Stacks
// are immutable linked frames shared between positions and states, so
// copying a state (rollback history, fork) costs a slice copy.
type frame struct {
	ret    int32
	depth  int32
	hash   uint64
	parent *frame
}

type pos struct {
	node   int32
	parent *frame
}

func frameEq(a, b *frame) bool {
	for a != b {
		if a == nil || b == nil || a.hash != b.hash || a.ret != b.ret || a.depth != b.depth {
			return false
		}
		a, b = a.parent, b.parent
	}
	return true
}

func posEq(a, b pos) bool { return a.node == b.node && frameEq(a.parent, b.parent) }

// bottom stands for "the unknown rest of the stack" when the token-mask
// cache is computed for a node without context.
var bottom = &frame{ret: -1, depth: -1, hash: 0x9e3779b97f4a7c15}

// stepper advances position sets by bytes. It owns scratch buffers and,
// when arena is set, allocates frames from a reusable slab (for work whose
// frames are thrown away, like mask computation).
type stepper struct {
	g       *Grammar
	vis     []pos
	work    []pos
	seed    []pos
	arena   bool
	slab    []frame
	slabPos int
	// results of the last close call
	done     bool // the root rule completed (parent nil)
	escaped  bool // popped into bottom
	overflow bool // the closure reached maxPositions and was cut there
}

// maxPositions bounds a parser state: an ambiguous grammar (a recursive
// rule under nested repetition, say) can double its distinct stacks with
// every byte, and a state at the bound makes the matcher stop with
// ErrAmbiguous instead of spending exponential time. Grammars from JSON
// schemas and regexes stay far below it.
const maxPositions = 1024

func (st *stepper) newFrame(ret int32, parent *frame) *frame {
	var f *frame
	if st.arena {
		if st.slabPos == len(st.slab) {
			st.slab = make([]frame, 1024)
			st.slabPos = 0
		}
		f = &st.slab[st.slabPos]
		st.slabPos++
	} else {
		f = new(frame)
	}
	f.ret = ret
	f.parent = parent
	var ph uint64 = 0xcbf29ce484222325
	var d int32
	if parent != nil {
		ph = parent.hash
		d = parent.depth + 1
	}
	f.depth = d
	f.hash = (ph ^ uint64(uint32(ret))) * 0x100000001b3
	return f
}

// close computes the closure of seed under calls and returns, appending the
// positions that can consume a byte to out.
func (st *stepper) close(seed []pos, out []pos) []pos {
	g := st.g
	st.done, st.escaped, st.overflow = false, false, false
	vis := st.vis[:0]
	work := append(st.work[:0], seed...)
	for len(work) > 0 {
		if len(vis) >= maxPositions {
			st.overflow = true
			break
		}
		p := work[len(work)-1]
		work = work[:len(work)-1]
		dup := false
		for _, q := range vis {
			if posEq(p, q) {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		vis = append(vis, p)
		for _, c := range g.calls[p.node] {
			work = append(work, pos{g.ruleStart[c.rule], st.newFrame(c.ret, p.parent)})
		}
		if g.final[p.node] {
			switch p.parent {
			case nil:
				st.done = true
			case bottom:
				st.escaped = true
			default:
				work = append(work, pos{p.parent.ret, p.parent.parent})
			}
		}
	}
	for _, p := range vis {
		if g.hasBytes[p.node] {
			out = append(out, p)
		}
	}
	st.vis, st.work = vis, work
	return out
}

// advance consumes byte b from every position of cur.
func (st *stepper) advance(cur []pos, b byte, out []pos) []pos {
	g := st.g
	c := int(g.class[b])
	seed := st.seed[:0]
	for _, p := range cur {
		if t := g.trans[int(p.node)*g.nclass+c]; t >= 0 {
			seed = append(seed, pos{t, p.parent})
		}
	}
	st.seed = seed
	if len(seed) == 0 {
		st.done, st.escaped, st.overflow = false, false, false
		return out
	}
	return st.close(seed, out)
}
