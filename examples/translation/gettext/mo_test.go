package gettext

import (
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var sample = []Message{
	{ID: "invalid '%s' argument", Str: []string{"'%s'参数无效"}},
	{ID: "%d file", IDPlural: "%d files", Str: []string{"%d个文件"}},
	{ID: "%d row", IDPlural: "%d rows", Str: []string{"%d row (zh0)", "%d rows (zh1)"}},
	{Context: "menu", ID: "Open", Str: []string{"打开"}},
	{Context: "verb", ID: "%d item", IDPlural: "%d items", Str: []string{"%d 项"}},
}

const sampleHeader = "Project-Id-Version: R 4.2.2\nContent-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=1; plural=0;\n"

func TestParseBothEndians(t *testing.T) {
	for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		c, err := Parse(Encode(sampleHeader, sample, bo))
		if err != nil {
			t.Fatalf("%v: %v", bo, err)
		}
		want := map[string]Message{}
		for _, m := range sample {
			want[m.Context+"|"+m.ID] = m
		}
		got := map[string]Message{}
		for _, m := range c.Messages {
			got[m.Context+"|"+m.ID] = m
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%v: messages (-want +got):\n%s", bo, diff)
		}
		if c.Header["Plural-Forms"] != "nplurals=1; plural=0;" || c.Header["Project-Id-Version"] != "R 4.2.2" {
			t.Errorf("%v: header = %v", bo, c.Header)
		}
	}
}

func TestParseErrors(t *testing.T) {
	good := Encode(sampleHeader, sample, binary.LittleEndian)
	corrupt := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:20]},
		{"bad magic", corrupt(func(b []byte) []byte { b[0] = 0; return b })},
		{"major revision 2", corrupt(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[4:], 2<<16); return b })},
		{"too many strings", corrupt(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[8:], 1<<20); return b })},
		{"truncated strings", good[:len(good)-10]},
		{"string offset out of range", corrupt(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[28+4:], 1<<30); return b })},
		{"plural translation without msgid_plural", Encode("", []Message{{ID: "x", Str: []string{"a", "b"}}}, binary.LittleEndian)},
	} {
		if _, err := Parse(tc.b); err == nil {
			t.Errorf("%s: want error", tc.name)
		}
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.mo")); err == nil {
		t.Error("missing file: want error")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Encode(sampleHeader, sample, binary.LittleEndian))
	f.Add(Encode(sampleHeader, sample, binary.BigEndian))
	f.Fuzz(func(t *testing.T, b []byte) {
		Parse(b) // must not panic
	})
}

// TestRealCatalogue reads R's zh_CN stats catalogue fetched by fetch-data.sh.
func TestRealCatalogue(t *testing.T) {
	root, _ := filepath.Abs("../../..")
	cmd := exec.Command("bash", filepath.Join(root, "examples/translation/fetch-data.sh"))
	if out, err := cmd.CombinedOutput(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
			t.Skipf("data fetch failed for lack of network: %s", out)
		}
		t.Fatalf("fetch-data.sh: %v\n%s", err, out)
	}
	c, err := ReadFile(filepath.Join(root, "data/translation/r-base-core/usr/lib/R/library/translations/zh_CN/LC_MESSAGES/R-stats.mo"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Messages) < 500 {
		t.Errorf("R-stats.mo: %d messages, want more than 500", len(c.Messages))
	}
	if ct := c.Header["Content-Type"]; ct != "text/plain; charset=UTF-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	plural := 0
	for _, m := range c.Messages {
		if m.IDPlural != "" {
			plural++
		}
	}
	if plural == 0 {
		t.Error("no plural messages found in R-stats.mo")
	}
}
