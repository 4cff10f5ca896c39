package modmap

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository root (this package is tools/modmap).
const root = "../.."

func readMap(t *testing.T) Map {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// workspaceModules lists the module folders named in go.work.
func workspaceModules(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "work", "edit", "-json", filepath.Join(root, "go.work")).Output()
	if err != nil {
		t.Skipf("go work edit: %v (the go command is needed for this check)", err)
	}
	var w struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &w); err != nil {
		t.Fatal(err)
	}
	var mods []string
	for _, u := range w.Use {
		mods = append(mods, filepath.Clean(u.DiskPath))
	}
	return mods
}

type listed struct {
	ImportPath string
	Module     *struct{ Path string }
	Imports    []string
	Standard   bool
}

// imports lists the direct imports of every non-test package of a module,
// with the module each imported package belongs to.
func imports(t *testing.T, mod string) []Import {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Module,Imports,Standard", "./...")
	cmd.Dir = filepath.Join(root, mod)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v", mod, err)
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	var ims []Import
	for _, p := range pkgs {
		if p.Module == nil || p.Module.Path != Prefix+mod {
			continue // only the module's own packages import under its rule
		}
		for _, path := range p.Imports {
			q, ok := pkgs[path]
			im := Import{From: mod, Package: p.ImportPath, Path: path}
			if ok && !q.Standard && q.Module != nil {
				im.ModulePath = q.Module.Path
			}
			ims = append(ims, im)
		}
	}
	return ims
}

// TestWorkspaceFollowsMap is the real check: every module's imports are
// the ones its README row allows, and every module has a row.
func TestWorkspaceFollowsMap(t *testing.T) {
	m := readMap(t)
	for _, mod := range workspaceModules(t) {
		if m.Find(mod) == nil {
			t.Errorf("module %s is in go.work but has no row in the README's module map", mod)
			continue
		}
		for _, v := range m.Check(imports(t, mod)) {
			t.Errorf("%v", v)
		}
	}
}

// TestCheckCatchesNewArrow shows the check failing: the real map, with
// model importing serve (an arrow the README does not list) and kv
// importing a third-party module.
func TestCheckCatchesNewArrow(t *testing.T) {
	m := readMap(t)
	bad := []Import{
		{From: "model", Package: Prefix + "model", Path: Prefix + "serve", ModulePath: Prefix + "serve"},
		{From: "kv", Package: Prefix + "kv", Path: "github.com/spf13/pflag", ModulePath: "github.com/spf13/pflag"},
		{From: "kv", Package: Prefix + "kv", Path: Prefix + "nosuch", ModulePath: Prefix + "nosuch"},
	}
	got := m.Check(bad)
	if len(got) != len(bad) {
		t.Fatalf("Check found %d violations in %d bad imports: %v", len(got), len(bad), got)
	}
	ok := []Import{
		{From: "model", Package: Prefix + "model", Path: Prefix + "kv", ModulePath: Prefix + "kv"},
		{From: "model", Package: Prefix + "model", Path: "fmt"},
		{From: "mlxffi", Package: Prefix + "mlxffi", Path: "github.com/ebitengine/purego", ModulePath: "github.com/ebitengine/purego"},
		{From: "cli", Package: Prefix + "cli", Path: Prefix + "tensor/cpu", ModulePath: Prefix + "tensor"},
		{From: "tools", Package: Prefix + "tools/x", Path: "example.com/any", ModulePath: "example.com/any"},
	}
	if got := m.Check(ok); len(got) != 0 {
		t.Fatalf("Check rejected allowed imports: %v", got)
	}
}

func TestParse(t *testing.T) {
	const readme = "intro\n\n| module | owns | may import |\n|---|---|---|\n" +
		"| `a` | x | stdlib |\n| `b` | y | a, purego (bindings) |\n| `c` | z | everything above, pflag |\n| `t` | w | anything |\n\nafter\n| x | y |\n"
	m, err := Parse(strings.NewReader(readme))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 4 {
		t.Fatalf("rows = %d, want 4: %+v", len(m), m)
	}
	b, c := m.Find("b"), m.Find("c")
	if strings.Join(b.Modules, ",") != "a" || strings.Join(b.ThirdParty, ",") != "purego" {
		t.Errorf("b = %+v", *b)
	}
	if strings.Join(c.Modules, ",") != "a,b" || strings.Join(c.ThirdParty, ",") != "pflag" {
		t.Errorf("c = %+v", *c)
	}
	if !m.Find("t").Anything || m.Find("a").Anything {
		t.Errorf("anything flags wrong: %+v", m)
	}
	if _, err := Parse(strings.NewReader("no table here\n")); err == nil {
		t.Error("Parse accepted a README without a module map")
	}
}

// TestOneVersionPerModule: every third-party module is required at one
// version across the workspace's go.mod files.
func TestOneVersionPerModule(t *testing.T) {
	seen := map[string]map[string][]string{} // path → version → modules
	for _, mod := range workspaceModules(t) {
		out, err := exec.Command("go", "mod", "edit", "-json", filepath.Join(root, mod, "go.mod")).Output()
		if err != nil {
			t.Fatalf("go mod edit -json %s: %v", mod, err)
		}
		var gm struct {
			Require []struct{ Path, Version string }
		}
		if err := json.Unmarshal(out, &gm); err != nil {
			t.Fatal(err)
		}
		for _, r := range gm.Require {
			if seen[r.Path] == nil {
				seen[r.Path] = map[string][]string{}
			}
			seen[r.Path][r.Version] = append(seen[r.Path][r.Version], mod)
		}
	}
	for path, vs := range seen {
		if len(vs) > 1 {
			t.Errorf("%s is required at %d versions: %v", path, len(vs), vs)
		}
	}
}
