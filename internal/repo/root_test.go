package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRootHoldsThisPackage(t *testing.T) {
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"go.mod", "internal/repo/root.go"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("Root() = %s, which lacks %s: %v", root, p, err)
		}
	}
}
