package corpus

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestSplitOfStable(t *testing.T) {
	// FNV-1a 64 of "" is 0xcbf29ce484222325; mod 100 = 25 → train.
	if got := SplitOf(""); got != Train {
		t.Errorf("SplitOf(\"\") = %v, want train", got)
	}
	counts := map[Split]int{}
	for i := 0; i < 10000; i++ {
		counts[SplitOf(strings.Repeat("x", i%37)+string(rune('a'+i%26))+strings.Repeat("y", i/26))]++
	}
	if counts[Train] < 7500 || counts[Test] < 700 || counts[Val] < 700 {
		t.Errorf("split proportions off: %v", counts)
	}
}

func TestParseCEDICTLine(t *testing.T) {
	e, ok := parseCEDICTLine("主成分分析 主成分分析 [zhu3 cheng2 fen4 fen1 xi1] /principal component analysis (statistics)/PCA/")
	if !ok || e.Simplified != "主成分分析" || len(e.Senses) != 2 || e.Senses[1] != "PCA" {
		t.Fatalf("parse = %+v, %v", e, ok)
	}
	senses, tagged := candidateSenses(e)
	if len(senses) != 1 || senses[0] != "principal component analysis" || !tagged[0] {
		t.Errorf("candidateSenses = %v %v", senses, tagged)
	}
	if _, ok := parseCEDICTLine("garbage"); ok {
		t.Error("garbage parsed")
	}
}

func TestBuildGlossaryMines(t *testing.T) {
	dict := []DictEntry{
		{Simplified: "向量", Senses: []string{"vector (math.)"}},
		{Simplified: "矢量", Senses: []string{"vector"}},
		{Simplified: "矩阵", Senses: []string{"matrix (math.)"}},
		{Simplified: "模式", Senses: []string{"mode"}},
		{Simplified: "众数", Senses: []string{"mode (statistics)"}},
	}
	pairs := []Pair{
		{En: "invalid vector", Zh: "向量无效"},
		{En: "vector too long", Zh: "向量太长"},
		{En: "the vector", Zh: "矢量"},
		{En: "bad mode", Zh: "模式错误"},
		{En: "mode of x", Zh: "x的众数"},
	}
	g := BuildGlossary(pairs, dict, 2)
	if tm, ok := g.Lookup("Vector"); !ok || tm.Zh != "向量" || tm.Source != "mined" || tm.Support != 2 {
		t.Errorf("vector → %+v %v, want 向量 mined support 2", tm, ok)
	}
	// "mode": mined support 1 < 2, so the tagged CEDICT sense is kept.
	if tm, ok := g.Lookup("mode"); !ok || tm.Zh != "众数" || tm.Source != "cedict" {
		t.Errorf("mode → %+v %v", tm, ok)
	}
	// "matrix" never occurs: dropped.
	if _, ok := g.Lookup("matrix"); ok {
		t.Error("unsupported term kept")
	}
	if got := g.TermsIn("A vector of modes"); len(got) != 1 || got[0].En != "vector" {
		t.Errorf("TermsIn = %v", got)
	}
}

// TestRealData loads the real data (fetching it if needed).
func TestRealData(t *testing.T) {
	d, err := Load()
	if errors.Is(err, ErrNoNetwork) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	n := len(d.Train) + len(d.Val) + len(d.Test)
	if n < 4500 || n > 5200 {
		t.Errorf("%d pairs, want about 4,800", n)
	}
	for _, p := range d.Test {
		if SplitOf(p.En) != Test {
			t.Fatalf("test pair %q not in test split", p.En)
		}
	}
	if len(d.Glossary.Terms) < 100 {
		t.Errorf("glossary has %d terms", len(d.Glossary.Terms))
	}
	if tm, ok := d.Glossary.Lookup("degrees of freedom"); !ok || tm.Zh != "自由度" {
		t.Errorf("degrees of freedom → %+v, %v", tm, ok)
	}
	for _, a := range []string{"PCA", "CPU", "NA"} {
		if !d.Acronyms[a] {
			t.Errorf("acronym %s missing", a)
		}
	}
	// RGui.mo is GB2312; read as UTF-8 its translations were U+FFFD.
	bad, rgui := 0, 0
	for _, ps := range [][]Pair{d.Train, d.Val, d.Test} {
		for _, p := range ps {
			if strings.ContainsRune(p.Zh, utf8.RuneError) {
				bad++
			}
			if p.Domain == "RGui" && strings.Contains(p.Zh, "文件") {
				rgui++
			}
		}
	}
	if bad > 0 || rgui == 0 {
		t.Errorf("%d translations with U+FFFD, %d RGui translations containing 文件 (want 0 and > 0)", bad, rgui)
	}
}

// TestLoadPairsDecodesCharset loads a GB2312 catalogue (as RGui.mo is) and
// a UTF-8 one (testdata/a.mo and b.mo, written by gettext's test encoder)
// and checks both come back as the same UTF-8 text; an unknown charset
// (testdata/c.mo) is an error naming it.
func TestLoadPairsDecodesCharset(t *testing.T) {
	dir := t.TempDir()
	md := filepath.Join(dir, moDir)
	if err := os.MkdirAll(md, 0o755); err != nil {
		t.Fatal(err)
	}
	add := func(name string) {
		b, err := os.ReadFile(filepath.Join("testdata", name+".mo"))
		if err == nil {
			err = os.WriteFile(filepath.Join(md, name+".mo"), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	add("a")
	add("b")
	pairs, err := LoadPairs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Pair{{En: "a open file", Zh: "打开文件", Domain: "a"}, {En: "b open file", Zh: "打开文件", Domain: "b"}}
	if d := cmp.Diff(want, pairs); d != "" {
		t.Errorf("pairs (-want +got):\n%s", d)
	}
	add("c")
	if _, err := LoadPairs(dir); err == nil || !strings.Contains(err.Error(), "x-no-such-charset") {
		t.Errorf("unknown charset: error %v", err)
	}
}
