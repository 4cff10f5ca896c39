package grammar_test

import (
	"fmt"

	"github.com/mlxgo/mlxgo/grammar"
)

// A toy vocabulary of raw-byte tokens: constrain generation to a schema,
// read the mask, accept tokens and ask for the forced continuation.
func ExampleMatcher() {
	pieces := []string{"<eos>", "{", "}", `"`, "ok", ":", "true", "false", `{"ok":`}
	vocab, _ := grammar.NewSimpleVocab(grammar.VocabRaw, pieces, []bool{true}, []int{0})
	ti, _ := grammar.NewTokenizerInfo(vocab)
	c := grammar.NewCompiler(ti, grammar.CompileOptions{}, 0)
	cg, err := c.JSONSchema(`{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],"additionalProperties":false}`, grammar.JSONOptions{})
	if err != nil {
		panic(err)
	}
	m := grammar.NewMatcher(cg)
	fmt.Printf("forced: %q\n", m.JumpForward())
	mask := make([]int32, ti.BitmaskWords())
	m.FillNextTokenBitmask(mask)
	for id := range pieces {
		if mask[id/32]>>(id%32)&1 == 1 {
			fmt.Println("allowed:", pieces[id])
		}
	}
	for _, id := range []int{8, 6, 2} { // {"ok": true }
		m.AcceptToken(id)
	}
	fmt.Println("complete:", m.IsCompleted(), "stop accepted:", m.AcceptToken(0))
	// Output:
	// forced: "{\"ok\":"
	// allowed: {
	// allowed: {"ok":
	// complete: true stop accepted: true
}
