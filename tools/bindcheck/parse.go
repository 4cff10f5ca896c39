package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// cType is one C type as the checker sees it: a base name and the number
// of pointer levels; a function pointer is the base "fnptr" at level 1.
type cType struct {
	Base string
	Ptr  int
}

func (t cType) String() string { return t.Base + strings.Repeat("*", t.Ptr) }

// proto is a parsed C prototype.
type proto struct {
	Name string
	Ret  cType
	Args []cType
	File string
}

// typedefs records what each mlx-c typedef name stands for.
type typedefs struct {
	enums   map[string]bool
	structs map[string][]cType // field types of typedef'd structs
	fnptrs  map[string]bool
}

var (
	reBlockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	reLineComment  = regexp.MustCompile(`//[^\n]*`)
	rePreproc      = regexp.MustCompile(`(?m)^\s*#.*$`)
	reStruct       = regexp.MustCompile(`(?s)typedef\s+struct\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;`)
	reEnum         = regexp.MustCompile(`(?s)typedef\s+enum\s+\w*\s*\{.*?\}\s*(\w+)\s*;`)
	reFnTypedef    = regexp.MustCompile(`(?s)typedef\s+[^;{}]*?\(\s*\*\s*(\w+)\s*\)\s*\([^;]*?\)\s*;`)
	reOtherTypedef = regexp.MustCompile(`(?s)typedef\s+[^;{}]*;`)
	reExternC      = regexp.MustCompile(`extern\s+"C"\s*\{`)
	reIdent        = regexp.MustCompile(`[A-Za-z_]\w*`)
)

// parseDir parses every header of an mlx-c include directory: dir may be
// the include root (holding mlx/c) or mlx/c itself.
func parseDir(dir string) (map[string]proto, *typedefs, error) {
	if st, err := os.Stat(filepath.Join(dir, "mlx", "c")); err == nil && st.IsDir() {
		dir = filepath.Join(dir, "mlx", "c")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.h"))
	if err != nil {
		return nil, nil, err
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("no headers in %s", dir)
	}
	sort.Strings(files)
	srcs := map[string]string{}
	td := &typedefs{enums: map[string]bool{}, structs: map[string][]cType{}, fnptrs: map[string]bool{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, err
		}
		s := clean(string(b))
		collectTypedefs(s, td)
		srcs[filepath.Base(f)] = s
	}
	protos := map[string]proto{}
	for name, s := range srcs {
		for _, p := range parseProtos(s, td) {
			p.File = name
			protos[p.Name] = p
		}
	}
	return protos, td, nil
}

func clean(s string) string {
	s = reBlockComment.ReplaceAllString(s, " ")
	s = reLineComment.ReplaceAllString(s, " ")
	return rePreproc.ReplaceAllString(s, " ")
}

func collectTypedefs(s string, td *typedefs) {
	for _, m := range reStruct.FindAllStringSubmatch(s, -1) {
		var fields []cType
		for _, f := range strings.Split(m[1], ";") {
			if strings.TrimSpace(f) == "" {
				continue
			}
			fields = append(fields, parseDecl(f, td))
		}
		td.structs[m[2]] = fields
	}
	for _, m := range reEnum.FindAllStringSubmatch(s, -1) {
		td.enums[m[1]] = true
	}
	for _, m := range reFnTypedef.FindAllStringSubmatch(s, -1) {
		td.fnptrs[m[1]] = true
	}
}

// parseProtos finds the function declarations of a cleaned header.
func parseProtos(s string, td *typedefs) []proto {
	s = reStruct.ReplaceAllString(s, ";")
	s = reEnum.ReplaceAllString(s, ";")
	s = reFnTypedef.ReplaceAllString(s, ";")
	s = reOtherTypedef.ReplaceAllString(s, ";")
	s = reExternC.ReplaceAllString(s, ";")
	s = strings.ReplaceAll(s, "}", ";")
	var out []proto
	for _, stmt := range splitTop(s, ';') {
		stmt = strings.TrimSpace(stmt)
		open := strings.IndexByte(stmt, '(')
		if open < 0 || !strings.HasSuffix(stmt, ")") || strings.HasPrefix(stmt, "static") {
			continue
		}
		head := strings.TrimSpace(stmt[:open])
		ids := reIdent.FindAllStringIndex(head, -1)
		if len(ids) < 2 {
			continue
		}
		last := ids[len(ids)-1]
		name := head[last[0]:last[1]]
		ret := parseType(head[:last[0]], td)
		inner := stmt[open+1 : len(stmt)-1]
		var args []cType
		if t := strings.TrimSpace(inner); t != "" && t != "void" {
			for _, a := range splitTop(inner, ',') {
				args = append(args, parseDecl(a, td))
			}
		}
		out = append(out, proto{Name: name, Ret: ret, Args: args})
	}
	return out
}

// splitTop splits at sep outside parentheses.
func splitTop(s string, sep byte) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case sep:
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// parseDecl reads a parameter or field declaration ("const mlx_array a",
// "const int* shape", "int (*fun)(...)"), dropping the name.
func parseDecl(d string, td *typedefs) cType {
	if strings.Contains(d, "(") {
		return cType{Base: "fnptr", Ptr: 1}
	}
	ptr := strings.Count(d, "*")
	var ids []string
	for _, id := range reIdent.FindAllString(d, -1) {
		switch id {
		case "const", "struct", "enum", "volatile", "restrict":
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) >= 2 && !isTypeWord(ids[len(ids)-1]) {
		ids = ids[:len(ids)-1] // the parameter name
	}
	base := strings.Join(ids, " ")
	if td.fnptrs[base] {
		return cType{Base: "fnptr", Ptr: ptr + 1}
	}
	return cType{Base: base, Ptr: ptr}
}

func parseType(s string, td *typedefs) cType { return parseDecl(s+" _", td) }

// isTypeWord reports whether an identifier continues a multi-word type
// name (so it is not a parameter name).
func isTypeWord(id string) bool {
	switch id {
	case "int", "long", "short", "char", "unsigned", "signed", "double":
		return true
	}
	return false
}
