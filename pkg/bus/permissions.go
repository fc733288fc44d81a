package bus

import (
	"fmt"
	"slices"
	"strings"
)

// Permissions are the subjects one NATS user may publish and subscribe to:
// the least a pilotwire service needs, derived from the names it uses.
type Permissions struct {
	User      string
	Publish   []string
	Subscribe []string
	// Durables are the durable consumers the user's service owns. Within
	// one server config (ServerConfig), every other user is denied them
	// (DenyPublish): none may delete, redefine, pull from or ack for a
	// consumer another service keeps its place in.
	Durables []Durable
	// DenyPublish overrides Publish (nats-server: a deny wins).
	DenyPublish []string
}

// Durable names a durable consumer on a stream.
type Durable struct{ Stream, Name string }

// deny is what a non-owner may not publish for d: creation or update
// (both create subjects, with and without a filter), deletion, pulls and
// acks. Its info stays readable, as any consumer's.
func (d Durable) deny() []string {
	c := d.Stream + "." + d.Name
	return []string{
		"$JS.API.CONSUMER.CREATE." + c,
		"$JS.API.CONSUMER.CREATE." + c + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + c,
		"$JS.API.CONSUMER.DELETE." + c,
		"$JS.API.CONSUMER.MSG.NEXT." + c,
		"$JS.ACK." + c + ".>",
	}
}

// Guard returns users with DenyPublish set: each is denied every durable
// consumer another user of the set owns (and not its own, nor one that
// user shares with it: two instances of one service, a standby and its
// active, own the same durable).
func Guard(users []Permissions) []Permissions {
	out := make([]Permissions, len(users))
	for i, u := range users {
		own := make(map[Durable]bool, len(u.Durables))
		for _, d := range u.Durables {
			own[d] = true
		}
		denied := make(map[Durable]bool)
		u.DenyPublish = slices.Clone(u.DenyPublish)
		for _, other := range users {
			for _, d := range other.Durables {
				if !own[d] && !denied[d] {
					denied[d] = true
					u.DenyPublish = append(u.DenyPublish, d.deny()...)
				}
			}
		}
		out[i] = u
	}
	return out
}

// jsStream is what a service needs of the JetStream API on one stream it
// uses: account info, the stream's info and creation (a service creates a
// missing stream, never updates, purges or deletes one), direct and
// message gets, consumers on it, acks and flow control.
func jsStream(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.CREATE." + stream,
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.DIRECT.GET." + stream,
		"$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.CONSUMER.CREATE." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>",
		"$JS.API.CONSUMER.DELETE." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.ACK." + stream + ".>",
		"$JS.FC." + stream + ".>",
	}
}

// jsStreamRead is jsStream without creating the stream: for one a service
// only reads.
func jsStreamRead(stream string) []string {
	var out []string
	for _, subj := range jsStream(stream) {
		if !strings.HasPrefix(subj, "$JS.API.STREAM.CREATE.") {
			out = append(out, subj)
		}
	}
	return out
}

func (n Names) kvStream(bucket string) string { return "KV_" + bucket }

func kvKey(bucket, key string) string { return "$KV." + bucket + "." + key }

// perms builds a user's permissions: the JetStream API on streams, what it
// publishes and subscribes to besides, and replies on its own inbox
// prefix (InboxPrefix).
func perms(user string, streams, publish, subscribe []string) Permissions {
	p := Permissions{User: user, Publish: []string{"$JS.API.INFO"}, Subscribe: []string{InboxPrefix(user) + ".>"}}
	for _, s := range streams {
		p.Publish = append(p.Publish, jsStream(s)...)
	}
	p.Publish = append(p.Publish, publish...)
	p.Subscribe = append(p.Subscribe, subscribe...)
	return p
}

// IngestPermissions: ingest writes the change records of its clusters and
// their leases, and reads the change stream and the snapshots it starts
// from (never creating the snapshot bucket).
func (n Names) IngestPermissions(user string, clusters []string) Permissions {
	var pub []string
	for _, c := range clusters {
		pub = append(pub, n.ChangesCluster(c), kvKey(n.LeaseBucket(), "ingest-"+EscapeToken(c)))
	}
	pub = append(jsStreamRead(objStream(n.SnapshotBucket())), pub...)
	return perms(user, []string{n.ChangesStream(), n.kvStream(n.LeaseBucket())}, pub, nil)
}

// objStream is the stream behind an object store bucket.
func objStream(bucket string) string { return "OBJ_" + bucket }

// DebouncerPermissions: the debouncer reads changes, writes PushRequests
// and its lease; its snapshotter (pkg/snapshot) holds the "snapshot"
// lease, writes the snapshot object store (chunks and metadata, purging
// a replaced snapshot's chunks) and compacts the change stream by
// subject purges, the one write to PW_CHANGES not ingest's.
func (n Names) DebouncerPermissions(user string) Permissions {
	b := n.SnapshotBucket()
	p := perms(user, []string{n.ChangesStream(), n.PushesStream(), n.kvStream(n.LeaseBucket()), objStream(b)},
		[]string{n.PushesSubject(), kvKey(n.LeaseBucket(), "debouncer"), kvKey(n.LeaseBucket(), "snapshot"),
			"$O." + b + ".>", "$JS.API.STREAM.PURGE." + objStream(b), "$JS.API.STREAM.PURGE." + n.ChangesStream()}, nil)
	p.Durables = []Durable{{n.ChangesStream(), n.DebouncerConsumer()}}
	return p
}

