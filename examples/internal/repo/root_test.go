package repo

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRootHoldsThisPackage: Root is the repository root, above the examples
// module, not the examples module's own directory.
func TestRootHoldsThisPackage(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"go.mod", "go.work", "examples/go.mod", "examples/internal/repo/root.go"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("Root() = %s, which lacks %s: %v", root, p, err)
		}
	}
}

func TestDeclares(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		gomod string
		want  bool
	}{
		{"module github.com/troupe-ml/troupe\n\ngo 1.26.0\n", true},
		{"// a comment\nmodule \"github.com/troupe-ml/troupe\"\n", true},
		{"module examples\n\nrequire github.com/troupe-ml/troupe v0.0.0\n", false},
		{"module github.com/troupe-ml/troupe/v2\n", false},
	} {
		path := filepath.Join(dir, "go.mod")
		if err := os.WriteFile(path, []byte(tt.gomod), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := declares(path); got != tt.want {
			t.Errorf("declares(%q) = %v, want %v", tt.gomod, got, tt.want)
		}
	}
	if declares(filepath.Join(dir, "missing", "go.mod")) {
		t.Error("a missing go.mod declares the module")
	}
}
