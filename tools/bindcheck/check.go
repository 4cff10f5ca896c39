package main

import (
	"fmt"
	"strings"

	"github.com/mlxgo/mlxgo/mlxffi"
)

// mismatch is one disagreement between a Go declaration and its prototype.
type mismatch struct {
	Name   string
	Reason string
}

func (m mismatch) String() string { return m.Name + ": " + m.Reason }

// check compares every Go-side signature with the C prototype of the same
// name and returns the disagreements.
func check(sigs []mlxffi.Signature, protos map[string]proto, td *typedefs) []mismatch {
	var out []mismatch
	for _, s := range sigs {
		p, ok := protos[s.Name]
		if !ok {
			out = append(out, mismatch{s.Name, "no C prototype in the headers"})
			continue
		}
		if len(s.Args) != len(p.Args) {
			out = append(out, mismatch{s.Name, fmt.Sprintf("%d Go arguments, %d in C (%s)", len(s.Args), len(p.Args), cSig(p))})
			continue
		}
		for i, g := range s.Args {
			if !compatible(p.Args[i], g, td) {
				out = append(out, mismatch{s.Name, fmt.Sprintf("argument %d is %s in Go, %s in C", i+1, g, p.Args[i])})
			}
		}
		if p.Ret.Base == "void" && p.Ret.Ptr == 0 {
			if s.Ret != "" {
				out = append(out, mismatch{s.Name, fmt.Sprintf("Go returns %s, C returns void", s.Ret)})
			}
		} else if s.Ret == "" {
			// ignoring a C result is harmless for scalars but loses handles
			if td.structs[p.Ret.Base] != nil && p.Ret.Ptr == 0 {
				out = append(out, mismatch{s.Name, fmt.Sprintf("Go drops the returned %s", p.Ret)})
			}
		} else if !compatible(p.Ret, s.Ret, td) {
			out = append(out, mismatch{s.Name, fmt.Sprintf("Go returns %s, C returns %s", s.Ret, p.Ret)})
		}
	}
	return out
}

func cSig(p proto) string {
	var a []string
	for _, t := range p.Args {
		a = append(a, t.String())
	}
	return p.Ret.String() + " " + p.Name + "(" + strings.Join(a, ", ") + ")"
}

// compatible reports whether a Go kind (as mlxffi.Signatures spells it)
// marshals the way the C type is passed on amd64 and arm64.
func compatible(c cType, g string, td *typedefs) bool {
	if c.Ptr > 0 {
		switch {
		case g == "uintptr" || g == "unsafe.Pointer":
			return true // an opaque address
		case g == "string":
			return c.Ptr == 1 && (c.Base == "char")
		case strings.HasPrefix(g, "func"):
			return c.Base == "fnptr"
		case strings.HasPrefix(g, "*"):
			if c.Base == "void" || c.Base == "fnptr" {
				return true
			}
			return compatible(cType{Base: c.Base, Ptr: c.Ptr - 1}, g[1:], td)
		}
		return false
	}
	if td.enums[c.Base] {
		return g == "int32" || g == "uint32"
	}
	if fields, ok := td.structs[c.Base]; ok {
		if len(fields) == 1 && fields[0].Ptr > 0 {
			return g == "uintptr" || g == "unsafe.Pointer" // a one-pointer handle
		}
		var want []string
		for _, f := range fields {
			want = append(want, f.String())
		}
		if !strings.HasPrefix(g, "struct{") {
			return false
		}
		gf := strings.Split(strings.TrimSuffix(strings.TrimPrefix(g, "struct{"), "}"), ",")
		if len(gf) != len(fields) {
			return false
		}
		for i, f := range fields {
			if !compatible(f, gf[i], td) {
				return false
			}
		}
		return true
	}
	switch c.Base {
	case "int", "int32_t":
		return g == "int32"
	case "unsigned int", "uint32_t":
		return g == "uint32"
	case "int64_t", "long long":
		return g == "int64"
	case "uint64_t", "unsigned long long":
		return g == "uint64"
	case "size_t", "uintptr_t":
		return g == "uint64" || g == "uintptr"
	case "bool":
		return g == "bool"
	case "float":
		return g == "float32"
	case "double":
		return g == "float64"
	case "char", "int8_t":
		return g == "int8" || g == "uint8"
	case "uint8_t":
		return g == "uint8"
	case "int16_t":
		return g == "int16"
	case "uint16_t":
		return g == "uint16"
	}
	return false
}
