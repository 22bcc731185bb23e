package bus

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// Auth is how a client proves itself to an external NATS server
// (Config.URL). Give at most one of User and Password, Token, NKeyFile and
// CredsFile; the TLS files may go with any of them. The zero value sends
// no credentials. An embedded server's own connection needs none, so Open
// ignores Auth without a URL.
type Auth struct {
	// User and Password: a user of the server's users list (troupe nats
	// --auth-file). Both or neither.
	User, Password string
	// Token is a shared secret (troupe nats --token-file).
	Token string
	// NKeyFile holds a user NKey seed ("SU..."); the server knows the
	// user by its public key.
	NKeyFile string
	// CredsFile is a NATS .creds file (a user JWT and its NKey seed), for
	// a server in operator mode.
	CredsFile string
	// TLSCert and TLSKey are the client certificate and its key (PEM
	// files), for a server that verifies clients.
	TLSCert, TLSKey string
	// TLSCA is a PEM file of the certificate authorities that sign the
	// server's certificate (the system's roots when empty).
	TLSCA string
}

// Empty reports whether a carries no credentials and no TLS settings.
func (a Auth) Empty() bool { return a == Auth{} }

// hasCredentials reports whether a names a user, a token, an NKey or a
// creds file (TLS files alone are no credentials).
func (a Auth) hasCredentials() bool {
	return a.User != "" || a.Password != "" || a.Token != "" || a.NKeyFile != "" || a.CredsFile != ""
}

// Validate reports an inconsistent Auth: several kinds of credentials, a
// user without a password (or the reverse), a certificate without its key.
func (a Auth) Validate() error {
	var kinds []string
	if a.User != "" || a.Password != "" {
		if a.User == "" || a.Password == "" {
			return errors.New("bus: a NATS user needs both a name and a password")
		}
		kinds = append(kinds, "user and password")
	}
	if a.Token != "" {
		kinds = append(kinds, "token")
	}
	if a.NKeyFile != "" {
		kinds = append(kinds, "NKey")
	}
	if a.CredsFile != "" {
		kinds = append(kinds, "creds file")
	}
	if len(kinds) > 1 {
		return fmt.Errorf("bus: NATS credentials of several kinds (%s): give one", strings.Join(kinds, ", "))
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return errors.New("bus: a NATS client certificate needs both the certificate and its key")
	}
	return nil
}

// options are the nats.go options that present a's credentials.
func (a Auth) options() ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch {
	case a.User != "":
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	case a.Token != "":
		opts = append(opts, nats.Token(a.Token))
	case a.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			// nats.go's message names the file, never the seed.
			return nil, fmt.Errorf("bus: NKey seed file: %w", err)
		}
		opts = append(opts, o)
	case a.CredsFile != "":
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	return opts, nil
}

// redactedInfo replaces the credentials of a URL.
const redactedInfo = "xxxxx"

// Redact returns a NATS URL, or a comma-separated list of them, fit to log
// or print: the user information of each ("user:password@",
// "token@") is masked, keeping the user name where a password follows it
// ("nats://alice:xxxxx@host:4222", "nats://xxxxx@host:4222").
func Redact(url string) string {
	parts := strings.Split(url, ",")
	for i, p := range parts {
		if info, ok := userInfo(p); ok {
			parts[i] = strings.Replace(p, info+"@", maskInfo(info)+"@", 1)
		}
	}
	return strings.Join(parts, ",")
}

// userInfo is the text between one URL's scheme and its host: everything
// before the last '@' (a password may hold any character, escaped or not).
func userInfo(u string) (string, bool) {
	rest := u
	if _, after, ok := strings.Cut(u, "://"); ok {
		rest = after
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return "", false
	}
	return rest[:at], true
}

func maskInfo(info string) string {
	if name, _, ok := strings.Cut(info, ":"); ok {
		return name + ":" + redactedInfo
	}
	return redactedInfo
}

// redactedError is an error whose message has a URL's credentials masked;
// errors.Is and errors.As still see the original.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr masks the credentials of url (as Redact does) wherever err's
// message repeats them, as a URL parse error does.
func redactErr(err error, url string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	masked := msg
	for _, p := range strings.Split(url, ",") {
		if info, ok := userInfo(p); ok && info != "" {
			masked = strings.ReplaceAll(masked, info+"@", maskInfo(info)+"@")
		}
	}
	if masked == msg {
		return err
	}
	return &redactedError{msg: masked, err: err}
}

// urlHasUserInfo reports whether any URL of a comma-separated list
// carries credentials.
func urlHasUserInfo(url string) bool {
	for _, p := range strings.Split(url, ",") {
		if _, ok := userInfo(p); ok {
			return true
		}
	}
	return false
}
