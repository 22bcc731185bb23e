package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Role is what a user of an embedded server may do (see RolePermissions).
type Role string

// The roles of ServerAuth's users.
const (
	// RoleRollout is a rollout front-end (swarm serve --role rollout):
	// it publishes episodes and reads weights.
	RoleRollout Role = "rollout"
	// RoleTrain is a trainer (swarm serve --role train): it consumes
	// episodes and publishes weights, but publishes no episodes.
	RoleTrain Role = "train"
	// RoleRead reads streams, buckets and the registry (dashboards,
	// troupe swarm frontends) and changes nothing.
	RoleRead Role = "read"
	// RoleAdmin may do anything, including what no role above may:
	// delete streams, core NATS subjects (gradient sharing, replay).
	RoleAdmin Role = "admin"
)

// User is one entry of an auth file: a name and password, or an NKey, and
// a role.
type User struct {
	// User is the name a client gives with its password.
	User string `json:"user,omitempty"`
	// Password is the password in plain text, or its bcrypt hash
	// ("$2a$11$..."), which keeps the file from holding the secret.
	Password string `json:"password,omitempty"`
	// NKey is the public key of a user NKey ("U..."), instead of a user
	// and password; the client holds the seed.
	NKey string `json:"nkey,omitempty"`
	// Role is rollout, train, read or admin.
	Role Role `json:"role"`
}

// ServerAuth is who may connect to an embedded server's listener: Users,
// or one shared Token. Open requires one of them.
type ServerAuth struct {
	// Users are the users and their roles.
	Users []User `json:"users"`
	// Token is one shared secret with the admin role, instead of Users.
	Token string `json:"-"`
}

// ServerTLS makes an embedded server's listener speak TLS only.
type ServerTLS struct {
	// CertFile and KeyFile are the server's certificate and key (PEM).
	CertFile, KeyFile string
	// ClientCAFile, when set, is a PEM file of the certificate
	// authorities whose client certificates the server requires: a
	// client without one is refused.
	ClientCAFile string
}

// LoadAuthFile reads a JSON auth file:
//
//	{"users": [
//	  {"user": "trainer", "password": "$2a$11$...", "role": "train"},
//	  {"user": "frontend", "password": "...", "role": "rollout"},
//	  {"nkey": "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", "role": "rollout"},
//	  {"user": "dashboard", "password": "...", "role": "read"},
//	  {"user": "ops", "password": "...", "role": "admin"}
//	]}
//
// Each user has a name and a password (plain or a bcrypt hash) or an NKey
// public key, never both, and a role; names and keys are unique. Unknown
// fields are refused. Errors name the entry, never its password.
func LoadAuthFile(path string) (*ServerAuth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bus: auth file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var a ServerAuth
	if err := dec.Decode(&a); err != nil {
		// encoding/json's errors name fields and offsets, not values.
		return nil, fmt.Errorf("bus: auth file %s: %w", path, err)
	}
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("bus: auth file %s: %w", path, err)
	}
	return &a, nil
}

// ReadSecretFile reads a secret (a password, a token) from a file, trimmed
// of surrounding white space; an empty one is an error.
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// Validate reports a ServerAuth that Open would refuse.
func (a *ServerAuth) Validate() error {
	if a.Token != "" {
		if len(a.Users) > 0 {
			return errors.New("a token and users: give one")
		}
		return nil
	}
	if len(a.Users) == 0 {
		return errors.New("no users")
	}
	names, keys := map[string]bool{}, map[string]bool{}
	for i, u := range a.Users {
		what := fmt.Sprintf("users[%d]", i)
		if u.User != "" {
			what += fmt.Sprintf(" (%q)", u.User)
		}
		if _, err := RolePermissions(u.Role); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		switch {
		case u.NKey != "" && (u.User != "" || u.Password != ""):
			return fmt.Errorf("%s: a user has a name and password, or an nkey, not both", what)
		case u.NKey != "":
			if !nkeys.IsValidPublicUserKey(u.NKey) {
				return fmt.Errorf("%s: nkey is not a user's public NKey (U...)", what)
			}
			if keys[u.NKey] {
				return fmt.Errorf("%s: nkey listed twice", what)
			}
			keys[u.NKey] = true
		case u.User == "" || strings.TrimSpace(u.Password) == "":
			return fmt.Errorf("%s: a user needs a name and a non-blank password (or an nkey)", what)
		case names[u.User]:
			return fmt.Errorf("%s: user listed twice", what)
		default:
			names[u.User] = true
		}
	}
	return nil
}

