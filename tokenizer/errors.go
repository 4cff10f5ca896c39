package tokenizer

import (
	"fmt"
	"sort"
	"strings"
)

// FieldError reports a malformed or unsupported part of a tokenizer file,
// naming the JSON field (for example "pre_tokenizer.pretokenizers[1].pattern").
type FieldError struct {
	File  string // the file, such as "tokenizer.json"
	Field string // the JSON path of the field
	Err   error
}

// Error names the file and the field.
func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.File, e.Field, e.Err)
}

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

// UnsupportedError reports a component type this package does not implement,
// with the types it does.
type UnsupportedError struct {
	Kind      string   // "normalizer", "pre_tokenizer", "model", "post_processor" or "decoder"
	Type      string   // the type named in the file
	Supported []string // the types that are implemented
}

// Error names the type and lists the supported ones.
func (e *UnsupportedError) Error() string {
	s := append([]string(nil), e.Supported...)
	sort.Strings(s)
	return fmt.Sprintf("unsupported %s type %q (supported: %s)", e.Kind, e.Type, strings.Join(s, ", "))
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
