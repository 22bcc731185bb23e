package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// HF is a Hugging Face tokenizer loaded from a model directory
// (tokenizer.json and tokenizer_config.json): a byte-level BPE such as
// GPT-2's, Llama 3's, Qwen2's and Qwen3's. It encodes exactly as Hugging
// Face's tokenizers do with add_special_tokens=False. It is safe for
// concurrent use by multiple goroutines; get one from LoadHF or ParseHF.
type HF struct {
	core *bpeCore
	// vocab[id] is the bytes of a regular (model vocabulary) token; nil
	// where the id is not one.
	vocab [][]byte
	// byBytes maps a regular token's bytes to its id; odd maps the tokens
	// whose text in tokenizer.json is not in the byte-level alphabet (they
	// decode to their text's UTF-8, as Hugging Face's decoder does).
	byBytes map[string]int32
	odd     map[string]int32

	added     map[int]*hfAdded // by id
	addedText map[string]int   // content -> id
	// raw matches the added tokens with normalized=false in the text as
	// given; normed those with normalized=true, in the normalized text.
	raw, normed *addedMatcher

	normalize  func(string) string // nil: no normalizer
	pre        []preStep
	size       int
	cfg        HFConfig
	addedBytes int // the added tokens' contents, while loading
	// fingerprint is Fingerprint's hash, of what decides the ids: the
	// vocabulary, merges, added tokens, normalizer and pre-tokenizer.
	fingerprint string
}

// HFConfig is what tokenizer_config.json says about special tokens and chat.
type HFConfig struct {
	// BOSToken, EOSToken and PadToken are the tokens' text ("" when unset).
	BOSToken, EOSToken, PadToken string
	// ChatTemplate is the default Jinja chat template: chat_template when it
	// is a string, the one named "default" when it is a list of named
	// templates.
	ChatTemplate string
	// AddBOS is add_bos_token; when tokenizer_config.json does not say, it
	// is whether tokenizer.json's post-processor is a template that starts
	// with the BOS token (as Llama 3's is).
	AddBOS bool
	// CleanUpTokenizationSpaces is clean_up_tokenization_spaces (default
	// true, as in transformers). Decode never applies that clean-up (it
	// removes spaces before punctuation, so text would not round-trip);
	// callers that want transformers' decode output apply it themselves.
	CleanUpTokenizationSpaces bool
}

// hfAdded is one entry of tokenizer.json's added_tokens.
type hfAdded struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// normalized reports whether the token is matched in normalized text; the
// default, as in Hugging Face's AddedToken, is true for non-special tokens.
func (a *hfAdded) normalized() bool {
	if a.Normalized != nil {
		return *a.Normalized
	}
	return !a.Special
}

// preStep is one pre-tokenizer of the Sequence: a Split with a known
// pattern, or the ByteLevel pre-tokenizer (last; with use_regex it splits
// with GPT-2's pattern; with add_prefix_space it prepends a space to each
// piece that does not start with one).
type preStep struct {
	rules       splitRules
	split       bool
	prefixSpace bool
}

