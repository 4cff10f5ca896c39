// Package modmap checks the workspace's import arrows against the module
// map in the README, so that the layering the README promises cannot rot:
// a module may import only the modules (and third-party code) its row's
// "may import" column names.
package modmap

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Prefix is the module path prefix of the workspace's modules.
const Prefix = "github.com/mlxgo/mlxgo/"

// Rule is one row of the module map: the module and what its column
// allows.
type Rule struct {
	// Module is the workspace module's short name ("kv").
	Module string
	// Modules are the workspace modules it may import.
	Modules []string
	// ThirdParty are words naming the third-party modules it may import
	// directly ("purego" allows github.com/ebitengine/purego).
	ThirdParty []string
	// Anything means no restriction (the tools module).
	Anything bool
}

// Map is the parsed module map, in the README's row order.
type Map []Rule

// Parse reads the module map table from a README: the first Markdown table
// whose header names a "may import" column. Column words: "stdlib" allows
// nothing beyond the standard library, "everything above" every module of
// the rows above (and what they may import), "anything" no limit; a
// workspace module is named by its short name, third-party code by a word
// of its module path (text in parentheses is a comment).
func Parse(r io.Reader) (Map, error) {
	sc := bufio.NewScanner(r)
	var m Map
	col := -1
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if col >= 0 && len(m) > 0 {
				break // end of the table
			}
			continue
		}
		cells := splitRow(line)
		if col < 0 {
			if i := slices.IndexFunc(cells, func(c string) bool { return strings.EqualFold(c, "may import") }); i >= 0 {
				col = i
			}
			continue
		}
		if strings.Trim(cells[0], "-: ") == "" {
			continue // the separator row
		}
		if col >= len(cells) {
			return nil, fmt.Errorf("modmap: row %q has no may-import cell", line)
		}
		rule := Rule{Module: strings.Trim(cells[0], "` ")}
		for _, w := range strings.Split(cells[col], ",") {
			w = strings.TrimSpace(w)
			if i := strings.Index(w, "("); i >= 0 {
				w = strings.TrimSpace(w[:i])
			}
			w = strings.Trim(w, "` ")
			switch {
			case w == "" || w == "stdlib":
			case w == "anything":
				rule.Anything = true
			case w == "everything above":
				for _, prev := range m {
					rule.Modules = append(rule.Modules, prev.Module)
				}
			default:
				rule.ThirdParty = append(rule.ThirdParty, w) // resolved against module names below
			}
		}
		m = append(m, rule)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("modmap: no module map table (a table with a \"may import\" column) found")
	}
	// Words that name a workspace module are module arrows, not third party.
	for i := range m {
		var third []string
		for _, w := range m[i].ThirdParty {
			if m.Find(w) != nil {
				m[i].Modules = append(m[i].Modules, w)
			} else {
				third = append(third, w)
			}
		}
		m[i].ThirdParty = third
	}
	return m, nil
}

func splitRow(line string) []string {
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	cells := strings.Split(line, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// Find returns the rule for a module, or nil.
func (m Map) Find(module string) *Rule {
	for i := range m {
		if m[i].Module == module {
			return &m[i]
		}
	}
	return nil
}

// Import is one import edge: a package of module From imports package
// Path, which belongs to module ModulePath ("" for the standard library).
type Import struct {
	From       string
	Package    string
	Path       string
	ModulePath string
}

// Violation is an import the map does not allow.
type Violation struct {
	Import
	Reason string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s imports %s (%s)", v.From, v.Package, v.Path, v.Reason)
}

// Check returns the imports that break the map: an import of a workspace
// module not in the importer's column, of a module that has no row, or of
// third-party code the column does not name. Imports within a module and
// of the standard library are always allowed.
func (m Map) Check(imports []Import) []Violation {
	var out []Violation
	for _, im := range imports {
		rule := m.Find(im.From)
		if rule == nil {
			out = append(out, Violation{im, "module " + im.From + " has no row in the module map"})
			continue
		}
		if rule.Anything || im.ModulePath == "" {
			continue
		}
		if to, ok := strings.CutPrefix(im.ModulePath, Prefix); ok {
			if to == im.From || slices.Contains(rule.Modules, to) {
				continue
			}
			if m.Find(to) == nil {
				out = append(out, Violation{im, "module " + to + " has no row in the module map"})
			} else {
				out = append(out, Violation{im, "the map does not list " + to + " for " + im.From})
			}
			continue
		}
		if !slices.ContainsFunc(rule.ThirdParty, func(w string) bool { return pathHasWord(im.ModulePath, w) }) {
			out = append(out, Violation{im, "third-party module " + im.ModulePath + " is not listed for " + im.From})
		}
	}
	return out
}

// pathHasWord reports whether a module path contains w as whole path
// elements ("x/text" in golang.org/x/text, "purego" in
// github.com/ebitengine/purego).
func pathHasWord(path, w string) bool {
	p := "/" + path + "/"
	return strings.Contains(p, "/"+w+"/")
}
