// Package tokenizer implements byte-level byte-pair-encoding (BPE)
// tokenizers: troupe's own (Tokenizer), trained on a corpus of English and
// Chinese text, with special tokens and a chat template for role-tagged
// messages; and Hugging Face's (HF), loaded from the tokenizer.json and
// tokenizer_config.json that pretrained checkpoints such as GPT-2, Llama 3,
// Qwen2 and Qwen3 ship. Both share one BPE merge loop and one pre-tokenizer
// scanner.
//
// # Algorithm
//
// Byte-pair encoding for subword units follows Sennrich, Haddow and Birch,
// "Neural Machine Translation of Rare Words with Subword Units" (ACL 2016):
// starting from single symbols, training repeatedly merges the most frequent
// adjacent pair of symbols into a new symbol. As in GPT-2 (Radford et al.,
// "Language Models are Unsupervised Multitask Learners", 2019) the base
// alphabet is the 256 byte values, so every string — any script, any emoji,
// even invalid UTF-8 — is representable without an unknown token, and
// decoding is the concatenation of the tokens' bytes: Decode(Encode(s)) == s
// for every string s.
//
// Before merging, text is cut into chunks by a GPT-2-style pre-tokenizer
// (contractions, an optional leading space plus a run of letters, digits or
// punctuation, and whitespace runs); merges never cross chunk boundaries.
// Runs of Han characters form their own chunks, separate from Latin letters,
// so that mixed English/Chinese text such as "PCA主成分分析" splits at the
// script boundary. With TrainOptions.SplitHan every Han character is a chunk
// of its own (BERT's treatment of Chinese, Devlin et al. 2019), so merges
// build characters but never words: a word such as 长度 is then the same
// tokens alone and inside 的长度, which a model that must find a glossary
// term in a sentence needs.
//
// # Token ids
//
// Ids 0–255 are the bytes; the special tokens follow (256, 257, …, in the
// order given to Train); merged tokens follow the special tokens in the order
// they were learned. Encode never produces special tokens from plain text
// (so user text cannot inject "<|end|>"); EncodeWithSpecials does recognise
// them, and ApplyChat inserts them around role-tagged messages.
//
// # Determinism
//
// Training is deterministic: among pairs of equal frequency the one with the
// smallest (left id, right id) is merged first, so the same corpus and options
// always give the same merges, on every machine.
//
// # Hugging Face tokenizers
//
// LoadHF reads a model directory and encodes as Hugging Face's tokenizers
// do with add_special_tokens=False: added tokens (special or not) are found
// in the text first, leftmost-longest, with their single_word, lstrip,
// rstrip and normalized flags; the rest is normalized (NFC, NFD, NFKC, NFKD
// or none), cut by the pre-tokenizer (GPT-2's ByteLevel pattern, or a
// Split with Llama 3's or Qwen2's pattern followed by ByteLevel), mapped to
// GPT-2's byte-level alphabet and merged by rank; with ignore_merges a chunk
// that is a whole vocabulary entry is taken as is. Token ids are those of
// tokenizer.json. What the loader does not implement (other models,
// pre-tokenizers, normalizers, decoders or patterns) is an error naming it,
// never a silent approximation. The tests compare Encode and Decode with
// Hugging Face's own JS implementation (@huggingface/tokenizers) on
// multilingual text, for Qwen3's and Llama 3's tokenizers.
//
// The pre-tokenizer patterns use look-ahead, which Go's regexp lacks; they
// are matched by hand-written scanners that recognise the pattern strings
// exactly, with Oniguruma's semantics (\s is Unicode White_Space, \p{L}
// and \p{N} the general categories, (?i:...) folds 'ſ to 's). Character
// classes come from Go's unicode tables (Unicode 15.0).
//
// # Serialisation
//
// A Tokenizer marshals to a small JSON document (special tokens plus merges
// as id pairs) with MarshalJSON/UnmarshalJSON, Save and Load, so that model
// checkpoints can embed it.
package tokenizer
