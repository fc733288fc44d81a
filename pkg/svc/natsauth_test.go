package svc_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestNATSAuth runs a real nats-server with TLS (client certificates
// required), nkey and user/password authentication, and connects with each
// kind of NATSAuth: the right one gets a working JetStream connection, a
// wrong or missing one is refused.
func TestNATSAuth(t *testing.T) {
	pki := natstest.NewTLSFiles(t)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()

	tlsServer := natstest.StartWith(t, func(o *server.Options) {
		cfg, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CaFile: pki.CA, Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		o.TLS, o.TLSVerify, o.TLSConfig = true, true, cfg
	})
	nkeyServer := natstest.StartWith(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })
	creds, jwtServer := operatorServer(t)
	userServer := natstest.StartWith(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "ingest", Password: "s3cr3t"}}
	})

	tests := []struct {
		name string
		url  string
		auth svc.NATSAuth
		env  map[string]string // set before AddFlags
		ok   bool
	}{
		{name: "tls with CA and client certificate", url: tlsServer, auth: svc.NATSAuth{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}, ok: true},
		{name: "tls without client certificate", url: tlsServer, auth: svc.NATSAuth{CAFile: pki.CA}},
		{name: "tls without CA", url: tlsServer, auth: svc.NATSAuth{CertFile: pki.ClientCert, KeyFile: pki.ClientKey}},
		{name: "credentials file (JWT and nkey)", url: jwtServer, auth: svc.NATSAuth{CredsFile: creds}, ok: true},
		{name: "no credentials file in operator mode", url: jwtServer},
		{name: "nkey seed file", url: nkeyServer, auth: svc.NATSAuth{NKeyFile: writeFile(t, "user.nk", string(seed))}, ok: true},
		{name: "unknown nkey", url: nkeyServer, auth: svc.NATSAuth{NKeyFile: writeFile(t, "other.nk", string(otherSeed))}},
		{name: "password file", url: userServer, auth: svc.NATSAuth{User: "ingest", PasswordFile: writeFile(t, "pw", "s3cr3t\n")}, ok: true},
		{name: "password from env, flags from env", url: userServer, env: map[string]string{"PILOTWIRE_NATS_USER": "ingest", "PILOTWIRE_NATS_PASSWORD": "s3cr3t"}, ok: true},
		{name: "wrong password", url: userServer, auth: svc.NATSAuth{User: "ingest", Password: "nope"}},
		{name: "no credentials", url: userServer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			auth := tc.auth
			if tc.env != nil {
				for k, v := range tc.env {
					t.Setenv(k, v)
				}
				var c svc.Common
				fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
				c.AddFlags(fs, svc.DefaultCommon(""))
				if err := fs.Parse(nil); err != nil {
					t.Fatal(err)
				}
				auth = c.Auth
			}
			if !tc.ok {
				opts, err := auth.Options()
				if err != nil {
					t.Fatal(err)
				}
				if nc, err := nats.Connect(tc.url, opts...); err == nil {
					nc.Close()
					t.Fatal("connected, want refused")
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
			defer cancel()
			nc, js, err := svc.Connect(ctx, tc.url, "test", auth, slog.New(slog.DiscardHandler), prometheus.NewCounter(prometheus.CounterOpts{Name: "f", Help: "f"}))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := js.AccountInfo(ctx); err != nil {
				t.Errorf("jetstream over the authenticated connection: %v", err)
			}
		})
	}
}

// TestNATSAuthInvalid: contradictory settings are refused before any
// connect, with a message naming the flags.
func TestNATSAuthInvalid(t *testing.T) {
	for _, a := range []svc.NATSAuth{
		{CredsFile: "a", User: "b"},
		{NKeyFile: "a", CredsFile: "b"},
		{CertFile: "c"},
		{Password: "p"},
		{CredsFile: filepath.Join(t.TempDir(), "missing.creds")},
	} {
		if _, err := a.Options(); err == nil {
			t.Errorf("%+v: no error", a)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                        "nats://127.0.0.1:4222",
		"nats://alice:pw@a:4222,nats://bob:pw2@b:4222": "nats://alice:xxxxx@a:4222,nats://bob:xxxxx@b:4222",
		"nats://s3cr3tt0ken@a:4222":                    "nats://redacted@a:4222",
		"tls://a:1, nats://u:p@b:2":                    "tls://a:1,nats://u:xxxxx@b:2",
	} {
		if got := svc.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// operatorServer runs a nats-server in operator (JWT) mode with one
// account, JetStream enabled, and returns a credentials file of a user of
// it, as nsc would write it.
func operatorServer(t *testing.T) (creds, url string) {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	if _, err := oc.Encode(okp); err != nil {
		t.Fatal(err)
	}
	akp, _ := nkeys.CreateAccount()
	apub, _ := akp.PublicKey()
	ac := jwt.NewAccountClaims(apub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{DiskStorage: -1, MemoryStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	ukp, _ := nkeys.CreateUser()
	upub, _ := ukp.PublicKey()
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	if err != nil {
		t.Fatal(err)
	}
	useed, _ := ukp.Seed()
	b, err := jwt.FormatUserConfig(ujwt, useed)
	if err != nil {
		t.Fatal(err)
	}
	creds = writeFile(t, "user.creds", string(b))
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	resolver := &server.MemAccResolver{}
	for pub, claims := range map[string]string{apub: ajwt, spub: sjwt} {
		if err := resolver.Store(pub, claims); err != nil {
			t.Fatal(err)
		}
	}
	url = natstest.StartWith(t, func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{oc}
		o.AccountResolver = resolver
		o.SystemAccount = spub
	})
	return creds, url
}