// The subjects troupe's swarm servers use (see swarm/journal.go,
// weights.go and registry.go), as permissions name them. NATS wildcards
// match whole tokens only, so a permission cannot say "the streams named
// TROUPE_EPISODES_...": where a stream's name is a token of an API subject
// the permissions allow any stream and narrow by what follows it.
const (
	episodeSubjects = "troupe.episodes.>"
	registryPut     = "$KV.TROUPE_REGISTRY.>"
	configPut       = "$KV.TROUPE_TRAIN_CONFIG.>"
	teamPut         = "$KV.TROUPE_TEAMS.>" // team episodes and server heartbeats (swarm/team)
	objectPut       = "$O.>"
	trainerName     = "trainer" // the trainer's durable consumer
)

// readSubjects may be published by every role: JetStream's read-only API,
// and the ephemeral ordered consumers through which nats.go reads a
// key-value bucket or an object store. A consumer created through this
// API names its filter in the subject, and a filter on $KV or $O matches
// no episode stream, so a reader cannot take an episode stream's one
// work-queue consumer (nor acknowledge, which would delete episodes).
var readSubjects = []string{
	"$JS.API.INFO",
	"$JS.API.STREAM.INFO.*",
	"$JS.API.STREAM.NAMES",
	"$JS.API.STREAM.LIST",
	"$JS.API.STREAM.MSG.GET.*",
	"$JS.API.DIRECT.GET.>",
	"$JS.API.CONSUMER.INFO.*.*",
	"$JS.API.CONSUMER.NAMES.*",
	"$JS.API.CONSUMER.LIST.*",
	"$JS.API.CONSUMER.CREATE.*.*.$KV.>",
	"$JS.API.CONSUMER.CREATE.*.*.$O.>",
	// nats.go deletes the consumer of a finished read; the trainer's is
	// denied below.
	"$JS.API.CONSUMER.DELETE.*.*",
	// Flow-control replies of the ordered consumers.
	"$JS.FC.>",
}

// createSubjects create or update a stream or bucket: rollout and train
// servers open theirs with CreateOrUpdate.
var createSubjects = []string{"$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.UPDATE.*"}

// neverSubjects are denied to every role but admin.
var neverSubjects = []string{"$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.MSG.DELETE.>", "$JS.API.ACCOUNT.>", "$JS.API.SERVER.>", "$JS.API.META.>"}

// RolePermissions is the NATS permissions of a role; nil (everything) for
// admin. Every role may subscribe only to _INBOX.> (replies and the
// deliveries of its consumers) and publish readSubjects; then:
//
//   - read: nothing more; troupe.>, $KV, $O and $JS.ACK are denied.
//   - rollout: troupe.episodes.> (episodes, with JetStream's
//     acknowledgement), create and update streams and buckets, put
//     TROUPE_REGISTRY and TROUPE_TEAMS entries. Denied: $O (weights), $JS.ACK (removing
//     episodes), TROUPE_TRAIN_CONFIG puts, stream purge and delete, the
//     consumer "trainer".
//   - train: create, update and purge streams (the object store purges a
//     replaced object's chunks), create, delete and pull from consumer
//     "trainer" and acknowledge its messages, put $O (weights),
//     TROUPE_REGISTRY, TROUPE_TRAIN_CONFIG and TROUPE_TEAMS entries. Denied:
//     troupe.episodes.> (a trainer publishes no episodes).
//
// All but admin are denied deleting streams and their messages, and the
// account, server and meta-leader API.
func RolePermissions(r Role) (*server.Permissions, error) {
	allow := append([]string(nil), readSubjects...)
	deny := append([]string(nil), neverSubjects...)
	switch r {
	case RoleAdmin:
		return nil, nil
	case RoleRead:
		deny = append(deny, "troupe.>", "$KV.>", "$O.>", "$JS.ACK.>", "$JS.API.STREAM.PURGE.>",
			"$JS.API.CONSUMER.DELETE.*."+trainerName)
	case RoleRollout:
		allow = append(allow, episodeSubjects, registryPut, teamPut)
		allow = append(allow, createSubjects...)
		deny = append(deny, objectPut, "$JS.ACK.>", configPut, "$JS.API.STREAM.PURGE.>",
			"$JS.API.CONSUMER.DELETE.*."+trainerName)
	case RoleTrain:
		allow = append(allow, createSubjects...)
		allow = append(allow, "$JS.API.STREAM.PURGE.*",
			"$JS.API.CONSUMER.CREATE.*."+trainerName,
			"$JS.API.CONSUMER.MSG.NEXT.*."+trainerName,
			// Acknowledgements: $JS.ACK.<stream>.<consumer>..., or with
			// the domain and account first.
			"$JS.ACK.*."+trainerName+".>", "$JS.ACK.*.*.*."+trainerName+".>",
			objectPut, registryPut, configPut, teamPut)
		deny = append(deny, episodeSubjects)
	default:
		return nil, fmt.Errorf("role %q: want rollout, train, read or admin", r)
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow, Deny: deny},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}, nil
}

