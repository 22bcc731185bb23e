package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// Fingerprint is a SHA-256 (hex) of everything that decides how t encodes
// and decodes: the vocabulary (every id's bytes), the merges in rank
// order, the added tokens with their flags, and the normalizer and
// pre-tokenizer as tokenizer.json declares them. Two tokenizers with the
// same fingerprint give every text the same ids, so models that use them
// share a vocabulary; the chat template and tokenizer_config.json's other
// settings do not enter it.
func (t *HF) Fingerprint() string { return t.fingerprint }

// hash computes the fingerprint once the tokenizer is loaded.
func (t *HF) hash(normalizer, pre json.RawMessage) string {
	h := sha256.New()
	num := func(v ...int) {
		for _, x := range v {
			h.Write(binary.LittleEndian.AppendUint64(nil, uint64(x)))
		}
	}
	str := func(b []byte) {
		num(len(b))
		h.Write(b)
	}
	num(t.size)
	for _, b := range t.vocab {
		str(b)
	}
	odd := make([]string, 0, len(t.odd))
	for k := range t.odd {
		odd = append(odd, k)
	}
	slices.Sort(odd)
	for _, k := range odd {
		str([]byte(k))
		num(int(t.odd[k]))
	}
	type merge struct{ rank, left, right, id int32 }
	merges := make([]merge, 0, len(t.core.ranks))
	for k, r := range t.core.ranks {
		merges = append(merges, merge{r.rank, int32(k >> 32), int32(uint32(k)), r.id})
	}
	slices.SortFunc(merges, func(a, b merge) int { return int(a.rank) - int(b.rank) })
	for _, m := range merges {
		num(int(m.left), int(m.right), int(m.id))
	}
	ids := make([]int, 0, len(t.added))
	for id := range t.added {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	flag := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	for _, id := range ids {
		a := t.added[id]
		num(id, flag(a.Special), flag(a.SingleWord), flag(a.LStrip), flag(a.RStrip), flag(a.normalized()))
		str([]byte(a.Content))
	}
	compact := func(raw json.RawMessage) {
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			b.Reset()
			b.Write(raw)
		}
		str(b.Bytes())
	}
	compact(normalizer)
	compact(pre)
	num(flag(t.core.whole != nil))
	return hex.EncodeToString(h.Sum(nil))
}
