package faults

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// auth is the least-privilege NATS set-up the matrix runs with, as
// deploy/nats/accounts.conf ships it: one account, one user per service
// process holding only the subjects pkg/bus grants that service, and an
// admin user for the harness (it creates the streams and reads them back).
type auth struct {
	users     []bus.Permissions
	passwords map[string]string // user → password
	files     map[string]string // user → password file
}

// newAuth makes a user per process of the matrix, with a random password
// written to a file under dir.
func newAuth(dir string, n bus.Names) (*auth, error) {
	a := &auth{
		users: []bus.Permissions{
			n.IngestPermissions("ingest-1", []string{"Kubernetes"}),
			n.DebouncerPermissions("debouncer-a"),
			n.DebouncerPermissions("debouncer-b"),
			n.PusherPermissions("pusher-a", "pusher-a", "0"),
			n.PusherPermissions("pusher-b", "pusher-b", "0"),
			n.FrontendPermissions("fe-1", "fe-1"),
			n.FrontendPermissions("fe-2", "fe-2"),
			n.FrontendPermissions("fe-3", "fe-3"),
		},
		passwords: make(map[string]string),
		files:     make(map[string]string),
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	names := []string{"admin"}
	for _, u := range a.users {
		names = append(names, u.User)
	}
	for _, u := range names {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		pw := hex.EncodeToString(b[:])
		path := filepath.Join(dir, u+".password")
		if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
			return nil, err
		}
		a.passwords[u], a.files[u] = pw, path
	}
	return a, nil
}

// serverConfig is the accounts block of every node's config.
func (a *auth) serverConfig() string { return bus.ServerConfig("PILOTWIRE", a.users) }

// env holds the passwords the server config reads.
func (a *auth) env() []string {
	var out []string
	for u, pw := range a.passwords {
		out = append(out, bus.PasswordEnv(u)+"="+pw)
	}
	return out
}

// args are a service's flags to log in as user.
func (a *auth) args(user string) []string {
	if _, ok := a.files[user]; !ok {
		panic(fmt.Sprintf("faults: no NATS user %q", user))
	}
	return []string{"--nats-user", user, "--nats-password-file", a.files[user]}
}
