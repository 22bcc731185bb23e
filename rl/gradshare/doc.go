// Package gradshare lets the agents of a group learn together over NATS:
// each publishes its compressed, optionally differentially private gradient
// every step and applies its peers' (gradient sharing), or publishes its
// parameters with a validation score and mixes its peers' parameters with
// attention weights (parameter fusion).
//
// # Exchange
//
// Join subscribes a Group to troupe.grad.<group>.* and troupe.param.<group>.*
// and publishes the agent's own messages on troupe.grad.<group>.<agent> and
// troupe.param.<group>.<agent>. Publish compresses a gradient with a
// gradcomp.Compressor built from Settings (raw float32, 8-bit quantisation,
// top-k with 8-bit values, error feedback, Gaussian clipping and noise);
// Peers returns the latest decoded update of every other agent with its step
// and age (the all-gather with last-value-per-agent semantics), and Gather
// waits until every expected peer has reached a step and returns each peer's
// update of exactly that step, which makes lockstep training reproducible.
// PublishParams, PeerParams and GatherParams do the same for parameter
// vectors, and Fuse mixes them with weights softmax(score/τ).
//
// Core NATS publish/subscribe carries the messages, not a JetStream
// key-value bucket with one value of history per agent. A gradient is stale
// one step after it is sent: nothing needs to survive a restart, and an
// agent joining late has no use for its peers' old gradients. A KV put is a
// JetStream publish that the server stores (a file or memory write) and
// acknowledges with a reply message, so each update would cost a store
// write, an acknowledgement round trip and the bytes of that reply, and
// every delivery to a watcher carries a JetStream reply subject of several
// tens of bytes (stream, consumer and sequence metadata); the subscriber's own
// map of the last update per agent gives the same last-value semantics for
// none of that. What core NATS does not give is delivery after a
// disconnection or to a slow consumer: Gather then waits for its context's
// deadline and returns the peers' latest updates with the context's error.
//
// # Message format and what is counted
//
// A message's payload is a one-byte kind (gradient or parameters), the step
// as a uvarint, for parameters the score as a float64, then the gradcomp
// message (its 5-byte header and the codec's payload). No NATS header block
// is sent: the agent is in the subject. Stats counts, per message, its size
// as NATS counts it against the server's max_payload (payload plus header
// block), and for sent messages also the whole protocol frame the client
// writes ("PUB <subject> <size>\r\n", the message, "\r\n"). Meter, a dialer
// for nats.SetCustomDialer, counts every byte the connection's socket reads
// and writes (frames, pings, subscriptions), which is what the examples
// report as bytes on the wire.
//
// # Privacy
//
// With Settings.Noise > 0 each gradient is clipped to L2 norm Settings.Clip
// and noised with N(0, (Noise·Clip)²) per coordinate before compression
// (see package gradcomp for what is and is not protected). Group.Epsilon
// reports ε for the gradients published so far. Parameters published by
// PublishParams are not privatised.
package gradshare
