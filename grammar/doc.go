// Package grammar compiles JSON Schema, regular expressions, EBNF and
// choice lists into token masks for constrained decoding.
//
// Every front end (JSONSchemaGrammar, RegexGrammar, EBNFGrammar,
// ChoiceGrammar) produces one representation, a Grammar: a deterministic
// byte automaton per rule whose states may call other rules — a pushdown
// automaton over bytes, so recursion ($ref, EBNF rules) and UTF-8 split
// across tokens both work. The parser state is a small set of stacks
// (positions); stacks are immutable linked frames, so rollback and fork
// are cheap. The set is bounded: a grammar ambiguous enough that its
// parses outgrow the bound (a recursive rule under nested repetition)
// stops with ErrAmbiguous rather than cost time exponential in the text.
//
// CompileGrammar binds a Grammar to a vocabulary (TokenizerInfo, built
// from the Vocabulary interface, which needs only each token's bytes and
// which ids are special) and builds the adaptive token-mask cache: for
// every automaton state, the tokens accepted whatever the stack below
// holds, and the few uncertain ones (those that may run past the end of
// the state's rule) kept in a small byte trie. A Matcher's
// FillNextTokenBitmask ORs the cached accepted sets and walks only the
// uncertain tries with the real stack, so a mask costs microseconds even
// for a 262,144-token vocabulary. Compiler caches compiled grammars by
// text.
//
// NewTokenizerVocab reads a Vocabulary from any tokenizer with Token, ID
// and IsSpecial methods (the tokenizer module's *Tokenizer has them), so
// neither module imports the other.
//
// Generation loops consume the TokenMatcher interface; Matcher
// implements it.
package grammar
