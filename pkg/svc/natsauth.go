package svc

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// NATSAuth is how a service or the CLI proves who it is to NATS and secures
// the connection. It is defined once and registered, with the same flag
// and env var names, by every service (Common.AddFlags) and by the CLI.
// At most one of CredsFile, NKeyFile and User may be set. Secrets are read
// from files or the environment, never from a flag's value (flags show in
// ps).
type NATSAuth struct {
	// CredsFile is a NATS credentials file, a user JWT and its nkey seed as
	// nsc writes it (--nats-creds, env PILOTWIRE_NATS_CREDS).
	CredsFile string
	// NKeyFile is a file holding an nkey seed (SU...) (--nats-nkey, env
	// PILOTWIRE_NATS_NKEY).
	NKeyFile string
	// User is the NATS user name (--nats-user, env PILOTWIRE_NATS_USER).
	User string
	// PasswordFile holds the user's password, trailing newline ignored
	// (--nats-password-file, env PILOTWIRE_NATS_PASSWORD_FILE).
	PasswordFile string
	// Password is the user's password from env PILOTWIRE_NATS_PASSWORD
	// (no flag), used when PasswordFile is empty.
	Password string
	// CAFile is a PEM bundle of the CAs that sign the server's certificate;
	// setting it requires TLS (--nats-ca, env PILOTWIRE_NATS_CA).
	CAFile string
	// CertFile and KeyFile are the client certificate and key for TLS
	// client authentication (--nats-cert, env PILOTWIRE_NATS_CERT;
	// --nats-key, env PILOTWIRE_NATS_KEY).
	CertFile, KeyFile string
	// InboxPrefix is the prefix of the connection's reply subjects
	// (--nats-inbox-prefix, env PILOTWIRE_NATS_INBOX_PREFIX). Empty: with
	// --nats-user, _INBOX.<user> (bus.InboxPrefix, what the example
	// server config allows each user), else NATS's _INBOX.
	InboxPrefix string
}

// AddFlags registers the NATS authentication and TLS flags on fs, each
// defaulting to its environment variable.
func (a *NATSAuth) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&a.CredsFile, "nats-creds", EnvString("PILOTWIRE_NATS_CREDS", ""), "NATS credentials file, user JWT and nkey seed (env PILOTWIRE_NATS_CREDS)")
	fs.StringVar(&a.NKeyFile, "nats-nkey", EnvString("PILOTWIRE_NATS_NKEY", ""), "file holding an nkey seed (env PILOTWIRE_NATS_NKEY)")
	fs.StringVar(&a.User, "nats-user", EnvString("PILOTWIRE_NATS_USER", ""), "NATS user; the password comes from --nats-password-file or env PILOTWIRE_NATS_PASSWORD (env PILOTWIRE_NATS_USER)")
	fs.StringVar(&a.PasswordFile, "nats-password-file", EnvString("PILOTWIRE_NATS_PASSWORD_FILE", ""), "file holding the NATS user's password (env PILOTWIRE_NATS_PASSWORD_FILE)")
	fs.StringVar(&a.CAFile, "nats-ca", EnvString("PILOTWIRE_NATS_CA", ""), "PEM bundle of the CAs of the NATS server's certificate; requires TLS (env PILOTWIRE_NATS_CA)")
	fs.StringVar(&a.CertFile, "nats-cert", EnvString("PILOTWIRE_NATS_CERT", ""), "client certificate for TLS to NATS (env PILOTWIRE_NATS_CERT)")
	fs.StringVar(&a.KeyFile, "nats-key", EnvString("PILOTWIRE_NATS_KEY", ""), "key of --nats-cert (env PILOTWIRE_NATS_KEY)")
	fs.StringVar(&a.InboxPrefix, "nats-inbox-prefix", EnvString("PILOTWIRE_NATS_INBOX_PREFIX", ""), "prefix of this connection's reply subjects; default _INBOX.<user> with --nats-user, else _INBOX (env PILOTWIRE_NATS_INBOX_PREFIX)")
	a.Password = os.Getenv("PILOTWIRE_NATS_PASSWORD")
}

// Options returns the nats.go options for a: credentials, nkey or user and
// password, and TLS. It reads the password file; the other files are read
// by nats.go at each connect.
func (a NATSAuth) Options() ([]nats.Option, error) {
	set := 0
	for _, s := range []string{a.CredsFile, a.NKeyFile, a.User} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("nats auth: set only one of --nats-creds, --nats-nkey and --nats-user")
	}
	if (a.CertFile == "") != (a.KeyFile == "") {
		return nil, errors.New("nats tls: --nats-cert and --nats-key go together")
	}
	var opts []nats.Option
	switch {
	case a.CredsFile != "":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("nats credentials: %w", err)
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	case a.NKeyFile != "":
		o, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey %s: %w", a.NKeyFile, err)
		}
		opts = append(opts, o)
	case a.User != "":
		pw := a.Password
		if a.PasswordFile != "" {
			b, err := os.ReadFile(a.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("nats password: %w", err)
			}
			pw = strings.TrimRight(string(b), "\r\n")
		}
		opts = append(opts, nats.UserInfo(a.User, pw))
	case a.PasswordFile != "" || a.Password != "":
		return nil, errors.New("nats auth: a password needs --nats-user")
	}
	inbox := a.InboxPrefix
	if inbox == "" && a.User != "" {
		inbox = bus.InboxPrefix(a.User)
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	if a.CAFile != "" {
		opts = append(opts, nats.RootCAs(a.CAFile))
	}
	if a.CertFile != "" {
		opts = append(opts, nats.ClientCert(a.CertFile, a.KeyFile))
	}
	return opts, nil
}

// RedactURL returns a NATS server list (comma-separated URLs) fit for logs
// and errors: a password becomes "xxxxx", and a user without a password,
// which NATS reads as a token, becomes "redacted".
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := url.Parse(p)
		if err != nil || u.User == nil {
			if err != nil && strings.Contains(p, "@") {
				p = "<unparsable url with credentials>"
			}
			parts[i] = p
			continue
		}
		if _, ok := u.User.Password(); !ok {
			u.User = url.User("redacted")
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}
