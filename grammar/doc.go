// Package grammar compiles JSON Schema, regular expressions and EBNF into token masks for constrained decoding.
package grammar
