package bus

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// The environment variables AuthFlags reads when a flag is not given.
const (
	EnvUser     = "TROUPE_NATS_USER"     // the user name
	EnvPassword = "TROUPE_NATS_PASSWORD" // the user's password
	EnvToken    = "TROUPE_NATS_TOKEN"    // a token
	EnvCreds    = "TROUPE_NATS_CREDS"    // the path of a .creds file
	EnvNKey     = "TROUPE_NATS_NKEY"     // the path of an NKey seed file
)

// AuthFlags are the NATS client credential flags of a command that takes
// --nats (see AddAuthFlags).
type AuthFlags struct {
	user, passwordFile, tokenFile, nkeyFile, creds string
	tlsCert, tlsKey, tlsCA                         string
}

// AddAuthFlags adds to fs the flags that give a NATS client its
// credentials: --nats-user, --nats-password-file, --nats-token-file,
// --nats-nkey-file, --nats-creds, --nats-tls-cert, --nats-tls-key and
// --nats-tls-ca. Secrets come from files or the environment, never from
// the command line, where other users could read them. Each setting is
// taken from its flag, else from its environment variable (EnvUser,
// EnvPassword, EnvToken, EnvNKey, EnvCreds); secrets are trimmed of
// surrounding white space, and one that is blank, in a file or a
// variable that is set, is an error rather than no authentication.
func AddAuthFlags(fs *flag.FlagSet) *AuthFlags {
	f := &AuthFlags{}
	fs.StringVar(&f.user, "nats-user", "", "NATS user name (default $"+EnvUser+"); its password from --nats-password-file or $"+EnvPassword+". Give one kind of credentials: user, token, NKey or creds")
	fs.StringVar(&f.passwordFile, "nats-password-file", "", "file holding the NATS user's password (wins over $"+EnvPassword+"; blank is an error)")
	fs.StringVar(&f.tokenFile, "nats-token-file", "", "file holding a NATS token (wins over $"+EnvToken+"; blank is an error)")
	fs.StringVar(&f.nkeyFile, "nats-nkey-file", "", "file holding a NATS user NKey seed (wins over $"+EnvNKey+", a path)")
	fs.StringVar(&f.creds, "nats-creds", "", "NATS .creds file, a user JWT and its seed (wins over $"+EnvCreds+", a path)")
	fs.StringVar(&f.tlsCert, "nats-tls-cert", "", "client certificate (PEM) for a NATS server that verifies clients; with --nats-tls-key")
	fs.StringVar(&f.tlsKey, "nats-tls-key", "", "the client certificate's key (PEM)")
	fs.StringVar(&f.tlsCA, "nats-tls-ca", "", "CA certificates (PEM) that sign the NATS server's certificate (default: the system's)")
	return f
}

// Auth resolves the flags and the environment into the credentials for
// Config.Auth. Only one kind may result: a user and password, a token, an
// NKey or a creds file (an error names where each came from).
func (f *AuthFlags) Auth() (Auth, error) {
	var a Auth
	var err error
	if a.User, err = setting(f.user, "--nats-user", EnvUser); err != nil {
		return Auth{}, err
	}
	if a.Password, err = secret(f.passwordFile, "--nats-password-file", EnvPassword); err != nil {
		return Auth{}, err
	}
	if a.Token, err = secret(f.tokenFile, "--nats-token-file", EnvToken); err != nil {
		return Auth{}, err
	}
	if a.NKeyFile, err = setting(f.nkeyFile, "--nats-nkey-file", EnvNKey); err != nil {
		return Auth{}, err
	}
	if a.CredsFile, err = setting(f.creds, "--nats-creds", EnvCreds); err != nil {
		return Auth{}, err
	}
	a.TLSCert, a.TLSKey, a.TLSCA = f.tlsCert, f.tlsKey, f.tlsCA
	switch {
	case a.User != "" && a.Password == "":
		return Auth{}, fmt.Errorf("NATS user %q has no password: give --nats-password-file or $%s", a.User, EnvPassword)
	case a.Password != "" && a.User == "":
		return Auth{}, fmt.Errorf("a NATS password without a user: give --nats-user or $%s", EnvUser)
	}
	var from []string
	for _, s := range []struct {
		set        bool
		flag, env  string
		flagGiven  bool
		kindOfAuth string
	}{
		{a.User != "", "--nats-user", EnvUser, f.user != "", "user"},
		{a.Token != "", "--nats-token-file", EnvToken, f.tokenFile != "", "token"},
		{a.NKeyFile != "", "--nats-nkey-file", EnvNKey, f.nkeyFile != "", "NKey"},
		{a.CredsFile != "", "--nats-creds", EnvCreds, f.creds != "", "creds"},
	} {
		if !s.set {
			continue
		}
		if s.flagGiven {
			from = append(from, s.kindOfAuth+" ("+s.flag+")")
		} else {
			from = append(from, s.kindOfAuth+" ($"+s.env+")")
		}
	}
	if len(from) > 1 {
		return Auth{}, fmt.Errorf("NATS credentials of several kinds: %s; give one", strings.Join(from, ", "))
	}
	if err := a.Validate(); err != nil {
		return Auth{}, err
	}
	return a, nil
}

// setting is a flag's value, else its environment variable's, trimmed; a
// variable that is set must not be blank.
func setting(flagValue, flagName, env string) (string, error) {
	if flagValue != "" {
		return strings.TrimSpace(flagValue), nil
	}
	v, ok := os.LookupEnv(env)
	if !ok {
		return "", nil
	}
	if v = strings.TrimSpace(v); v == "" {
		return "", fmt.Errorf("$%s is set but blank (unset it, or give %s)", env, flagName)
	}
	return v, nil
}

// secret is the content of a flag's file, else its environment variable,
// trimmed; blank is an error.
func secret(file, flagName, env string) (string, error) {
	if file != "" {
		s, err := ReadSecretFile(file)
		if err != nil {
			return "", fmt.Errorf("%s: %w", flagName, err)
		}
		return s, nil
	}
	v, ok := os.LookupEnv(env)
	if !ok {
		return "", nil
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", fmt.Errorf("$%s is set but blank (unset it, or give %s)", env, flagName)
	}
	return v, nil
}
