package safetensors

import (
	"errors"
	"fmt"
	"strconv"
)

// Sentinel errors, matched with errors.Is, so callers can tell a corrupt
// download (re-fetch it) from a missing weight (wrong architecture) or a
// dtype the engine cannot compute in (convert the checkpoint).
var (
	// ErrFormat marks a file or index that breaks the format's rules.
	ErrFormat = errors.New("invalid safetensors data")
	// ErrNotFound marks a lookup of a tensor name that is not stored.
	ErrNotFound = errors.New("tensor not found")
	// ErrUnsupportedDType marks a tensor whose dtype has no tensor.DType.
	ErrUnsupportedDType = errors.New("unsupported dtype")
	// ErrClosed marks use of a File or Set after Close.
	ErrClosed = errors.New("file closed")
)

// Error is the error type of this package. It names the file and, when the
// problem concerns one tensor, the tensor, because a checkpoint is dozens
// of files holding thousands of tensors and "invalid offset" alone does not
// say which one to look at.
type Error struct {
	File   string // the file's path, or "<memory>" for Parse
	Tensor string // the tensor concerned, when HasTensor
	// HasTensor reports whether Tensor is meaningful (tensor names may be
	// empty strings).
	HasTensor bool
	Problem   string // what is wrong, in words
	Kind      error  // one of the sentinels, or an underlying I/O error
}

// Error formats as "safetensors: FILE: tensor "NAME": PROBLEM".
func (e *Error) Error() string {
	s := "safetensors: " + e.File
	if e.HasTensor {
		s += ": tensor " + strconv.Quote(e.Tensor)
	}
	if e.Problem != "" {
		return s + ": " + e.Problem
	}
	return s + ": " + e.Kind.Error()
}

// Unwrap returns the sentinel or I/O error behind e.
func (e *Error) Unwrap() error { return e.Kind }

func formatErr(file, format string, args ...any) error {
	return &Error{File: file, Problem: fmt.Sprintf(format, args...), Kind: ErrFormat}
}

func tensorErr(file, name string, kind error, format string, args ...any) error {
	return &Error{File: file, Tensor: name, HasTensor: true, Problem: fmt.Sprintf(format, args...), Kind: kind}
}
