package swarm

import (
	"io"

	"github.com/troupe-ml/troupe/openai"
	"github.com/troupe-ml/troupe/rl"
)

// Model is what a swarm Server hosts: a chat model (openai.Model: its chat
// template, tokens and generation) that it can train. The server never
// looks inside it, so a tiny tabular policy and a pretrained transformer
// with a LoRA adapter are served the same way; swarm/adapter builds one
// from a tokenizer, a sampler, an rl.Policy and an rl.Trainer.
//
// Concurrency: the Server calls Generate from many goroutines at once, and
// Train, Save and Load (never two of them at once) from its training and
// checkpoint goroutines while generations may be in flight. A model either
// makes generation wait for training (a read-write lock) or samples from a
// snapshot of its parameters; either way each Generation reports the
// Version it was sampled under.
type Model interface {
	openai.Model
	// Train performs one optimisation step on the batch (samples carry the
	// episode reward and TaskID) and increments Version. It returns the
	// step's statistics (loss, gradient norm, ...).
	Train(batch []rl.Sample) (rl.Stats, error)
	// Version is the number of training steps applied so far (the swarm
	// global step).
	Version() int64
	// Save writes the parameters, optimizer state and version.
	Save(w io.Writer) error
	// Load restores what Save wrote, including the version.
	Load(r io.Reader) error
}
