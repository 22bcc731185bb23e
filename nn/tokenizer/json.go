package tokenizer

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// formatName identifies the JSON document and the pre-tokenizer rules; a
// change to splitChunks that alters chunks must change it.
const formatName = "troupe-byte-bpe-v1"

type fileFormat struct {
	Format   string   `json:"format"`
	Specials []string `json:"specials"`
	Merges   [][2]int `json:"merges"`
	// SplitHan is TrainOptions.SplitHan; absent (false) in files written
	// before it existed, which split as before.
	SplitHan bool `json:"split_han,omitempty"`
}

// MarshalJSON encodes the tokenizer as
//
//	{"format":"troupe-byte-bpe-v1","specials":[...],"merges":[[a,b],...]}
//
// with "split_han":true added when TrainOptions.SplitHan was set.
func (t *Tokenizer) MarshalJSON() ([]byte, error) {
	merges := t.merges
	if merges == nil {
		merges = [][2]int{}
	}
	return json.Marshal(fileFormat{Format: formatName, Specials: t.specials, Merges: merges, SplitHan: t.splitHan})
}

// UnmarshalJSON decodes a tokenizer written by MarshalJSON, validating every
// merge, and replaces t's contents.
func (t *Tokenizer) UnmarshalJSON(data []byte) error {
	var f fileFormat
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("tokenizer: decode JSON: %w", err)
	}
	if f.Format != formatName {
		return fmt.Errorf("tokenizer: unknown format %q (want %q)", f.Format, formatName)
	}
	nt, err := build(f.Specials, f.Merges)
	if err != nil {
		return err
	}
	nt.splitHan = f.SplitHan
	*t = *nt
	return nil
}

// Save writes the tokenizer's JSON to w.
func (t *Tokenizer) Save(w io.Writer) error {
	b, err := t.MarshalJSON()
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("tokenizer: save: %w", err)
	}
	return nil
}

// Load reads a tokenizer's JSON from r.
func Load(r io.Reader) (*Tokenizer, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: load: %w", err)
	}
	t := &Tokenizer{}
	if err := t.UnmarshalJSON(b); err != nil {
		return nil, err
	}
	return t, nil
}

// SaveFile writes the tokenizer to path atomically (temporary file, fsync,
// rename).
func (t *Tokenizer) SaveFile(path string) error {
	b, err := t.MarshalJSON()
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("tokenizer: save %s: %w", path, err)
	}
	return nil
}

// LoadFile reads a tokenizer from path.
func LoadFile(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	t, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}
