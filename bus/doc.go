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
// # Authentication and roles
//
// An external server may require credentials: Config.Auth carries a user
// and password, a token, an NKey seed file or a .creds file (a user JWT,
// for a server in operator mode), and TLS files. Credentials in the URL
// ("nats://user:pass@host:4222") work too, but not together with Auth;
// Open's log lines and errors, and ClientURL, show a URL only through
// Redact. Commands that take --nats take the credentials from
// AddAuthFlags's flags: each setting from its flag, else from its
// environment variable (TROUPE_NATS_USER, TROUPE_NATS_PASSWORD,
// TROUPE_NATS_TOKEN, and the paths TROUPE_NATS_NKEY and
// TROUPE_NATS_CREDS); secrets come from files or the environment, never
// the command line, trimmed, and a blank one is an error.
//
// An embedded server that accepts clients (Config.Listen) authenticates
// them with Config.ServerAuth: users, each with a password (plain or a
// bcrypt hash) or an NKey public key, and a Role; or one shared token,
// which is an admin. Config.ServerTLS adds TLS, and with a client CA
// requires client certificates. Config.CheckListen refuses a listener
// beyond loopback with neither (troupe nats runs it); a port-less server
// needs none. Open's own connection to an embedded server with users is
// in-process, as an NKey user it makes for itself and that the server
// accepts in-process only.
//
// A cluster's routes bypass the client listener's users and roles: a route
// is a peer server, which sees every message and whose messages count as
// the cluster's own. Cluster.Secret, the same on every node, authenticates
// them: a node accepts a route only from a server that gives the secret
// (as user RouteUser), and gives it on the routes it opens, so route URLs
// carry no credentials (Open refuses ones that do). Config.CheckClusterListen
// refuses a route listener beyond loopback without a secret (troupe nats
// runs it: --cluster-token-file). Routes are not encrypted, the secret
// included: keep them on a private network.
//
// The roles (RolePermissions) follow what a swarm does on NATS:
//
//   - rollout (a front-end): publish episodes on troupe.episodes.> and
//     get JetStream's acknowledgement, read the weights object store,
//     put registry entries (TROUPE_REGISTRY), read the synced training
//     config (TROUPE_TRAIN_CONFIG), create and update its streams and
//     buckets. Not: acknowledge (which deletes from the work queue),
//     publish weights ($O), write the config, purge or delete streams,
//     create or delete the trainer's consumer.
//   - train (the trainer): create, delete, pull from and acknowledge its
//     durable consumer "trainer", put and prune weights (which purges the
//     object store's stream), put registry and config entries, create and
//     update streams. Not: publish episodes, delete streams.
//   - read (dashboards, troupe swarm frontends): JetStream's read-only
//     API, and the ephemeral consumers through which nats.go reads a
//     key-value bucket or an object store. Not: publish anything on
//     troupe.>, $KV or $O, acknowledge, create, purge or delete streams,
//     delete the trainer's consumer.
//   - admin: everything, core NATS subjects included (rl/gradshare and
//     rl/replay use troupe.grad, troupe.param and troupe.replay, which no
//     other role may touch).
//
// Every role but admin subscribes only to _INBOX.>, which all of them
// share: a user can see the replies other users receive, but every role
// may read the streams anyway. NATS wildcards match whole tokens, so no
// permission can name "the streams whose names begin TROUPE_EPISODES_";
// in particular a rollout user, which must create and update its streams,
// could update an episode stream's limits.
//
// Durability: a single-copy file stream writes every message to its file
// before the publish is acknowledged, so a SIGKILLed process loses nothing
// it acknowledged; Config.SyncAlways also fsyncs each write, for power loss.
package bus