// byteToRune is GPT-2's byte-level alphabet: the printable bytes '!'..'~',
// '¡'..'¬' and '®'..'ÿ' stand for themselves, the other 68 bytes for
// U+0100 onwards in byte order, so every byte is a visible character.
// runeToByte is its inverse.
var byteToRune, runeToByte = func() ([NumBytes]rune, map[rune]byte) {
	var b2r [NumBytes]rune
	r2b := make(map[rune]byte, NumBytes)
	n := rune(0)
	for b := 0; b < NumBytes; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 0x100 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

// byteLevelDecode maps a token's text in the byte-level alphabet to its
// bytes; ok is false when a character is outside the alphabet.
func byteLevelDecode(s string) (b []byte, ok bool) {
	b = make([]byte, 0, len(s))
	for _, r := range s {
		c, ok := runeToByte[r]
		if !ok {
			return nil, false
		}
		b = append(b, c)
	}
	return b, true
}

// LoadHF reads dir/tokenizer.json and, if present, dir/tokenizer_config.json.
// It returns an error naming the file and the reason for anything it cannot
// load exactly: a model other than BPE, a pre-tokenizer, normalizer or
// decoder it does not implement, a Split pattern other than GPT-2's,
// Llama 3's or Qwen2's, malformed JSON, a file or a table larger than the
// bounds below.
//
// A model directory may come from anyone, so what it can make loading and
// encoding cost is bounded: tokenizer.json is at most 128 MiB and
// tokenizer_config.json 32 MiB, the vocabulary and the merges have at most
// 4,194,304 entries each, a token's text (or a merge) is at most 1,024
// bytes and all added tokens together 1 MiB. Real byte-level BPE
// tokenizers are far inside these (Qwen3's tokenizer.json is 11 MB, with
// 151,643 tokens of at most 256 characters and 26 added tokens; Llama 3's
// has 280,147 merges; Gemma 3's is 33 MB with 262,144 tokens). No regular
// expression from the file is compiled: the Split patterns it implements
// are matched by hand in linear time, and any other is refused, since
// Oniguruma's syntax and classes (look-ahead, possessive quantifiers, \s
// and \p{...} over Unicode) have no faithful translation to Go's regexp.
func LoadHF(dir string) (*HF, error) {
	tokPath := filepath.Join(dir, "tokenizer.json")
	tj, err := readBounded(tokPath, maxTokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cj, err := readBounded(cfgPath, maxConfigJSON)
	if errors.Is(err, fs.ErrNotExist) {
		cj = nil
	} else if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parseHF(tj, cj)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", dir, err)
	}
	return t, nil
}

// Bounds on a tokenizer directory (see LoadHF). They are variables so that
// tests can lower them.
var (
	maxTokenizerJSON = 128 << 20 // bytes of tokenizer.json
	maxConfigJSON    = 32 << 20  // bytes of tokenizer_config.json
	maxVocab         = 1 << 22   // vocabulary entries
	maxMerges        = 1 << 22   // merges
	maxTokenBytes    = 1 << 10   // bytes of a token's text, an added token's content or a merge
	maxAddedBytes    = 1 << 20   // bytes of all added tokens' contents
	maxPatternBytes  = 4 << 10   // bytes of a Split pattern
)

// readBounded reads a file of at most max bytes, and fails without
// reading it when it is larger.
func readBounded(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > int64(max) {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a tokenizer file may have", path, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, fmt.Errorf("%s is more than the %d bytes a tokenizer file may have", path, max)
	}
	return b, nil
}

// clip quotes s for an error message, cut to its first 64 bytes when it is
// longer: a hostile file's strings may be megabytes long.
func clip(s string) string {
	if len(s) <= 64 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:64], len(s))
}

