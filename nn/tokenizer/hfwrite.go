package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// HFSpec is a byte-level BPE tokenizer to write in Hugging Face's format:
// tokenizer.json (a BPE model, GPT-2's ByteLevel pre-tokenizer and
// decoder) and tokenizer_config.json (special tokens, chat template), the
// files LoadHF and transformers' AutoTokenizer read.
type HFSpec struct {
	// Tokens holds the bytes of each regular token, indexed by id; an
	// empty entry is an id that is not a regular token (an added token's,
	// or unused). Every byte value must be one token, and no two tokens
	// may have the same bytes.
	Tokens [][]byte
	// Merges are the BPE merges in rank order, as pairs of ids; the
	// concatenation of each pair's bytes must be a token.
	Merges [][2]int
	// Added are the added tokens (the special tokens of the chat format).
	Added []HFAddedToken
	// BOSToken, EOSToken and PadToken name added tokens ("" for none).
	// EOSToken is the end of a turn: hf.Tokenizer's StopTokens include it.
	BOSToken, EOSToken, PadToken string
	// ChatTemplate is the Jinja chat template ("" for none).
	ChatTemplate string
}

// HFAddedToken is an added token of an HFSpec: its id and text, and
// whether it is special (never produced from plain text by transformers'
// encode with split_special_tokens, skipped by decode(skip_special_tokens)).
type HFAddedToken struct {
	ID      int
	Content string
	Special bool
}

// ChatMLTemplate is the ChatML chat template (Qwen's, without tools and
// system-prompt defaults): each message as
// <|im_start|>role\ncontent<|im_end|>\n, and <|im_start|>assistant\n when a
// generation prompt is asked for.
const ChatMLTemplate = "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"

// ByteChatML is the smallest usable chat tokenizer: the 256 bytes as ids
// 0–255 and no merges, then <|endoftext|> (256, padding), <|im_start|>
// (257) and <|im_end|> (258, the end of a turn), with ChatMLTemplate. It
// fits any model whose vocabulary has at least 259 entries, for tests,
// examples and models trained from scratch.
func ByteChatML() HFSpec {
	s := HFSpec{Tokens: make([][]byte, NumBytes), EOSToken: "<|im_end|>", PadToken: "<|endoftext|>", ChatTemplate: ChatMLTemplate}
	for b := range s.Tokens {
		s.Tokens[b] = []byte{byte(b)}
	}
	for i, c := range []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"} {
		s.Added = append(s.Added, HFAddedToken{ID: NumBytes + i, Content: c, Special: true})
	}
	return s
}

// HFSpec returns t in Hugging Face's format with t's ids: the bytes, the
// special tokens as added tokens, the merges in order. The chat template
// is t's (ApplyChat's) written in Jinja, and <|end|> ends a turn. Hugging
// Face's encoder splits text with GPT-2's pattern rather than t's
// pre-tokenizer (which cuts at script changes and, with SplitHan, around
// every Han character), so the two may cut some texts into different
// tokens; each decodes to the text it encoded.
func (t *Tokenizer) HFSpec() HFSpec {
	s := HFSpec{Tokens: make([][]byte, len(t.vocab)), ChatTemplate: TroupeChatTemplate}
	for id, b := range t.vocab {
		if t.IsSpecial(id) {
			s.Added = append(s.Added, HFAddedToken{ID: id, Content: string(b), Special: true})
			continue
		}
		s.Tokens[id] = b
	}
	for _, m := range t.merges {
		s.Merges = append(s.Merges, [2]int{m[0], m[1]})
	}
	if _, ok := t.SpecialID(BOS); ok {
		s.BOSToken = BOS
	}
	if _, ok := t.SpecialID(End); ok {
		s.EOSToken = End
	}
	if _, ok := t.SpecialID(PAD); ok {
		s.PadToken = PAD
	}
	return s
}

// TroupeChatTemplate is ApplyChat's format in Jinja: bos_token, then each
// message as its role marker (<|system|>, <|user|>, <|assistant|>), its
// content and <|end|>, and <|assistant|> when a generation prompt is asked
// for.
const TroupeChatTemplate = "{{ bos_token }}{%- for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{%- endfor %}{%- if add_generation_prompt %}{{ '<|assistant|>' }}{%- endif %}"

