package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the pre-tokenizer.
const (
	classLetter = iota // \p{L} (without Han when splitRules.hanRuns)
	classHan           // Han ideographs, only with splitRules.hanRuns
	classNumber        // \p{N}
	classSpace         // \s: Unicode White_Space
	classOther         // everything else, and bytes that are not UTF-8
)

// The pre-tokenizer patterns that splitRules implements, exactly as they are
// written in tokenizer.json. Hugging Face compiles them with Oniguruma (Rust)
// or a translation to JS RegExp; both give \s the Unicode White_Space set
// (unicode.IsSpace is that set), \p{L} and \p{N} the general categories.
const (
	// patternGPT2 is GPT-2's (and the ByteLevel pre-tokenizer's built-in)
	// pattern.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// patternQwen2 is Qwen2's and Qwen3's: single digits.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternLlama3 is Llama 3's: numbers in groups of up to three digits.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitRules is a hand-written matcher for one of the patterns above (or
// troupe's own variant of GPT-2's), which cuts text into the chunks that BPE
// merges never cross. Go's regexp has no look-ahead (\s+(?!\S)), and a
// general backtracking engine would bring a dependency whose \s, \p{L} and
// case folding would each have to be checked against Oniguruma's; these
// patterns are few and fixed, so each alternative is a few lines here, in
// linear time, tried in the pattern's order at each position (leftmost-first
// alternation with greedy quantifiers and their backtracking worked out by
// hand). Patterns other than these are rejected when a tokenizer is loaded.
type splitRules struct {
	// llama3 selects the Llama 3 / Qwen2 family of patterns; otherwise the
	// GPT-2 family.
	llama3 bool
	// foldCase: the contractions match case-insensitively, (?i:'s|...), with
	// Unicode simple case folding as Oniguruma does: 'S and 'ſ (U+017F, long
	// s) both match 's. (Hugging Face's JS translation folds ASCII only, so
	// it differs from Oniguruma, and from this, on 'ſ.)
	foldCase bool
	// maxDigits bounds a run of numbers, \p{N}{1,maxDigits} (llama3 family);
	// 0 means unbounded, \p{N}+.
	maxDigits int
	// hanRuns (troupe's own variant): Han ideographs form runs separate
	// from other letters; splitHan: every Han character is its own chunk.
	hanRuns, splitHan bool
}

// rulesFor returns the rules of a known pre-tokenizer pattern.
func rulesFor(pattern string) (splitRules, bool) {
	switch pattern {
	case patternGPT2:
		return splitRules{}, true
	case patternQwen2:
		return splitRules{llama3: true, foldCase: true, maxDigits: 1}, true
	case patternLlama3:
		return splitRules{llama3: true, foldCase: true, maxDigits: 3}, true
	}
	return splitRules{}, false
}

func (sr *splitRules) class(r rune, width int) int {
	switch {
	case r == utf8.RuneError && width <= 1:
		return classOther
	case unicode.IsLetter(r):
		if sr.hanRuns && unicode.Is(unicode.Han, r) {
			return classHan
		}
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	default:
		return classOther
	}
}

// classAt returns the class and width of the character at s[i:].
func (sr *splitRules) classAt(s string, i int) (cls, width int) {
	r, w := utf8.DecodeRuneInString(s[i:])
	return sr.class(r, w), w
}

// runEnd returns the end of the run of characters of class cls starting at
// s[i:].
func (sr *splitRules) runEnd(s string, i, cls int) int {
	for i < len(s) {
		c, w := sr.classAt(s, i)
		if c != cls {
			break
		}
		i += w
	}
	return i
}

// contractions are the English clitics the patterns split off as their own
// chunks, in the patterns' order.
var contractions = []string{"s", "t", "re", "ve", "m", "ll", "d"}

// contraction returns the length of the contraction ('s, 't, …) after an
// apostrophe, at the start of rest, or 0.
func (sr *splitRules) contraction(rest string) int {
	for _, c := range contractions {
		if n := sr.matchFold(rest, c); n > 0 {
			return n
		}
	}
	return 0
}

// matchFold returns the byte length of the prefix of s that matches the
// lower-case ASCII word (case-insensitively with foldCase), or 0.
func (sr *splitRules) matchFold(s, word string) int {
	i := 0
	for k := 0; k < len(word); k++ {
		if i >= len(s) {
			return 0
		}
		c := s[i]
		switch {
		case c == word[k]:
			i++
		case sr.foldCase && c|0x20 == word[k] && c >= 'A' && c <= 'Z':
			i++
		case sr.foldCase && word[k] == 's' && len(s)-i >= 2 && s[i:i+2] == "ſ":
			i += 2
		default:
			return 0
		}
	}
	return i
}

// splitChunks cuts s into troupe's pre-tokenization chunks, calling emit
// with each chunk in order. The chunks partition s exactly (their
// concatenation is s), which is what makes byte-level BPE round-trip.
//
// The rules are GPT-2's pattern (patternGPT2) with one change: Han
// characters form runs of their own, separate from other letters, so that
// mixed English/Chinese text such as "PCA主成分分析" splits at the script
// boundary. With splitHan every Han character is a chunk of its own (with the
// single space before it, if any), so that no merge spans two characters:
// the Chinese counterpart of BERT's tokenize_chinese_chars (Devlin et al.
// 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
// Understanding", arXiv:1810.04805). A Chinese word is then the same token
// sequence wherever it occurs, where runs let 长度 be one token alone and
// part of 的长度 after 的.
func splitChunks(s string, splitHan bool, emit func(string)) {
	sr := splitRules{hanRuns: true, splitHan: splitHan}
	sr.split(s, emit)
}

// split cuts s into chunks by the rules, calling emit with each in order;
// the chunks partition s.
func (sr *splitRules) split(s string, emit func(string)) {
	for i := 0; i < len(s); {
		end := 0
		if s[i] == '\'' {
			if n := sr.contraction(s[i+1:]); n > 0 {
				end = i + 1 + n
			}
		}
		if end == 0 {
			if sr.llama3 {
				end = sr.llama3At(s, i)
			} else {
				end = sr.gpt2At(s, i)
			}
		}
		emit(s[i:end])
		i = end
	}
}

// gpt2At returns the end of the chunk at s[i:] after the contractions:
//
//	?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func (sr *splitRules) gpt2At(s string, i int) int {
	cls, w := sr.classAt(s, i)
	start := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, w2 := sr.classAt(s, i+1); c2 != classSpace {
			// A single space attaches to the run that follows.
			i++
			cls, w = c2, w2
		}
	}
	if cls != classSpace {
		i += w
		if cls == classHan && sr.splitHan {
			return i
		}
		return sr.runEnd(s, i, cls)
	}
	return sr.spaceEnd(s, start)
}

