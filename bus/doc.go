// Package bus connects troupe's processes through NATS with JetStream, the
// distributed engine that carries finished episodes, published weights,
// shared gradients and the replay service between machines.
//
// Open returns a Bus. With Config.URL empty it runs a nats-server inside the
// process (github.com/nats-io/nats-server/v2) and connects to it without
// opening a port, so a single machine needs nothing installed and nothing
// listening; its JetStream store lives under Config.DataDir and survives the
// process being killed. With Config.URL set ("nats://host:4222") it joins an
// external server or cluster instead. Either way the caller gets the same
// nats.Conn and jetstream.JetStream (github.com/nats-io/nats.go), so the code
// above it does not know which it has.
//
// An embedded server can also accept clients (Config.Listen) and join a
// cluster of other embedded servers (Config.Cluster); `troupe nats` runs one
// as a standalone process. Streams created with Bus.Replicas copies then
// survive the loss of a minority of nodes.
//
// A clustered embedded server needs Config.Listen, Cluster.Listen and a
// DataDir, and Open returns only once a majority of the nodes is up and a
// meta leader answers (within ConnectTimeout): start the nodes together.
// Writes to a replicated stream are acknowledged once a majority stored
// them; a cut-off minority accepts none, and its clients, pinging every 5
// s, fail over to the majority within about 15 s. Retry a publish under
// the same Nats-Msg-Id: a write that was in fact stored comes back as a
// duplicate with its first sequence.
//
// Durability: a single-copy file stream writes every message to its file
// before the publish is acknowledged, so a SIGKILLed process loses nothing
// it acknowledged; Config.SyncAlways also fsyncs each write, for power loss.
package bus
