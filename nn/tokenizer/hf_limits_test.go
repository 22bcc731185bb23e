package tokenizer

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// splitPre is a pre-tokenizer of one Split with pattern regex, then
// ByteLevel.
func splitPre(regex string) string {
	p, _ := json.Marshal(regex)
	return `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` + string(p) + `},` +
		`"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]}`
}

// TestHFHostilePatterns: Split patterns other than the three the package
// matches by hand — catastrophic backtracking for a backtracking engine,
// Oniguruma constructs Go's regexp lacks, huge alternations, near misses
// of the real patterns — are refused when the tokenizer loads, quickly,
// with an error that names the pattern (cut short when it is long).
func TestHFHostilePatterns(t *testing.T) {
	var alternation []string
	for i := range 5000 {
		alternation = append(alternation, fmt.Sprintf("word%d", i))
	}
	for _, pat := range []string{
		`(a+)+$`,
		`(\w+\s?)*$`,
		`(x+x+)+y`,
		`(?<=a)b`,
		`(?<!\s)\S+`,
		`\p{L}++|\p{N}*+`,
		`\s+(?!\S)`,
		`(?i:'s|'t)|\p{Han}+`,
		`[\p{L}&&[^a]]+`,
		strings.Join(alternation, "|"),
		strings.Repeat("(", 100000) + "a" + strings.Repeat(")*", 100000),
		strings.Repeat("a", 10<<20),
		patternGPT2 + `|x`,
		strings.Replace(patternQwen2, `(?i:`, `(?:`, 1),
		strings.Replace(patternLlama3, `{1,3}`, `{1,3}+`, 1),
	} {
		start := time.Now()
		_, err := ParseHF(tinyHF(nil, splitPre(pat), "null", ""), nil)
		if err == nil {
			t.Errorf("%.60q: loaded, want an error", pat)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "Split regex") || !strings.Contains(msg, clip(pat)) {
			t.Errorf("%.60q: error %q does not name the pattern", pat, msg)
		}
		if len(msg) > 512 {
			t.Errorf("%.60q: error of %d bytes", pat, len(msg))
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%.60q: refused after %v", pat, d)
		}
	}
	str := strings.Replace(splitPre("x"), `{"Regex":"x"}`, `{"String":"`+strings.Repeat("s", 1<<20)+`"}`, 1)
	if _, err := ParseHF(tinyHF(nil, str, "null", ""), nil); err == nil || !strings.Contains(err.Error(), "Split pattern") || len(err.Error()) > 512 {
		t.Errorf("a String pattern: error %v", err)
	}
}

// TestHFSizeBounds: tables and strings beyond the bounds are refused with
// an error saying which, before they cost their size in memory.
func TestHFSizeBounds(t *testing.T) {
	long := strings.Repeat("z", 2000)
	for _, tc := range []struct {
		name, tok, want string
	}{
		{"vocab token", strings.Replace(string(tinyHF(nil, preByteLevel, "null", "")), `"vocab":{`, `"vocab":{"`+long+`":300,`, 1), "longer than 1024 bytes"},
		{"merge", strings.Replace(string(tinyHF([][2]string{{"a", "b"}}, preByteLevel, "null", "")), `"a b"`, `"`+long+` `+long+`"`, 1), "merge 0"},
		{"merge pair", strings.Replace(string(tinyHF([][2]string{{"a", "b"}}, preByteLevel, "null", "")), `["a b"]`, `[["`+long+`","`+long+`"]]`, 1), "longer than 1024 bytes"},
		{"added token", string(tinyHF(nil, preByteLevel, "null", `{"id":300,"content":"`+strings.Repeat("<", 100<<20)+`"}`)), "longer than 1024 bytes"},
		{"added tokens", string(tinyHF(nil, preByteLevel, "null", manyAdded(1100, 1000))), "more than 1048576 bytes"},
	} {
		_, err := ParseHF([]byte(tc.tok), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || len(err.Error()) > 512 {
			t.Errorf("%s: error %.300v, want a short one containing %q", tc.name, err, tc.want)
		}
	}

	// The counts, with the bounds lowered.
	lower := func(p *int, v int) func() {
		old := *p
		*p = v
		return func() { *p = old }
	}
	restore := lower(&maxVocab, 100)
	_, err := ParseHF(tinyHF(nil, preByteLevel, "null", ""), nil)
	restore()
	if err == nil || !strings.Contains(err.Error(), "256 entries, more than 100") {
		t.Errorf("vocab over its bound: %v", err)
	}
	restore = lower(&maxMerges, 1)
	_, err = ParseHF(tinyHF([][2]string{{"a", "b"}, {"c", "d"}}, preByteLevel, "null", ""), nil)
	restore()
	if err == nil || !strings.Contains(err.Error(), "2 entries, more than 1") {
		t.Errorf("merges over their bound: %v", err)
	}
	good := tinyHF(nil, preByteLevel, "null", "")
	restore = lower(&maxTokenizerJSON, len(good)-1)
	_, err = ParseHF(good, nil)
	restore()
	if err == nil || !strings.Contains(err.Error(), "tokenizer.json is") {
		t.Errorf("tokenizer.json over its bound: %v", err)
	}

	// Files larger than their bound are not read: sparse files of 2 GB
	// and 40 MiB.
	for _, tc := range []struct {
		file string
		size int64
	}{{"tokenizer.json", 2 << 30}, {"tokenizer_config.json", 40 << 20}} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), good, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(dir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(tc.size); err != nil {
			t.Skipf("cannot make a sparse file: %v", err)
		}
		f.Close()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = LoadHF(dir)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), tc.file) || !strings.Contains(err.Error(), "more than") {
			t.Errorf("%s of %d bytes: error %v", tc.file, tc.size, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
			t.Errorf("%s of %d bytes: allocated %d MiB to refuse it", tc.file, tc.size, grew>>20)
		}
	}
}