// spaceEnd returns the end of \s+(?!\S)|\s+ at s[i:], which is white space:
// the whole run, except that a run of two or more characters followed by a
// non-space leaves its last character for the next chunk (so that " word"
// keeps its leading space).
func (sr *splitRules) spaceEnd(s string, i int) int {
	start, last := i, i
	for i < len(s) {
		c, w := sr.classAt(s, i)
		if c != classSpace {
			break
		}
		last = i
		i += w
	}
	if i < len(s) && last > start {
		return last
	}
	return i
}

// llama3At returns the end of the chunk at s[i:] after the contractions:
//
//	[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func (sr *splitRules) llama3At(s string, i int) int {
	cls, w := sr.classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == classLetter {
		return sr.runEnd(s, i, classLetter)
	}
	if cls != classNumber && s[i] != '\r' && s[i] != '\n' && i+w < len(s) {
		if c2, _ := sr.classAt(s, i+w); c2 == classLetter {
			return sr.runEnd(s, i+w, classLetter)
		}
	}
	// \p{N}{1,max}
	if cls == classNumber {
		j := i + w
		for k := 1; j < len(s) && (sr.maxDigits == 0 || k < sr.maxDigits); k++ {
			c, w := sr.classAt(s, j)
			if c != classNumber {
				break
			}
			j += w
		}
		return j
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := sr.classAt(s, i+1); c2 == classOther {
			j = i + 1
		}
	}
	if c, _ := sr.classAt(s, j); c == classOther {
		j = sr.runEnd(s, j, classOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// \s*[\r\n]+: the white-space run up to and including its last line
	// break (greedy \s* backtracks to it).
	lastBreak := -1
	for j = i; j < len(s); {
		c, w := sr.classAt(s, j)
		if c != classSpace {
			break
		}
		if s[j] == '\r' || s[j] == '\n' {
			lastBreak = j
		}
		j += w
	}
	if lastBreak >= 0 {
		return lastBreak + 1
	}
	return sr.spaceEnd(s, i)
}