// applyServerAuth configures o's client authentication and TLS and returns
// the options with which Open's own in-process connection gets in.
func applyServerAuth(o *server.Options, a *ServerAuth, t *ServerTLS) ([]nats.Option, error) {
	var self []nats.Option
	if a != nil {
		if err := a.Validate(); err != nil {
			return nil, fmt.Errorf("bus: server auth: %w", err)
		}
		if a.Token != "" {
			o.Authorization = a.Token
			self = append(self, nats.Token(a.Token))
		} else {
			for _, u := range a.Users {
				perms, _ := RolePermissions(u.Role)
				if u.NKey != "" {
					o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: u.NKey, Permissions: perms})
				} else {
					o.Users = append(o.Users, &server.User{Username: u.User, Password: u.Password, Permissions: perms})
				}
			}
			// Open's own connection: an NKey made here, held only in this
			// process and accepted only in-process.
			kp, err := nkeys.CreateUser()
			if err != nil {
				return nil, fmt.Errorf("bus: in-process NKey: %w", err)
			}
			pub, err := kp.PublicKey()
			if err != nil {
				return nil, fmt.Errorf("bus: in-process NKey: %w", err)
			}
			o.Nkeys = append(o.Nkeys, &server.NkeyUser{Nkey: pub,
				AllowedConnectionTypes: map[string]struct{}{jwt.ConnectionTypeInProcess: {}}})
			self = append(self, nats.Nkey(pub, kp.Sign))
		}
	}
	if t != nil {
		if t.CertFile == "" || t.KeyFile == "" {
			return nil, errors.New("bus: server TLS needs a certificate and its key")
		}
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.CertFile, KeyFile: t.KeyFile, CaFile: t.ClientCAFile, Verify: t.ClientCAFile != ""})
		if err != nil {
			return nil, fmt.Errorf("bus: server TLS: %w", err)
		}
		o.TLS, o.TLSConfig, o.TLSVerify, o.TLSTimeout = true, tc, t.ClientCAFile != "", 2
		o.TLSCert, o.TLSKey, o.TLSCaCert = t.CertFile, t.KeyFile, t.ClientCAFile
	}
	return self, nil
}

// CheckListen refuses a configuration whose embedded server would accept
// clients beyond loopback without authenticating them: users or a token
// (ServerAuth), or client certificates (ServerTLS.ClientCAFile). Anyone
// who reaches such a server could publish episodes that train the model,
// or delete its streams. No listener, or a loopback one, passes. The
// cluster's route listener has a check of its own, CheckClusterListen.
func (c Config) CheckListen() error {
	if c.Listen == "" || c.ServerAuth != nil || (c.ServerTLS != nil && c.ServerTLS.ClientCAFile != "") {
		return nil
	}
	h, err := beyondLoopback(c.Listen)
	if err != nil || h == "" {
		return err
	}
	return fmt.Errorf("bus: refusing to accept NATS clients on %s without authentication (users, a token or client certificates): anyone who reaches it could publish episodes that train the model, or delete its streams", h)
}

// CheckClusterListen refuses a clustered server whose route listener is
// beyond loopback without a route secret (Cluster.Secret). A route is a
// peer server: it sees every message and its messages are delivered as
// the cluster's own, whatever the client listener's users may do, so
// anyone who could open a route could read and inject episodes. No
// cluster, or a loopback route listener, passes (Open refuses a cluster
// without a listener).
func (c Config) CheckClusterListen() error {
	if c.Cluster == nil || c.Cluster.Secret != "" || c.Cluster.Listen == "" {
		return nil
	}
	h, err := beyondLoopback(c.Cluster.Listen)
	if err != nil || h == "" {
		return err
	}
	return fmt.Errorf("bus: refusing to accept cluster routes on %s without a route secret: anyone who reaches it could join the cluster, read every episode and inject its own", h)
}

// beyondLoopback names the host of a listen address that is reachable from
// other machines ("all interfaces" for an empty one), or returns "" for a
// loopback address.
func beyondLoopback(listen string) (string, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("bus: listen address %q: %w", listen, err)
	}
	h := strings.Trim(host, "[]")
	if h == "localhost" {
		return "", nil
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
		return "", nil
	}
	if h == "" {
		h = "all interfaces"
	}
	return h, nil
}
