package grammar

import (
	"errors"
	"testing"
)

func TestMatcherAPI(t *testing.T) {
	pieces := []string{"<bos>", "<eos>", "<ctl>", "a", "b", "ab", "\"", "<0x41>", "▁x"}
	special := []bool{true, true, true}
	v, err := NewSimpleVocab(VocabByteFallback, pieces, special, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	ti, err := NewTokenizerInfo(v)
	if err != nil {
		t.Fatal(err)
	}
	g, err := RegexGrammar(`(ab|A)+( x)?`)
	if err != nil {
		t.Fatal(err)
	}
	cg := CompileGrammar(g, ti, CompileOptions{})
	m := NewMatcher(cg)
	if err := m.FillNextTokenBitmask(make([]int32, 0)); !errors.Is(err, ErrMaskTooSmall) {
		t.Fatalf("want ErrMaskTooSmall, got %v", err)
	}
	mask := make([]int32, 4)
	for i := range mask {
		mask[i] = -1
	}
	m.FillNextTokenBitmask(mask)
	// Allowed at start: "a" (3), "ab" (5), <0x41> = 'A' (7).
	if mask[0] != 1<<3|1<<5|1<<7 || mask[1] != 0 || mask[3] != 0 {
		t.Fatalf("mask %b %b", mask[0], mask[1])
	}
	if m.AcceptToken(0) || m.AcceptToken(2) || m.AcceptToken(1) || m.AcceptToken(-1) || m.AcceptToken(99) {
		t.Fatal("special, early stop or out-of-range token accepted")
	}
	if !m.AcceptToken(3) || m.JumpForward() != "b" || !m.AcceptToken(4) {
		t.Fatal("a b")
	}
	f := m.Fork()
	if !f.AcceptToken(8) || !f.IsCompleted() || m.IsCompleted() == false {
		t.Fatal("fork")
	}
	if m.JumpForward() != "" {
		t.Fatal("no forced text where the grammar may end")
	}
	m.FillNextTokenBitmask(mask)
	if mask[0]>>1&1 != 1 || mask[0]>>2&1 != 0 {
		t.Fatal("stop token allowed exactly when complete; other specials never")
	}
	if !m.AcceptToken(1) || !m.IsTerminated() || m.AcceptToken(3) {
		t.Fatal("terminate")
	}
	m.FillNextTokenBitmask(mask)
	if mask[0] != 0 {
		t.Fatal("nothing allowed after termination")
	}
	if err := m.Rollback(3); err != nil || m.IsCompleted() {
		t.Fatal("rollback to start", err)
	}
	if err := m.Rollback(1); err == nil {
		t.Fatal("rollback past the start must fail")
	}
	m.AcceptToken(5)
	m.Reset()
	if m.Rollback(1) == nil {
		t.Fatal("reset forgets history")
	}
	m.SetMaxRollback(2)
	for i := 0; i < 5; i++ {
		m.AcceptToken(7)
	}
	if m.Rollback(3) == nil || m.Rollback(2) != nil {
		t.Fatal("bounded history")
	}
	if _, err := NewSimpleVocab(VocabByteLevel, []string{"\u0100", "é€"}, nil, nil); err == nil {
		t.Fatal("€ is not in the byte-level map")
	}
	if b, _ := DecodePiece(VocabByteLevel, "Ġhi"); string(b) != " hi" {
		t.Fatalf("byte-level decode %q", b)
	}
}