// manyAdded is the JSON of n added tokens of size bytes each.
func manyAdded(n, size int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"id":%d,"content":"%s%06d"}`, 300+i, strings.Repeat("x", size-6), i)
	}
	return strings.Join(parts, ",")
}

// TestHFEncodeLinear encodes 1 MB inputs shaped against each pre-tokenizer
// rule (long runs of white space, line breaks, digits, letters,
// punctuation, contractions) with each supported pattern and an added
// token of two spaces with lstrip, which matches all along a run of
// spaces. A super-linear step would take hours on them; the bound is a
// generous sanity check, not a speed claim.
func TestHFEncodeLinear(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var mixed strings.Builder
	pieces := []string{" ", "  ", "\n", "\r\n", "a", "Ab", "1", "123", "'s", "'LL", "!", "?!", "é", "中文", "😀", "\t", "\u3000", "<s>"}
	for mixed.Len() < 1<<20 {
		mixed.WriteString(pieces[r.IntN(len(pieces))])
	}
	inputs := map[string]string{
		"spaces":        strings.Repeat(" ", 1<<20),
		"break, spaces": "\n" + strings.Repeat(" ", 1<<20) + "x",
		"space breaks":  strings.Repeat(" \n", 1<<19),
		"letters":       strings.Repeat("a", 1<<20),
		"digits":        strings.Repeat("1", 1<<20),
		"punctuation":   strings.Repeat("!", 1<<20),
		"contractions":  strings.Repeat("'s", 1<<19),
		"apostrophes":   strings.Repeat("'", 1<<20),
		"non-ASCII":     strings.Repeat("é", 1<<19),
		"spaced words":  strings.Repeat(" a", 1<<19),
		"mixed":         mixed.String(),
	}
	added := `{"id":300,"content":"  ","lstrip":true,"rstrip":false,"normalized":false,"special":false},` +
		`{"id":301,"content":"<s>","lstrip":true,"rstrip":true,"normalized":true,"special":true}`
	merges := [][2]string{{"a", "a"}, {"aa", "aa"}, {" ", " "}, {"1", "1"}, {"'", "s"}}
	for name, pre := range map[string]string{
		"GPT-2":  preByteLevel,
		"Llama3": splitPre(patternLlama3),
		"Qwen2":  splitPre(patternQwen2),
	} {
		tok, err := ParseHF(tinyHF(merges, pre, `{"type":"NFC"}`, added), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for in, text := range inputs {
			start := time.Now()
			ids := tok.Encode(text)
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("%s, %s: %d bytes took %v", name, in, len(text), d)
			}
			if len(ids) == 0 {
				t.Errorf("%s, %s: no tokens", name, in)
			}
		}
	}
}
