// Package tokenizer implements a byte-level byte-pair-encoding (BPE) tokenizer
// that is trained on a corpus of English and Chinese text, with special tokens
// and a chat template for role-tagged messages.
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
// # Serialisation
//
// A Tokenizer marshals to a small JSON document (special tokens plus merges
// as id pairs) with MarshalJSON/UnmarshalJSON, Save and Load, so that model
// checkpoints can embed it.
package tokenizer