// PusherPermissions: the pusher (instance id, shard) reads PushRequests
// and the registry, sends orders to every frontend, hears their reports,
// removes the registry entries of dead frontends and holds its lease.
func (n Names) PusherPermissions(user, id, shard string) Permissions {
	p := perms(user, []string{n.PushesStream(), n.kvStream(n.RegistryBucket()), n.kvStream(n.LeaseBucket())},
		[]string{n.Prefix + ".fe.*.orders", kvKey(n.RegistryBucket(), ">"), kvKey(n.LeaseBucket(), "pusher-"+EscapeToken(shard))},
		[]string{n.DoneSubject(id), n.DoneSubject(id) + ".batch"})
	p.Durables = []Durable{{n.PushesStream(), n.PusherConsumer(shard)}}
	return p
}

// FrontendPermissions: an ADS frontend reads changes and the snapshots it
// starts from, writes its own deliveries and registry keys, takes its own
// orders and reports to pushers (single and batched completions).
func (n Names) FrontendPermissions(user, frontend string) Permissions {
	fe := EscapeToken(frontend)
	return perms(user, []string{n.ChangesStream(), n.DeliveriesStream(), n.kvStream(n.RegistryBucket()), objStream(n.SnapshotBucket())},
		[]string{n.Prefix + ".deliveries." + fe + ".>", kvKey(n.RegistryBucket(), FrontendKey(frontend)),
			kvKey(n.RegistryBucket(), ConnKeyKind+"."+fe+".>"), n.Prefix + ".pusher.*.done", n.Prefix + ".pusher.*.done.batch"},
		[]string{n.OrdersSubject(frontend)})
}

// ReaderPermissions: the CLI's debugging commands read every stream and
// bucket and write nothing (`streams check` included; `streams apply`
// needs an administrator of the account).
func (n Names) ReaderPermissions(user string) Permissions {
	p := Permissions{User: user, Publish: []string{"$JS.API.INFO"}, Subscribe: []string{InboxPrefix(user) + ".>"}}
	d := n.Declared(StreamOptions{})
	var streams []string
	for _, s := range d.Streams {
		streams = append(streams, s.Name)
	}
	for _, b := range d.Buckets {
		streams = append(streams, n.kvStream(b.Bucket))
	}
	for _, o := range d.ObjectStores {
		streams = append(streams, objStream(o.Bucket))
	}
	for _, s := range streams {
		p.Publish = append(p.Publish, jsStreamRead(s)...)
	}
	return p
}

// InboxPrefix is the reply-subject prefix of user's connections,
// _INBOX.<user>: each service user may subscribe only to its own replies
// and consumer deliveries (svc.NATSAuth sets it for --nats-user).
func InboxPrefix(user string) string { return "_INBOX." + EscapeToken(user) }

// PasswordEnv is the environment variable ServerConfig reads user's
// password from: PILOTWIRE_<USER>_PASSWORD, upper case, '-' as '_'.
func PasswordEnv(user string) string {
	return "PILOTWIRE_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

// ServerConfig renders users as a nats-server config block: one account
// (with JetStream) holding one user per service, each with a password
// read from an environment variable named after it (PasswordEnv), and an
// admin user. Each user is denied the durable consumers of the others
// (Guard).
func ServerConfig(account string, users []Permissions) string {
	users = Guard(users)
	var b strings.Builder
	fmt.Fprintf(&b, "accounts {\n  %s {\n    jetstream: enabled\n    users: [\n", account)
	quote := func(ss []string) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = fmt.Sprintf("%q", s)
		}
		return strings.Join(q, ", ")
	}
	for _, u := range users {
		fmt.Fprintf(&b, "      { user: %q, password: $%s, permissions: {\n", u.User, PasswordEnv(u.User))
		if len(u.DenyPublish) > 0 {
			fmt.Fprintf(&b, "          publish: { allow: [%s],\n            deny: [%s] }\n", quote(u.Publish), quote(u.DenyPublish))
		} else {
			fmt.Fprintf(&b, "          publish: { allow: [%s] }\n", quote(u.Publish))
		}
		fmt.Fprintf(&b, "          subscribe: { allow: [%s] }\n", quote(u.Subscribe))
		b.WriteString("      } }\n")
	}
	b.WriteString("      # streams apply, nats CLI: the whole account\n")
	fmt.Fprintf(&b, "      { user: \"admin\", password: $%s }\n", PasswordEnv("admin"))
	b.WriteString("    ]\n  }\n}\n")
	return b.String()
}

// ExampleUsers are the users of the example server config
// (deploy/nats/accounts.conf): one per service instance of an install with
// ingest watching cluster Kubernetes, the pusher run with --id pusher-0
// (shard 0), three frontends run with --frontend-id ads-0..2, and the CLI.
func (n Names) ExampleUsers() []Permissions {
	return []Permissions{
		n.IngestPermissions("ingest", []string{"Kubernetes"}),
		n.DebouncerPermissions("debouncer"),
		n.PusherPermissions("pusher", "pusher-0", "0"),
		n.FrontendPermissions("ads-0", "ads-0"),
		n.FrontendPermissions("ads-1", "ads-1"),
		n.FrontendPermissions("ads-2", "ads-2"),
		n.ReaderPermissions("cli"),
	}
}
