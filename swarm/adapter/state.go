package adapter

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/troupe-ml/troupe/nn"
)

// StoreState is a Checkpointer of an nn.Store and its optimizer, written
// with nn.SaveCheckpoint (safetensors with the optimizer's moments).
type StoreState struct {
	Store *nn.Store
	Opt   nn.Optimizer
	// Meta is written into the checkpoint's metadata (the tokenizer, say).
	Meta map[string]string
}

// Save implements Checkpointer.
func (s *StoreState) Save(w io.Writer) error {
	dir, err := os.MkdirTemp("", "swarm-lm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "lm.safetensors")
	if err := nn.SaveCheckpoint(path, s.Store, s.Opt, s.Meta); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// Load implements Checkpointer.
func (s *StoreState) Load(r io.Reader) error {
	dir, err := os.MkdirTemp("", "swarm-lm")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "lm.safetensors")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if _, err := nn.LoadCheckpoint(path, s.Store, s.Opt); err != nil {
		return fmt.Errorf("LM checkpoint: %w", err)
	}
	return nil
}
