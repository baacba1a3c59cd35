package model

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// modelImport is the import path of this package.
const modelImport = "github.com/allocator/allocator/pkg/model"

// mayBranch are the files and folders (ending in "/": the files directly
// inside, not its sub-packages) whose code may branch on a model. Everywhere
// else the model is chosen once, by these, and the rest holds what they built.
var mayBranch = []string{
	"pkg/model/",            // Parse
	"pkg/subrange/range.go", // each model's usable-range rules
	"internal/ipallocator/", // the one place a model becomes allocators, stores, repairs, migrations
	"internal/transition/",  // a replica's record carries its model; the protocol's rules differ by it
	"internal/invariants/",  // the test harnesses' reader of either model's records in etcd
}

// maySpell are the files and folders (as in mayBranch) in which "bitmap"
// or "ipaddress" may be a whole string literal: the constants, and names
// that are not models.
var maySpell = []string{
	"pkg/model/model.go",             // the constants
	"internal/registry/ipaddresses/", // the IPAddress resource's storage: its singular name, its log key
}

// TestModelChosenOnce parses the module's non-test, non-generated Go files
// and fails where code outside mayBranch compares a model constant (== or
// != against model.Bitmap, model.IPAddress or model.Auto, or a case listing
// one), where code outside this package converts text into a Name without
// Parse (model.Name(x)), and where a model's name is spelled as a string
// literal outside maySpell. A failure names the file and line; move the
// decision into internal/ipallocator, or, when the place is a new home for a
// model's rules, add it to mayBranch with the reason.
func TestModelChosenOnce(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		problems = append(problems, checkFile(fset, f, rel)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// checkFile returns what file rel does that only mayBranch and maySpell may.
func checkFile(fset *token.FileSet, f *ast.File, rel string) []string {
	branchOK, spellOK := listed(mayBranch, rel), listed(maySpell, rel)
	local := importName(f)
	isConst := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || local == "" {
			return false
		}
		x, ok := sel.X.(*ast.Ident)
		return ok && x.Name == local && (sel.Sel.Name == "Bitmap" || sel.Sel.Name == "IPAddress" || sel.Sel.Name == "Auto")
	}
	var out []string
	report := func(n ast.Node, what string) {
		out = append(out, fset.Position(n.Pos()).String()+": "+what)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if s, err := strconv.Unquote(n.Value); n.Kind == token.STRING && err == nil && (s == "bitmap" || s == "ipaddress") && !spellOK {
				report(n, "the model name "+n.Value+" spelled as a string: use model.Bitmap/model.IPAddress, or model.Parse")
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isConst(n.X) || isConst(n.Y)) && !branchOK {
				report(n, "a comparison with a model constant: ask a internal/ipallocator entry instead")
			}
		case *ast.CaseClause:
			if slices.ContainsFunc(n.List, isConst) && !branchOK {
				report(n, "a case on a model constant: ask a internal/ipallocator entry instead")
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && len(n.Args) == 1 && sel.Sel.Name == "Name" && local != "" {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == local {
					report(n, "text converted to a model.Name: use model.Parse")
				}
			}
		}
		return true
	})
	return out
}

// listed reports whether rel is one of the files in list, or directly
// inside one of its folders.
func listed(list []string, rel string) bool {
	for _, l := range list {
		if l == rel || (strings.HasSuffix(l, "/") && strings.HasPrefix(rel, l) && !strings.Contains(rel[len(l):], "/")) {
			return true
		}
	}
	return false
}

// importName is the name f refers to this package by, or "" when f does
// not import it.
func importName(f *ast.File) string {
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == modelImport {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return "model"
		}
	}
	return ""
}

// moduleRoot is the folder of the module's go.mod, above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the package")
		}
		dir = parent
	}
}

// TestCheckFile shows what TestModelChosenOnce catches, and where it lets
// the same code pass.
func TestCheckFile(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, rel, src string
		want           int
	}{
		{"comparison", "internal/app/x.go", `if m == model.Bitmap {}`, 1},
		{"negated, aliased", "internal/app/x.go", `if models.IPAddress != m {}`, 1},
		{"case", "internal/apiserver/x.go", `switch m { case model.Auto: }`, 1},
		{"string literal", "internal/app/x.go", `if s == "bitmap" {}`, 1},
		{"conversion", "internal/apiserver/x.go", `_ = model.Name(s)`, 1},
		{"use, not a branch", "internal/app/x.go", `_ = f(model.IPAddress)`, 0},
		{"allowed folder", "internal/ipallocator/x.go", `if m == model.Bitmap {}`, 0},
		{"sub-package of an allowed folder", "pkg/repair/iprepair/x.go", `if m == model.Bitmap {}`, 1},
		{"help text", "internal/app/x.go", `_ = "--to bitmap or ipaddress"`, 0},
		{"the resource's storage", "internal/registry/ipaddresses/x.go", `log("ipaddress", name)`, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			imp := `import model "` + modelImport + `"`
			if strings.Contains(tt.src, "models.") {
				imp = `import models "` + modelImport + `"`
			}
			src := "package x\n" + imp + "\nfunc _() {\n" + tt.src + "\n}\n"
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, tt.rel, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := checkFile(fset, f, tt.rel); len(got) != tt.want {
				t.Errorf("%s in %s: %d findings %v, want %d", tt.src, tt.rel, len(got), got, tt.want)
			}
		})
	}
}
