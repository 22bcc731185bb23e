package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// The file names of a Hugging Face checkpoint directory: one file, or an
// index mapping each tensor to the shard that holds it.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Dir is a checkpoint directory as Hugging Face saves one: a single
// model.safetensors, or shards listed by model.safetensors.index.json.
type Dir struct {
	shards map[string]*File // by shard file name
	where  map[string]*File // by tensor name
	names  []string
}

// OpenDir opens the checkpoint in dir. With an index present it opens every
// shard the index names (each mapped, as Open does) and checks that each
// holds the tensors the index assigns it; the tensors are then those the
// index lists. Otherwise it opens model.safetensors. Errors name the file at
// fault.
func OpenDir(dir string) (*Dir, error) { return openDir(dir, Open) }

// LoadDir is OpenDir with each file read into memory as Load does (into
// huge pages where it can), for weights that are read over and over.
func LoadDir(dir string) (*Dir, error) { return openDir(dir, Load) }

func openDir(dir string, Open func(string) (*File, error)) (*Dir, error) {
	idxPath := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(idxPath)
	if errors.Is(err, fs.ErrNotExist) {
		f, err := Open(filepath.Join(dir, SingleFile))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("safetensors: %s holds neither %s nor %s", dir, SingleFile, IndexFile)
		}
		if err != nil {
			return nil, err
		}
		d := &Dir{shards: map[string]*File{SingleFile: f}, where: map[string]*File{}, names: f.Names()}
		for _, name := range d.names {
			d.where[name] = f
		}
		return d, nil
	}
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("safetensors: %s: %v", idxPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors: %s: no weight_map, or an empty one", idxPath)
	}
	d := &Dir{shards: map[string]*File{}, where: map[string]*File{}}
	for name := range idx.WeightMap {
		d.names = append(d.names, name)
	}
	slices.Sort(d.names)
	for _, name := range d.names {
		shard := idx.WeightMap[name]
		// Shards live in dir; a name leaving it is refused rather than
		// followed.
		if !filepath.IsLocal(shard) {
			d.Close()
			return nil, fmt.Errorf("safetensors: %s: tensor %q is mapped to %q, not a file inside %s", idxPath, name, shard, dir)
		}
		f, ok := d.shards[shard]
		if !ok {
			if f, err = Open(filepath.Join(dir, shard)); err != nil {
				d.Close()
				return nil, fmt.Errorf("%w (a shard listed by %s)", err, idxPath)
			}
			d.shards[shard] = f
		}
		if _, ok := f.tensors[name]; !ok {
			d.Close()
			return nil, fmt.Errorf("safetensors: %s maps tensor %q to %s, which lacks it", idxPath, name, filepath.Join(dir, shard))
		}
		d.where[name] = f
	}
	return d, nil
}

// Names returns the tensor names, sorted.
func (d *Dir) Names() []string { return slices.Clone(d.names) }

// Tensor returns the tensor called name, a view of its shard valid until
// Close.
func (d *Dir) Tensor(name string) (Tensor, bool) {
	f, ok := d.where[name]
	if !ok {
		return Tensor{}, false
	}
	return f.Tensor(name)
}

// Close closes every shard.
func (d *Dir) Close() error {
	var errs []error
	for _, f := range d.shards {
		errs = append(errs, f.Close())
	}
	d.shards, d.where, d.names = nil, nil, nil
	return errors.Join(errs...)
}
