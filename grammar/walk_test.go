package grammar

import (
	"math/bits"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"
)

// pickAllowed draws a uniformly random allowed token from mask.
func pickAllowed(r *rand.Rand, mask []int32, skip func(int) bool) int {
	total := 0
	for _, w := range mask {
		total += bits.OnesCount32(uint32(w))
	}
	if total < 4096 {
		var ids []int
		for i, w := range mask {
			for u := uint32(w); u != 0; u &= u - 1 {
				if id := i*32 + bits.TrailingZeros32(u); !skip(id) {
					ids = append(ids, id)
				}
			}
		}
		if len(ids) == 0 {
			return -1
		}
		return ids[r.Intn(len(ids))]
	}
	for tries := 0; tries < 64; tries++ {
		k := r.Intn(total)
		for i, w := range mask {
			c := bits.OnesCount32(uint32(w))
			if k < c {
				u := uint32(w)
				for ; k > 0; k-- {
					u &= u - 1
				}
				id := i*32 + bits.TrailingZeros32(u)
				if !skip(id) {
					return id
				}
				break
			}
			k -= c
		}
	}
	return -1
}

// randomWalk generates text by choosing random allowed tokens until the
// matcher terminates. After soft steps it steers toward the end by taking,
// among a few random candidates, the one that leaves the fewest bytes to a
// complete match. It checks on the way that every token the mask allows
// is accepted. Returns the text and the per-token mask fill times.
func randomWalk(t *testing.T, cg *CompiledGrammar, rv *realVocab, r *rand.Rand, soft, hard int, fills *[]time.Duration) (string, bool) {
	m := NewMatcher(cg)
	mask := make([]int32, rv.ti.BitmaskWords()+1)
	var out []byte
	walkIDs = walkIDs[:0]
	isStop := func(id int) bool { return rv.ti.isStop(id) }
	for step := 0; step < hard; step++ {
		t0 := time.Now()
		if err := m.FillNextTokenBitmask(mask); err != nil {
			t.Fatal(err)
		}
		*fills = append(*fills, time.Since(t0))
		if m.IsCompleted() && (step >= soft || r.Intn(4) == 0 || pickAllowed(r, mask, isStop) < 0) {
			if mask[rv.eos>>5]>>(uint(rv.eos)&31)&1 == 0 || !m.AcceptToken(rv.eos) || !m.IsTerminated() {
				t.Fatalf("stop token refused when complete")
			}
			return string(out), true
		}
		var id int
		if step < soft {
			id = pickAllowed(r, mask, isStop)
		} else {
			best, bestRem := -1, 1<<30
			cands := rv.singleBytes(mask)
			for k := 0; k < 24; k++ {
				if c := pickAllowed(r, mask, isStop); c >= 0 {
					cands = append(cands, c)
				}
			}
			r.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
			for _, c := range cands {
				if !m.AcceptToken(c) {
					t.Fatalf("mask allowed %q but AcceptToken refused it after %q", rv.ti.bytes[c], out)
				}
				rem := m.minRemaining()
				m.Rollback(1)
				if rem < bestRem {
					best, bestRem = c, rem
				}
			}
			id = best
		}
		if id < 0 {
			n := 0
			for c := 0; c < rv.ti.size; c++ {
				if m.Fork().AcceptToken(c) {
					n++
					if n < 5 {
						t.Logf("accepted but masked: %q", rv.ti.bytes[c])
					}
				}
			}
			for _, p := range m.cur().pos {
				nm := cg.mask(p.node, nil)
				t.Logf("node %d parent %v accept %v unc %d", p.node, p.parent, nm.acceptList, nm.nUnc)
			}
			t.Fatalf("schema %s: no allowed token after %q (%d tokens accepted, completed=%v, positions %d) ids %v", curSchema, out, n, m.IsCompleted(), len(m.cur().pos), walkIDs)
		}
		// Whatever is chosen agrees with the forced continuation.
		if jf := m.JumpForward(); jf != "" {
			tb := string(rv.ti.bytes[id])
			if !strings.HasPrefix(tb, jf) && !strings.HasPrefix(jf, tb) {
				t.Fatalf("after %q the grammar forces %q but allowed %q", out, jf, tb)
			}
			f := m.Fork().(*Matcher)
			if !f.AcceptString(jf) {
				t.Fatalf("forced text %q refused", jf)
			}
		}
		if !m.AcceptToken(id) {
			t.Fatalf("mask allowed %q but AcceptToken refused it after %q", rv.ti.bytes[id], out)
		}
		out = append(out, rv.ti.bytes[id]...)
		walkIDs = append(walkIDs, id)
	}
	return string(out), false
}

var (
	curSchema string
	walkIDs   []int
)

func TestRandomGenerations(t *testing.T) {
	walks := 1000
	if testing.Short() {
		walks = 100
	}
	cases := corpus(t, 300)
	vocabs := []*realVocab{loadReal(t, "llama3"), loadReal(t, "gemma3")}
	r := rand.New(rand.NewSource(11))
	var fills []time.Duration
	done, unfinished := 0, 0
	type cg struct {
		c  *CompiledGrammar
		sc schemaCase
	}
	compiled := map[[2]int]cg{}
	for w := 0; w < walks; w++ {
		ci := r.Intn(len(cases))
		vi := w % 2
		k := [2]int{ci, vi}
		c, ok := compiled[k]
		if !ok {
			g, err := JSONSchemaGrammar([]byte(cases[ci].schema), cases[ci].opt)
			if err != nil {
				t.Fatal(err)
			}
			c = cg{CompileGrammar(g, vocabs[vi].ti, CompileOptions{Lazy: true}), cases[ci]}
			compiled[k] = c
		}
		curSchema = c.sc.schema
		text, ok := randomWalk(t, c.c, vocabs[vi], r, 30, 1500, &fills)
		if !ok {
			unfinished++
			t.Logf("unfinished (%s): %s\n%.300q", vocabs[vi].name, c.sc.schema, text)
			continue
		}
		sch := compileValidator(t, c.sc.schema)
		if !refValid(sch, text) {
			t.Errorf("%s (%s): generated %q is not valid\nschema %s", c.sc.name, vocabs[vi].name, text, c.sc.schema)
		}
		done++
	}
	sort.Slice(fills, func(i, j int) bool { return fills[i] < fills[j] })
	t.Logf("%d generations validated, %d hit the length bound; %d mask fills (cold caches, lazy) p50 %v p99 %v max %v",
		done, unfinished, len(fills), fills[len(fills)/2], fills[len(fills)*99/100], fills[len(fills)-1])
	if unfinished > 0 {
		t.Errorf("%d of %d generations did not finish", unfinished, walks)
	}
}
