package grammar

import (
	"encoding/binary"
	"fmt"
)

// Limits of regularOp, which JSON Schema runs on request-supplied
// patterns and lengths: the product automaton's states, and the NFA-state
// visits spent building it (each product state may pair large state sets,
// as with pattern (.*){50}x under maxLength, so the state cap alone let
// one schema run for seconds). Exceeding either is a compile error.
const (
	maxProductStates = 1 << 15
	maxProductWork   = 1 << 25
)

// regularOp combines two call-free expressions by running their automata
// side by side: intersect keeps strings in both, difference strings in a
// but not in b. JSON Schema needs it where two constraints hit one value
// (pattern and maxLength, bounds and multipleOf, property names excluded
// from additionalProperties keys).
func regularOp(a, b *expr, intersect bool) (*expr, error) {
	if exprSize(a, maxNFAStates)+exprSize(b, maxNFAStates) > maxNFAStates {
		return nil, sizeError()
	}
	nb := &nfaBuilder{}
	sa, fa := nb.newState(), nb.newState()
	nb.build(a, sa, fa)
	sb, fb := nb.newState(), nb.newState()
	nb.build(b, sb, fb)
	if nb.err != nil {
		return nil, nb.err
	}
	for _, st := range nb.st {
		if len(st.calls) > 0 {
			return nil, fmt.Errorf("internal: rule call inside a regular combination")
		}
	}
	// Byte classes over both automata.
	cls, rep := nb.byteClasses()
	members := make([]byteSet, len(rep))
	for c := range 256 {
		members[cls[c]].addRange(byte(c), byte(c))
	}
	sw := newSubsetWalker(nb)
	type pstate struct{ a, b []int32 }
	key := func(p pstate) string {
		buf := make([]byte, 4*(len(p.a)+len(p.b)+1))
		binary.LittleEndian.PutUint32(buf, uint32(len(p.a)))
		for i, s := range append(append([]int32(nil), p.a...), p.b...) {
			binary.LittleEndian.PutUint32(buf[4*(i+1):], uint32(s))
		}
		return string(buf)
	}
	contains := func(set []int32, s int32) bool {
		for _, x := range set {
			if x == s {
				return true
			}
		}
		return false
	}
	ids := map[string]int{}
	var states []pstate
	add := func(p pstate) (int, error) {
		k := key(p)
		if id, ok := ids[k]; ok {
			return id, nil
		}
		if len(states) >= maxProductStates {
			return 0, fmt.Errorf("combined constraint too complex (more than %d states, limit maxProductStates)", maxProductStates)
		}
		if sw.work > maxProductWork {
			return 0, fmt.Errorf("combined constraint too complex (more than %d steps, limit maxProductWork)", maxProductWork)
		}
		ids[k] = len(states)
		states = append(states, p)
		return len(states) - 1, nil
	}
	g := &expr{op: opGraph}
	if _, err := add(pstate{sw.closure([]int32{sa}), sw.closure([]int32{sb})}); err != nil {
		return nil, err
	}
	for i := 0; i < len(states); i++ {
		p := states[i]
		inA, inB := contains(p.a, fa), contains(p.b, fb)
		if inA && (inB == intersect) {
			g.gfinal = append(g.gfinal, i)
		}
		byTarget := map[int]byteSet{}
		var order []int
		for c := range rep {
			na := sw.step(p.a, rep[c])
			if len(na) == 0 {
				continue
			}
			nbs := sw.step(p.b, rep[c])
			if intersect && len(nbs) == 0 {
				continue
			}
			t, err := add(pstate{na, nbs})
			if err != nil {
				return nil, err
			}
			s, ok := byTarget[t]
			if !ok {
				order = append(order, t)
			}
			for w := 0; w < 4; w++ {
				s[w] |= members[c][w]
			}
			byTarget[t] = s
		}
		for _, t := range order {
			g.gedges = append(g.gedges, gedge{i, t, eSet(byTarget[t])})
		}
	}
	g.gn = len(states)
	if len(g.gfinal) == 0 {
		return eNone, nil
	}
	return g, nil
}
