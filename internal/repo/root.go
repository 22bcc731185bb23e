package repo

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
)

// Root returns the repository root: found from this source file's location
// when the sources are on disk (go run, go test), else the nearest directory
// holding go.mod at or above the working directory.
func Root() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("repo: go.mod not found above the working directory")
		}
		dir = up
	}
}
