package dashboard

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestTail follows one file through what a writer and an operator do to
// it: appends, a line written in two parts, truncation, replacement,
// removal and an over-long line.
func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.jsonl")
	tl := tail{path: path}
	type op struct {
		name  string
		do    func()
		lines []string
		reset bool
		long  int
	}
	appendS := func(s string) func() { return func() { appendFile(t, path, s) } }
	for _, o := range []op{
		{name: "missing file", do: func() {}},
		{name: "two lines", do: appendS("a\nb\n"), lines: []string{"a", "b"}},
		{name: "nothing new", do: func() {}},
		{name: "half a line", do: appendS("c1"), lines: nil},
		{name: "its end", do: appendS("c2\n\n  \nd\n"), lines: []string{"c1c2", "d"}},
		{name: "truncated", do: func() { writeFile(t, path, "e\n") }, lines: []string{"e"}, reset: true},
		{name: "replaced by a longer file", do: func() {
			tmp := path + ".new"
			writeFile(t, tmp, "f\ng\nh\n")
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}, lines: []string{"f", "g", "h"}, reset: true},
		{name: "over-long line, unfinished", do: appendS(strings.Repeat("x", maxLine+10)), lines: nil},
		{name: "its end, then a line", do: appendS("xx\ni\n"), lines: []string{"i"}, long: 1},
		{name: "over-long line in one go", do: appendS(strings.Repeat("y", maxLine+1) + "\nj\n"), lines: []string{"j"}, long: 1},
		{name: "removed", do: func() { os.Remove(path) }, reset: true},
		{name: "created again", do: appendS("k\n"), lines: []string{"k"}},
	} {
		o.do()
		var lines []string
		reset := false
		long, err := tl.read(func() { reset = true }, func(l []byte) { lines = append(lines, string(l)) })
		if err != nil {
			t.Fatalf("%s: %v", o.name, err)
		}
		if !reflect.DeepEqual(lines, o.lines) || reset != o.reset || long != o.long {
			t.Errorf("%s: lines %q reset %v long %d, want %q %v %d", o.name, lines, reset, long, o.lines, o.reset, o.long)
		}
	}
}

// TestTailLimit reads a file in bounded parts.
func TestTailLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.jsonl")
	writeFile(t, path, "aaa\nbbb\nccc\n")
	tl := tail{path: path, limit: 6}
	var lines []string
	for range 3 {
		if _, err := tl.read(func() {}, func(l []byte) { lines = append(lines, string(l)) }); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"aaa", "bbb", "ccc"}; !reflect.DeepEqual(lines, want) {
		t.Errorf("lines %q, want %q", lines, want)
	}
}
