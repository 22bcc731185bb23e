package repo

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// module is the path of the repository's root module. The examples are a
// module of their own (examples/go.mod, joined by go.work), so the nearest
// go.mod is not necessarily the root's: Root looks for this one.
const module = "github.com/troupe-ml/troupe"

// Root returns the repository root, the directory whose go.mod declares
// the troupe module: found above this source file when the sources are on
// disk (go run, go test), else above the working directory.
func Root() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		if root, ok := above(filepath.Dir(file)); ok {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	if root, ok := above(dir); ok {
		return root, nil
	}
	return "", errors.New("repo: no go.mod of " + module + " at or above the working directory")
}

// above returns the nearest directory at or above dir whose go.mod declares
// module.
func above(dir string) (string, bool) {
	for {
		if declares(filepath.Join(dir, "go.mod")) {
			return dir, true
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", false
		}
		dir = up
	}
}

// declares reports whether the go.mod file at path declares module.
func declares(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(name), `"`) == module
		}
	}
	return false
}
