package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the pre-tokenizer.
const (
	classLetter = iota // letters other than Han
	classHan           // Han ideographs (Chinese)
	classNumber        // digits and other numbers
	classSpace         // white space
	classOther         // punctuation, symbols, invalid bytes
)

func runeClass(r rune, width int) int {
	switch {
	case r == utf8.RuneError && width <= 1:
		return classOther
	case unicode.Is(unicode.Han, r):
		return classHan
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	default:
		return classOther
	}
}

// contractions are the English clitics GPT-2 splits off as their own chunks.
var contractions = []string{"s", "t", "re", "ve", "m", "ll", "d"}

// splitChunks cuts s into pre-tokenization chunks, calling emit with each
// chunk in order. The chunks partition s exactly (their concatenation is s),
// which is what makes byte-level BPE round-trip.
//
// The rules follow GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// with one change: Han characters form runs of their own, separate from other
// letters. With splitHan every Han character is a chunk of its own (with the
// single space before it, if any), so that no merge spans two characters:
// the Chinese counterpart of BERT's tokenize_chinese_chars (Devlin et al.
// 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
// Understanding", arXiv:1810.04805). A Chinese word is then the same token
// sequence wherever it occurs, where runs let 长度 be one token alone and
// part of 的长度 after 的. Go's regexp has no look-ahead, hence the
// hand-written scanner.
func splitChunks(s string, splitHan bool, emit func(string)) {
	n := len(s)
	i := 0
	for i < n {
		r, w := utf8.DecodeRuneInString(s[i:])
		// Contractions: 's 't 're 've 'm 'll 'd.
		if r == '\'' {
			matched := false
			for _, c := range contractions {
				if len(s)-i-1 >= len(c) && s[i+1:i+1+len(c)] == c {
					emit(s[i : i+1+len(c)])
					i += 1 + len(c)
					matched = true
					break
				}
			}
			if matched {
				continue
			}
		}
		cls := runeClass(r, w)
		start := i
		if r == ' ' && i+1 < n {
			r2, w2 := utf8.DecodeRuneInString(s[i+1:])
			c2 := runeClass(r2, w2)
			if c2 != classSpace {
				// A single space attaches to the run that follows.
				i++
				cls = c2
				r, w = r2, w2
			}
		}
		if cls != classSpace {
			i += w
			if cls == classHan && splitHan {
				emit(s[start:i])
				continue
			}
			for i < n {
				r, w = utf8.DecodeRuneInString(s[i:])
				if runeClass(r, w) != cls {
					break
				}
				i += w
			}
			emit(s[start:i])
			continue
		}
		// Whitespace run [start, j).
		j := i
		last := i
		for j < n {
			r, w = utf8.DecodeRuneInString(s[j:])
			if runeClass(r, w) != classSpace {
				break
			}
			last = j
			j += w
		}
		if j < n && last > start {
			// \s+(?!\S): leave the last white-space character for the next
			// chunk, so that " word" keeps its leading space.
			emit(s[start:last])
			i = last
			continue
		}
		emit(s[start:j])
		i = j
	}
}