// ParseHF is LoadHF from the contents of tokenizer.json and
// tokenizer_config.json (nil when there is none).
func ParseHF(tokenizerJSON, configJSON []byte) (*HF, error) {
	t, err := parseHF(tokenizerJSON, configJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

type hfFile struct {
	AddedTokens   []hfAdded       `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *hfModel        `json:"model"`
}

type hfModel struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// typed is the "type" field every component of tokenizer.json has.
type typed struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

func parseHF(tj, cj []byte) (*HF, error) {
	if len(tj) > maxTokenizerJSON {
		return nil, fmt.Errorf("tokenizer.json is %d bytes, more than the %d a tokenizer file may have", len(tj), maxTokenizerJSON)
	}
	if len(cj) > maxConfigJSON {
		return nil, fmt.Errorf("tokenizer_config.json is %d bytes, more than the %d a tokenizer file may have", len(cj), maxConfigJSON)
	}
	var f hfFile
	if err := json.Unmarshal(tj, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if f.Model == nil {
		return nil, fmt.Errorf("tokenizer.json: no model")
	}
	m := f.Model
	if m.Type == "" && m.Merges != nil {
		m.Type = "BPE" // files written before models were tagged
	}
	if m.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer.json: model type %s is not supported (only byte-level BPE is)", clip(m.Type))
	}
	switch {
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("tokenizer.json: BPE dropout %v is not supported", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, fmt.Errorf("tokenizer.json: BPE continuing_subword_prefix %s is not supported", clip(*m.ContinuingSubwordPrefix))
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, fmt.Errorf("tokenizer.json: BPE end_of_word_suffix %s is not supported", clip(*m.EndOfWordSuffix))
	case m.ByteFallback:
		return nil, fmt.Errorf("tokenizer.json: BPE byte_fallback is not supported (a byte-level BPE has every byte)")
	}
	t := &HF{
		core:      &bpeCore{},
		byBytes:   make(map[string]int32, len(m.Vocab)),
		odd:       map[string]int32{},
		added:     map[int]*hfAdded{},
		addedText: map[string]int{},
	}
	if err := t.loadVocab(m); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if err := t.loadMerges(m.Merges, m.Vocab); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	var err error
	if t.normalize, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if isNull(f.Decoder) {
		return nil, fmt.Errorf("tokenizer.json: no decoder (a byte-level BPE needs the ByteLevel decoder)")
	}
	var d typed
	if err := json.Unmarshal(f.Decoder, &d); err != nil {
		return nil, fmt.Errorf("tokenizer.json: decoder: %w", err)
	}
	if d.Type != "ByteLevel" {
		return nil, fmt.Errorf("tokenizer.json: decoder %s is not supported (want ByteLevel)", clip(d.Type))
	}
	var cfg hfConfigFile
	if cj != nil {
		if err := json.Unmarshal(cj, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}
	for i := range f.AddedTokens {
		if err := t.addToken(f.AddedTokens[i]); err != nil {
			return nil, fmt.Errorf("tokenizer.json: added token %d: %w", i, err)
		}
	}
	// transformers adds the tokens of added_tokens_decoder that
	// tokenizer.json lacks.
	ids := make([]int, 0, len(cfg.AddedTokensDecoder))
	for k := range cfg.AddedTokensDecoder {
		id, err := strconv.Atoi(k)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder key %s is not a token id", clip(k))
		}
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		if _, ok := t.added[id]; ok {
			continue
		}
		a := cfg.AddedTokensDecoder[strconv.Itoa(id)]
		a.ID = id
		if err := t.addToken(a); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: added_tokens_decoder %d: %w", id, err)
		}
	}
	t.buildMatchers()
	t.fingerprint = t.hash(f.Normalizer, f.PreTokenizer)
	if t.cfg, err = cfg.config(f.PostProcessor, t); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	return t, nil
}

// loadVocab fills vocab, byBytes, odd and the core's alphabet.
func (t *HF) loadVocab(m *hfModel) error {
	if len(m.Vocab) == 0 {
		return fmt.Errorf("BPE vocab is empty")
	}
	if len(m.Vocab) > maxVocab {
		return fmt.Errorf("BPE vocab has %d entries, more than %d", len(m.Vocab), maxVocab)
	}
	for tok, id := range m.Vocab {
		if len(tok) > maxTokenBytes {
			return fmt.Errorf("vocab entry %s (id %d) is longer than %d bytes", clip(tok), id, maxTokenBytes)
		}
		if id < 0 || id >= 1<<31-1 {
			return fmt.Errorf("vocab entry %q has id %d out of range", tok, id)
		}
		if id >= t.size {
			t.size = id + 1
		}
	}
	if t.size > 8*len(m.Vocab)+1024 {
		return fmt.Errorf("vocab ids reach %d for %d entries", t.size-1, len(m.Vocab))
	}
	t.vocab = make([][]byte, t.size)
	for tok, id := range m.Vocab {
		if b, ok := byteLevelDecode(tok); ok {
			t.vocab[id] = b
			t.byBytes[string(b)] = int32(id)
		} else {
			t.vocab[id] = []byte(tok)
			t.odd[tok] = int32(id)
		}
	}
	if m.IgnoreMerges {
		t.core.whole = t.byBytes
	}
	unk := int32(-1)
	if m.UnkToken != nil {
		if id, ok := m.Vocab[*m.UnkToken]; ok {
			unk = int32(id)
		}
	}
	for b := range t.core.alphabet {
		id, ok := m.Vocab[string(byteToRune[b])]
		if !ok {
			t.core.alphabet[b] = unk
			continue
		}
		t.core.alphabet[b] = int32(id)
	}
	return nil
}

// loadMerges fills the core's merge table from "merges", which is either
// ["a b", ...] or [["a", "b"], ...]. A pair listed twice keeps its last
// rank, as in Hugging Face's maps.
func (t *HF) loadMerges(raw json.RawMessage, vocab map[string]int) error {
	var pairs [][]string
	var strs []string
	// The first element's opening character tells the two forms apart.
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return fmt.Errorf("BPE merges are not a list")
	}
	rest := bytes.TrimSpace(trimmed[1:])
	if len(rest) > 0 && rest[0] == '"' {
		if err := json.Unmarshal(raw, &strs); err != nil {
			return fmt.Errorf("BPE merges: %w", err)
		}
		if len(strs) > maxMerges {
			return fmt.Errorf("BPE merges has %d entries, more than %d", len(strs), maxMerges)
		}
		pairs = make([][]string, len(strs))
		for i, s := range strs {
			if len(s) > maxTokenBytes {
				return fmt.Errorf("merge %d %s is longer than %d bytes", i, clip(s), maxTokenBytes)
			}
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return fmt.Errorf("merge %d %q is not two tokens separated by a space", i, s)
			}
			pairs[i] = []string{a, b}
		}
	} else if err := json.Unmarshal(raw, &pairs); err != nil {
		return fmt.Errorf("BPE merges are neither [\"a b\", ...] nor [[\"a\", \"b\"], ...]: %w", err)
	}
	if len(pairs) > maxMerges {
		return fmt.Errorf("BPE merges has %d entries, more than %d", len(pairs), maxMerges)
	}
	t.core.ranks = make(map[uint64]mergeRule, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return fmt.Errorf("merge %d has %d parts, not 2", i, len(p))
		}
		if len(p[0])+len(p[1]) > maxTokenBytes {
			return fmt.Errorf("merge %d (%s, %s) is longer than %d bytes", i, clip(p[0]), clip(p[1]), maxTokenBytes)
		}
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		ab, okAB := vocab[p[0]+p[1]]
		if !okA || !okB || !okAB {
			return fmt.Errorf("merge %d (%q, %q): a token or their concatenation is not in the vocab", i, p[0], p[1])
		}
		t.core.ranks[pairKey(int32(a), int32(b))] = mergeRule{rank: int32(i), id: int32(ab)}
	}
	return nil
}

// addToken adds an added token; one with empty content is skipped, as
// Hugging Face skips it.
func (t *HF) addToken(a hfAdded) error {
	if a.Content == "" {
		return nil
	}
	if len(a.Content) > maxTokenBytes {
		return fmt.Errorf("content %s is longer than %d bytes", clip(a.Content), maxTokenBytes)
	}
	// The added tokens make a trie, a node per byte.
	if t.addedBytes += len(a.Content); t.addedBytes > maxAddedBytes {
		return fmt.Errorf("the added tokens' contents are more than %d bytes", maxAddedBytes)
	}
	if a.ID < 0 || a.ID >= 1<<31-1 || a.ID > t.size+1<<20 {
		return fmt.Errorf("%q has id %d out of range", a.Content, a.ID)
	}
	if old, ok := t.addedText[a.Content]; ok && old != a.ID {
		return fmt.Errorf("%q listed with ids %d and %d", a.Content, old, a.ID)
	}
	if old, ok := t.added[a.ID]; ok {
		delete(t.addedText, old.Content)
	}
	t.added[a.ID] = &a
	t.addedText[a.Content] = a.ID
	if a.ID >= t.size {
		t.size = a.ID + 1
	}
	return nil
}

// buildMatchers builds the added-token matchers: as in Hugging Face's
// AddedVocabulary, tokens with normalized=false are found in the text as
// given, the others (their content normalized) in the normalized text
// between those.
func (t *HF) buildMatchers() {
	t.raw, t.normed = &addedMatcher{}, &addedMatcher{}
	ids := make([]int, 0, len(t.added))
	for id := range t.added {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, id := range ids {
		a := t.added[id]
		if a.normalized() {
			content := a.Content
			if t.normalize != nil {
				content = t.normalize(content)
			}
			t.normed.add(content, a)
		} else {
			t.raw.add(a.Content, a)
		}
	}
}

// parseNormalizer returns the normalizer function (nil for none).
func parseNormalizer(raw json.RawMessage) (func(string) string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch n.Type {
	case "NFC":
		return norm.NFC.String, nil
	case "NFD":
		return norm.NFD.String, nil
	case "NFKC":
		return norm.NFKC.String, nil
	case "NFKD":
		return norm.NFKD.String, nil
	case "Sequence":
		var fns []func(string) string
		for _, sub := range n.Normalizers {
			fn, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if fn != nil {
				fns = append(fns, fn)
			}
		}
		if len(fns) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, fn := range fns {
				s = fn(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("normalizer %s is not supported (want NFC, NFD, NFKC, NFKD or a Sequence of them)", clip(n.Type))
}

type hfPreTokenizer struct {
	Type           string            `json:"type"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Pattern        map[string]string `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
}

// parsePreTokenizer accepts a ByteLevel pre-tokenizer, alone or last in a
// Sequence after Splits with known patterns.
func parsePreTokenizer(raw json.RawMessage) ([]preStep, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("no pre_tokenizer: a byte-level BPE needs a ByteLevel pre-tokenizer")
	}
	var top hfPreTokenizer
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	list := []json.RawMessage{raw}
	if top.Type == "Sequence" {
		list = top.Pretokenizers
	}
	var steps []preStep
	byteLevel := false
	for i, r := range list {
		var p hfPreTokenizer
		if err := json.Unmarshal(r, &p); err != nil {
			return nil, fmt.Errorf("pre_tokenizer %d: %w", i, err)
		}
		if byteLevel {
			return nil, fmt.Errorf("pre_tokenizer %d (%s) follows ByteLevel, which must be last", i, clip(p.Type))
		}
		switch p.Type {
		case "Split":
			pat, ok := p.Pattern["Regex"]
			if !ok {
				for kind, v := range p.Pattern {
					return nil, fmt.Errorf("pre_tokenizer %d: Split pattern %s %s is not supported (want a Regex)", i, clip(kind), clip(v))
				}
				return nil, fmt.Errorf("pre_tokenizer %d: Split has no pattern", i)
			}
			if len(pat) > maxPatternBytes {
				return nil, fmt.Errorf("pre_tokenizer %d: Split regex %s is longer than %d bytes", i, clip(pat), maxPatternBytes)
			}
			rules, ok := rulesFor(pat)
			if !ok {
				return nil, fmt.Errorf("pre_tokenizer %d: Split regex %s is not supported: only GPT-2's, Llama 3's and Qwen2's patterns are, matched by hand, as Go's regexp cannot express Oniguruma's", i, clip(pat))
			}
			if p.Behavior != "Isolated" || p.Invert {
				return nil, fmt.Errorf("pre_tokenizer %d: Split behavior %s, invert %v is not supported (want Isolated, false)", i, clip(p.Behavior), p.Invert)
			}
			steps = append(steps, preStep{rules: rules, split: true})
		case "ByteLevel":
			byteLevel = true
			useRegex := p.UseRegex == nil || *p.UseRegex
			steps = append(steps, preStep{rules: splitRules{}, split: useRegex, prefixSpace: p.AddPrefixSpace})
		default:
			return nil, fmt.Errorf("pre_tokenizer %s is not supported (want ByteLevel, or a Sequence of Split and ByteLevel)", clip(p.Type))
		}
	}
	if !byteLevel {
		return nil, fmt.Errorf("pre_tokenizer has no ByteLevel step, which a byte-level BPE needs")
	}
	return steps, nil
}

// hfConfigFile is the part of tokenizer_config.json HF reads.
type hfConfigFile struct {
	BOS                json.RawMessage    `json:"bos_token"`
	EOS                json.RawMessage    `json:"eos_token"`
	Pad                json.RawMessage    `json:"pad_token"`
	ChatTemplate       json.RawMessage    `json:"chat_template"`
	AddBOS             *bool              `json:"add_bos_token"`
	CleanUp            *bool              `json:"clean_up_tokenization_spaces"`
	AddedTokensDecoder map[string]hfAdded `json:"added_tokens_decoder"`
}

// tokenText reads a special token given as a string, as {"content": ...}
// or as null.
func tokenText(name string, raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("%s is neither a string nor {\"content\": ...}: %s", name, raw)
	}
	return obj.Content, nil
}

func (c *hfConfigFile) config(post json.RawMessage, t *HF) (HFConfig, error) {
	var cfg HFConfig
	var err error
	if cfg.BOSToken, err = tokenText("bos_token", c.BOS); err != nil {
		return cfg, err
	}
	if cfg.EOSToken, err = tokenText("eos_token", c.EOS); err != nil {
		return cfg, err
	}
	if cfg.PadToken, err = tokenText("pad_token", c.Pad); err != nil {
		return cfg, err
	}
	if !isNull(c.ChatTemplate) {
		if err := json.Unmarshal(c.ChatTemplate, &cfg.ChatTemplate); err != nil {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(c.ChatTemplate, &named); err != nil {
				return cfg, fmt.Errorf("chat_template is neither a string nor a list of {name, template}")
			}
			for _, n := range named {
				if n.Name == "default" {
					cfg.ChatTemplate = n.Template
				}
			}
		}
	}
	cfg.CleanUpTokenizationSpaces = c.CleanUp == nil || *c.CleanUp
	if c.AddBOS != nil {
		cfg.AddBOS = *c.AddBOS
	} else if cfg.BOSToken != "" && !isNull(post) {
		// Llama 3 adds BOS through a TemplateProcessing post-processor.
		var p struct {
			Type   string `json:"type"`
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
			} `json:"single"`
		}
		if json.Unmarshal(post, &p) == nil && p.Type == "TemplateProcessing" && len(p.Single) > 0 &&
			p.Single[0].SpecialToken != nil && p.Single[0].SpecialToken.ID == cfg.BOSToken {
			cfg.AddBOS = true
		}
	}
	return cfg, nil
}

// Config returns what tokenizer_config.json says.
func (t *HF) Config() HFConfig { return t.cfg }

// VocabSize is the largest token id plus one, over the vocabulary and the
// added tokens.
func (t *HF) VocabSize() int { return t.size }

// IsSpecial reports whether id is an added token marked special.
func (t *HF) IsSpecial(id int) bool {
	a, ok := t.added[id]
	return ok && a.Special
}

// TokenBytes returns the bytes of a token: a vocabulary token's bytes, a
// non-special added token's text; nil for special tokens and ids that are
// not tokens. The returned slice must not be modified.
func (t *HF) TokenBytes(id int) []byte {
	if a, ok := t.added[id]; ok {
		if a.Special {
			return nil
		}
		return []byte(a.Content)
	}
	if id < 0 || id >= len(t.vocab) {
		return nil
	}
	return t.vocab[id]
}

// TokenID returns the id of a token given as tokenizer.json writes it: an
// added token's content ("<|im_end|>"), or a vocabulary entry in the
// byte-level alphabet ("Ġhello" for " hello").
func (t *HF) TokenID(s string) (int, bool) {
	if id, ok := t.addedText[s]; ok {
		return id, true
	}
	if b, ok := byteLevelDecode(s); ok {
		id, ok := t.byBytes[string(b)]
		return int(id), ok
	}
	id, ok := t.odd[s]
	return int(id), ok
}

// Encode converts text into token ids as Hugging Face's
// encode(text, add_special_tokens=False) does: added tokens (special or
// not) are found in the text first, the rest is normalized, pre-tokenized
// and encoded with BPE.
func (t *HF) Encode(text string) []int {
	return t.AppendEncode(nil, text)
}

// AppendEncode appends the ids of text to dst and returns the extended slice.
func (t *HF) AppendEncode(dst []int, text string) []int {
	t.raw.split(text, func(seg string, a *hfAdded) {
		if a != nil {
			dst = append(dst, a.ID)
			return
		}
		if t.normalize != nil {
			seg = t.normalize(seg)
		}
		t.normed.split(seg, func(seg string, a *hfAdded) {
			if a != nil {
				dst = append(dst, a.ID)
				return
			}
			t.preTokenize(0, seg, func(chunk string) {
				for _, id := range t.core.encodeChunk(chunk) {
					dst = append(dst, int(id))
				}
			})
		})
	})
	return dst
}

// preTokenize runs the pre-tokenizer steps from step on, emitting the final
// chunks.
func (t *HF) preTokenize(step int, s string, emit func(string)) {
	if step == len(t.pre) {
		if s != "" {
			emit(s)
		}
		return
	}
	p := &t.pre[step]
	if p.prefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if !p.split {
		t.preTokenize(step+1, s, emit)
		return
	}
	p.rules.split(s, func(piece string) { t.preTokenize(step+1, piece, emit) })
}

// Decode converts ids to text as Hugging Face's decode does (without
// clean_up_tokenization_spaces): added tokens become their content (special
// ones are dropped with skipSpecial), the bytes of each run of regular
// tokens are decoded as UTF-8 with every maximal invalid sequence replaced by
// U+FFFD, and ids that are not tokens are skipped. For the raw bytes of a
// partial character, as when streaming, use TokenBytes.
func (t *HF) Decode(ids []int, skipSpecial bool) string {
	var out, run []byte
	for _, id := range ids {
		if a, ok := t.added[id]; ok {
			if a.Special && skipSpecial {
				continue
			}
			out = appendLossyUTF8(out, run)
			run = run[:0]
			out = append(out, a.Content...)
			continue
		}
		if id >= 0 && id < len(t.vocab) {
			run = append(run, t.vocab[id]...)
		}
	}
	return string(appendLossyUTF8(out, run))
}

// appendLossyUTF8 appends b to dst with each maximal subpart of an invalid
// UTF-8 sequence replaced by U+FFFD, the replacement of the WHATWG decoder
// and of Rust's String::from_utf8_lossy (Go's strings.ToValidUTF8 instead
// replaces whole runs of invalid bytes).
func appendLossyUTF8(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		need, lo, hi := 0, byte(0x80), byte(0xBF)
		switch {
		case c >= 0xC2 && c <= 0xDF:
			need = 1
		case c == 0xE0:
			need, lo = 2, 0xA0
		case c == 0xED:
			need, hi = 2, 0x9F
		case c >= 0xE1 && c <= 0xEF:
			need = 2
		case c == 0xF0:
			need, lo = 3, 0x90
		case c == 0xF4:
			need, hi = 3, 0x8F
		case c >= 0xF1 && c <= 0xF3:
			need = 3
		}
		j := i + 1
		for k := 0; k < need; k++ {
			if j >= len(b) || b[j] < lo || b[j] > hi {
				break
			}
			lo, hi = 0x80, 0xBF
			j++
		}
		if need > 0 && j == i+1+need {
			dst = append(dst, b[i:j]...)
		} else {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		}
		i = j
	}
	return dst
}

// addedMatcher finds added tokens in text: a byte trie searched
// leftmost-longest (the aho-corasick MatchKind::LeftmostLongest of Hugging
// Face's AddedVocabulary), with each token's single_word, lstrip and rstrip.
type addedMatcher struct {
	nodes []trieNode
	first [NumBytes]bool // bytes that start some token
}

type trieNode struct {
	next map[byte]int32
	tok  *hfAdded
}

func (m *addedMatcher) add(content string, a *hfAdded) {
	if len(m.nodes) == 0 {
		m.nodes = []trieNode{{}}
	}
	n := int32(0)
	for i := 0; i < len(content); i++ {
		c := content[i]
		nx, ok := m.nodes[n].next[c]
		if !ok {
			if m.nodes[n].next == nil {
				m.nodes[n].next = map[byte]int32{}
			}
			nx = int32(len(m.nodes))
			m.nodes[n].next[c] = nx
			m.nodes = append(m.nodes, trieNode{})
		}
		n = nx
	}
	if m.nodes[n].tok == nil {
		m.nodes[n].tok = a
	}
	m.first[content[0]] = true
}

// longestAt returns the longest token that starts at s[i:] and its end.
func (m *addedMatcher) longestAt(s string, i int) (*hfAdded, int) {
	var best *hfAdded
	end := 0
	n := int32(0)
	for j := i; j < len(s); j++ {
		nx, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = nx
		if a := m.nodes[n].tok; a != nil {
			best, end = a, j+1
		}
	}
	return best, end
}

// split cuts s into the text between added tokens (emitted with a nil
// token, when not empty) and the added tokens (emitted with their token;
// the text is the match, widened over white space by lstrip and rstrip).
func (m *addedMatcher) split(s string, emit func(string, *hfAdded)) {
	if len(m.nodes) == 0 {
		if s != "" {
			emit(s, nil)
		}
		return
	}
	done := 0 // s[:done] has been emitted
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		a, end := m.longestAt(s, i)
		if a == nil {
			i++
			continue
		}
		start := i
		i = end
		if a.SingleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
			continue
		}
		if a.LStrip {
			// Only the text not yet emitted is looked at, so that a run of
			// white space is read once however many tokens follow it.
			start = done + len(strings.TrimRightFunc(s[done:start], unicode.IsSpace))
		}
		if a.RStrip {
			end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
			i = end
		}
		if start > done {
			emit(s[done:start], nil)
		}
		emit(s[start:end], a)
		done = end
	}
	if done < len(s) {
		emit(s[done:], nil)
	}
}

// isWordRune is \w of Rust's regex crate: alphabetic, marks, decimal
// digits, connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.IsMark(r) ||
		unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, w := utf8.DecodeLastRuneInString(s)
	return w > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, w := utf8.DecodeRuneInString(s)
	return w > 0 && isWordRune(r)
}