// Files returns the contents of tokenizer.json and tokenizer_config.json.
func (s HFSpec) Files() (tokenizerJSON, configJSON []byte, err error) {
	vocab := make(map[string]int, len(s.Tokens))
	var single [NumBytes]bool
	for id, b := range s.Tokens {
		if len(b) == 0 {
			continue
		}
		k := byteLevelString(b)
		if old, ok := vocab[k]; ok {
			return nil, nil, fmt.Errorf("tokenizer: tokens %d and %d have the same bytes %q", old, id, b)
		}
		vocab[k] = id
		if len(b) == 1 {
			single[b[0]] = true
		}
	}
	for b, ok := range single {
		if !ok {
			return nil, nil, fmt.Errorf("tokenizer: byte %#02x is not a token (a byte-level BPE needs all 256)", b)
		}
	}
	merges := make([]string, len(s.Merges))
	for i, m := range s.Merges {
		if m[0] < 0 || m[0] >= len(s.Tokens) || m[1] < 0 || m[1] >= len(s.Tokens) || len(s.Tokens[m[0]]) == 0 || len(s.Tokens[m[1]]) == 0 {
			return nil, nil, fmt.Errorf("tokenizer: merge %d (%d, %d) names an id that is not a token", i, m[0], m[1])
		}
		a, b := byteLevelString(s.Tokens[m[0]]), byteLevelString(s.Tokens[m[1]])
		if _, ok := vocab[a+b]; !ok {
			return nil, nil, fmt.Errorf("tokenizer: merge %d (%d, %d) makes %q, which is not a token", i, m[0], m[1], s.Tokens[m[0]])
		}
		merges[i] = a + " " + b
	}
	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	var adds []added
	decoder := map[string]added{}
	names := map[string]bool{}
	for _, a := range s.Added {
		if a.ID < len(s.Tokens) && len(s.Tokens[a.ID]) > 0 {
			return nil, nil, fmt.Errorf("tokenizer: added token %q has id %d, a regular token's", a.Content, a.ID)
		}
		x := added{ID: a.ID, Content: a.Content, Special: a.Special}
		adds = append(adds, x)
		decoder[fmt.Sprint(a.ID)] = x
		names[a.Content] = true
	}
	for _, n := range []string{s.BOSToken, s.EOSToken, s.PadToken} {
		if n != "" && !names[n] {
			return nil, nil, fmt.Errorf("tokenizer: special token %q is not an added token", n)
		}
	}
	byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true}
	tj := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens":   adds,
		"normalizer":     nil,
		"pre_tokenizer":  byteLevel,
		"post_processor": nil,
		"decoder":        byteLevel,
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": merges},
	}
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	cj := map[string]any{
		"added_tokens_decoder": decoder, "bos_token": nullable(s.BOSToken), "eos_token": nullable(s.EOSToken),
		"pad_token": nullable(s.PadToken), "add_bos_token": false, "clean_up_tokenization_spaces": false,
		"model_max_length": 1 << 20, "tokenizer_class": "PreTrainedTokenizerFast",
	}
	if s.ChatTemplate != "" {
		cj["chat_template"] = s.ChatTemplate
	}
	if tokenizerJSON, err = json.MarshalIndent(tj, "", " "); err != nil {
		return nil, nil, fmt.Errorf("tokenizer: %w", err)
	}
	if configJSON, err = json.MarshalIndent(cj, "", " "); err != nil {
		return nil, nil, fmt.Errorf("tokenizer: %w", err)
	}
	return tokenizerJSON, configJSON, nil
}

// WriteDir writes tokenizer.json and tokenizer_config.json into dir
// (created if missing), beside a model's config.json.
func (s HFSpec) WriteDir(dir string) error {
	tj, cj, err := s.Files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	for name, b := range map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": cj} {
		if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("tokenizer: %w", err)
		}
	}
	return nil
}

// byteLevelString writes bytes in GPT-2's byte-level alphabet, as
// tokenizer.json spells its tokens.
func byteLevelString(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteRune(byteToRune[c])
	}
	return sb.String()
}
