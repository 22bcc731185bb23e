// Package replay is a prioritized experience replay buffer (Schaul et al.
// 2016, "Prioritized Experience Replay", ICLR) over a sum-tree, and a NATS
// service that shares one buffer between processes.
//
// Item i is sampled with probability P(i) = p_i^α / Σ_k p_k^α and carries the
// importance-sampling weight w_i = (N·P(i))^−β / max_k w_k, which corrects the
// bias of non-uniform sampling when β = 1 (β is annealed from β₀ towards 1
// over training, see Anneal). New items get the largest priority seen so far,
// so each is sampled at least once with high probability. The buffer holds at
// most Capacity items and evicts the oldest. All methods are safe for
// concurrent use: any number of producers may Add while one learner Samples
// and Updates priorities.
//
// # Service
//
// NewService hosts a Buffer[[]byte] on a NATS connection (package bus gives
// one, with an embedded server or an external cluster) as a NATS micro
// service with four request/reply endpoints, troupe.replay.<name>.add,
// .sample, .update and .stats. Client is the other end: actors in any
// process Add encoded transitions, and the learner Samples items with their
// IDs, probabilities and importance weights and Updates their priorities.
// The values are opaque bytes; the caller chooses their encoding. A batch
// added in one request gets consecutive IDs. The service samples with its
// own seeded generator (ServiceConfig.Seed), so a single learner draws
// exactly what Buffer.Sample would draw locally with that generator.
//
// Requests are a small binary format (wire.go): a version byte, a uvarint
// count and fixed-width fields, every length checked against the bytes
// present before anything is allocated. A malformed request, a priority
// that is NaN, negative or above MaxPriority, a β outside [0, 1], a sample
// larger than ServiceConfig.MaxSample or one whose reply would exceed the
// server's max payload is refused with a micro error (code 400 or 413, returned by the
// client as a *RemoteError) and leaves the buffer unchanged; positive
// priorities below MinPriority are raised to it, so that the sums and the
// importance weights stay finite.
package replay
