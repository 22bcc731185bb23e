package tokenizer_test

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/troupe-ml/troupe/nn/tokenizer"
	"github.com/troupe-ml/troupe/nn/tokenizer/jinja"
)

// TestByteChatML: the byte tokenizer loads as a Hugging Face tokenizer,
// encodes every byte as its own id and the ChatML markers as theirs, and
// its template renders ChatML.
func TestByteChatML(t *testing.T) {
	tj, cj, err := tokenizer.ByteChatML().Files()
	if err != nil {
		t.Fatal(err)
	}
	hf, err := tokenizer.ParseHF(tj, cj)
	if err != nil {
		t.Fatal(err)
	}
	text := "héllo\n<|im_end|>"
	want := append([]int{'h', 0xc3, 0xa9, 'l', 'l', 'o', '\n'}, 258)
	if got := hf.Encode(text); !slices.Equal(got, want) {
		t.Errorf("Encode(%q) = %v, want %v", text, got, want)
	}
	if got := hf.Decode(want, false); got != text {
		t.Errorf("Decode = %q, want %q", got, text)
	}
	if hf.VocabSize() != 259 || hf.Config().EOSToken != "<|im_end|>" || !hf.IsSpecial(257) {
		t.Errorf("vocab %d, eos %q, <|im_start|> special %v", hf.VocabSize(), hf.Config().EOSToken, hf.IsSpecial(257))
	}
	s, err := jinja.RenderChat(hf.Config().ChatTemplate, jinja.ChatInput{Messages: []map[string]any{{"role": "user", "content": "hi"}}, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if s != "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" {
		t.Errorf("chat template rendered %q", s)
	}
}

// TestTokenizerHFSpec: a trained tokenizer written in Hugging Face's format
// keeps its ids: English text (which both pre-tokenizers cut alike)
// encodes to the same ids, every text decodes to itself, and the chat
// template renders what ApplyChat encodes.
func TestTokenizerHFSpec(t *testing.T) {
	b, err := os.ReadFile("testdata/corpus.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	tok, err := tokenizer.Train(lines, tokenizer.TrainOptions{VocabSize: 600, SplitHan: true})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := tok.HFSpec().WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	hf, err := tokenizer.LoadHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	if hf.VocabSize() != tok.VocabSize() {
		t.Errorf("vocabulary %d, want %d", hf.VocabSize(), tok.VocabSize())
	}
	english := 0
	for _, l := range lines {
		if got := hf.Decode(hf.Encode(l), false); got != l {
			t.Errorf("Decode(Encode(%q)) = %q", l, got)
		}
		if strings.IndexFunc(l, func(r rune) bool { return r > 127 }) < 0 {
			english++
			if got, want := hf.Encode(l), tok.Encode(l); !slices.Equal(got, want) {
				t.Errorf("Encode(%q) = %v, troupe's %v", l, got, want)
			}
		}
	}
	if english == 0 {
		t.Fatal("no English line in the corpus")
	}
	msgs := []tokenizer.Message{{Role: tokenizer.RoleSystem, Content: "Translate."}, {Role: tokenizer.RoleUser, Content: "the matrix"}}
	want, err := tok.ApplyChat(msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	var in jinja.ChatInput
	for _, m := range msgs {
		in.Messages = append(in.Messages, map[string]any{"role": m.Role, "content": m.Content})
	}
	in.AddGenerationPrompt, in.BOSToken = true, hf.Config().BOSToken
	s, err := jinja.RenderChat(hf.Config().ChatTemplate, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := hf.Encode(s); !slices.Equal(got, want) {
		t.Errorf("chat: %v, ApplyChat %v", got, want)
	}
}

// TestHFSpecErrors: a spec that cannot be a byte-level BPE is refused with
// the reason.
func TestHFSpecErrors(t *testing.T) {
	s := tokenizer.ByteChatML()
	s.Tokens = s.Tokens[1:]
	if _, _, err := s.Files(); err == nil || !strings.Contains(err.Error(), "is not a token") {
		t.Errorf("missing byte: %v", err)
	}
	s = tokenizer.ByteChatML()
	s.Merges = [][2]int{{'a', 'b'}}
	if _, _, err := s.Files(); err == nil || !strings.Contains(err.Error(), "not a token") {
		t.Errorf("merge without its token: %v", err)
	}
	s = tokenizer.ByteChatML()
	s.Tokens = append(s.Tokens, nil, nil, nil, []byte("a"))
	if _, _, err := s.Files(); err == nil || !strings.Contains(err.Error(), "same bytes") {
		t.Errorf("duplicate token: %v", err)
	}
	s = tokenizer.ByteChatML()
	s.EOSToken = "<|eot|>"
	if _, _, err := s.Files(); err == nil || !strings.Contains(err.Error(), "not an added token") {
		t.Errorf("unknown eos: %v", err)
	}
}

// TestFingerprint: the fingerprint follows what decides the ids (a merge,
// an added token's id) and nothing else (the JSON's layout, the chat
// template).
func TestFingerprint(t *testing.T) {
	fp := func(s tokenizer.HFSpec, indent bool) string {
		t.Helper()
		tj, cj, err := s.Files()
		if err != nil {
			t.Fatal(err)
		}
		if indent {
			var b bytes.Buffer
			if err := json.Indent(&b, tj, "", "\t\t"); err != nil {
				t.Fatal(err)
			}
			tj = b.Bytes()
		}
		hf, err := tokenizer.ParseHF(tj, cj)
		if err != nil {
			t.Fatal(err)
		}
		return hf.Fingerprint()
	}
	base := fp(tokenizer.ByteChatML(), false)
	if len(base) != 64 || fp(tokenizer.ByteChatML(), true) != base {
		t.Errorf("fingerprint %q changes with the JSON's layout", base)
	}
	s := tokenizer.ByteChatML()
	s.ChatTemplate = "{{ messages }}"
	if fp(s, false) != base {
		t.Error("the chat template changes the fingerprint")
	}
	s = tokenizer.ByteChatML()
	s.Tokens = append(s.Tokens, nil, nil, nil, []byte("ab"))
	s.Merges = [][2]int{{'a', 'b'}}
	if fp(s, false) == base {
		t.Error("a merge does not change the fingerprint")
	}
	s = tokenizer.ByteChatML()
	s.Added[2].ID = 300
	if fp(s, false) == base {
		t.Error("an added token's id does not change the fingerprint")
	}
}
