package natstest

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PullRefuser is a JetStream server that can lose a service's pull
// requests for real: while refusing, the service's user may not publish
// pull requests ($JS.API.CONSUMER.MSG.NEXT), so the server drops the next
// one the service's consumer sends, as it would a request lost on its way
// or forgotten by a stream leader that changed. An admin user may do
// everything throughout.
type PullRefuser struct {
	srv     *server.Server
	opts    *server.Options
	refused atomic.Int32
}

const (
	pullRefuserService = "svc"
	pullRefuserAdmin   = "admin"
)

// StartPullRefuser starts the server, taking pull requests, until the end
// of the test.
func StartPullRefuser(t testing.TB) *PullRefuser {
	t.Helper()
	p := &PullRefuser{}
	p.srv = StartServerWith(t, func(o *server.Options) {
		o.Users = pullRefuserUsers(true)
		p.opts = o
	})
	return p
}

func pullRefuserUsers(pull bool) []*server.User {
	perm := &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}}, Subscribe: &server.SubjectPermission{Allow: []string{">"}}}
	if !pull {
		perm.Publish.Deny = []string{"$JS.API.CONSUMER.MSG.NEXT.>"}
	}
	return []*server.User{{Username: pullRefuserService, Password: pullRefuserService, Permissions: perm}, {Username: pullRefuserAdmin, Password: pullRefuserAdmin}}
}

// URL is the server's client URL.
func (p *PullRefuser) URL() string { return p.srv.ClientURL() }

// ServiceOptions are the connection options of the service under test:
// its user, and an error handler counting its refused pull requests.
func (p *PullRefuser) ServiceOptions() []nats.Option {
	return []nats.Option{nats.UserInfo(pullRefuserService, pullRefuserService), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if strings.Contains(err.Error(), "Permissions Violation") && strings.Contains(err.Error(), "MSG.NEXT") {
			p.refused.Add(1)
		}
	})}
}

// Admin connects the admin user, until the end of the test.
func (p *PullRefuser) Admin(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectWith(t, p.URL(), nats.UserInfo(pullRefuserAdmin, pullRefuserAdmin))
}

// Service connects as the service under test, until the end of the test.
func (p *PullRefuser) Service(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectWith(t, p.URL(), p.ServiceOptions()...)
}

// Refuse makes the server refuse the service's pull requests (true) or
// take them again (false). The server reloads its options; in-process,
// its direct gets read them unlocked, so a test does not reload while the
// service reads by direct get.
func (p *PullRefuser) Refuse(t testing.TB, refuse bool) {
	t.Helper()
	o := p.opts.Clone()
	o.Users = pullRefuserUsers(!refuse)
	if err := p.srv.ReloadOptions(o); err != nil {
		t.Fatal(err)
	}
}

// Refused is how many of the service's pull requests the server refused
// (each as the service's connection reported it).
func (p *PullRefuser) Refused() int { return int(p.refused.Load()) }
