// Package bus names pilotwire's JetStream streams, subjects, buckets and
// consumers, and creates them idempotently. Every service derives every name
// from one configurable prefix (default "pw"), so several meshes can share
// one NATS deployment.
package bus

import (
	"fmt"
	"strings"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// MaxSubjectLen bounds every subject pilotwire publishes on. The server
// refuses a control line over its max_control_line (4 KiB by default) and
// nats.go then closes the connection for good; names that Kubernetes
// validates (253-byte names, 63-byte namespaces) stay far below it even
// escaped. A publisher refuses a longer subject instead of sending it.
const MaxSubjectLen = 1024

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "pw"

// Names derives every stream, subject, bucket and consumer name from a prefix.
type Names struct {
	Prefix string
}

// NewNames validates prefix and returns the names derived from it.
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	for _, r := range prefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return Names{}, fmt.Errorf("subject prefix %q: only letters, digits, '-' and '_' are allowed", prefix)
		}
	}
	return Names{Prefix: prefix}, nil
}

func (n Names) upper() string { return strings.ToUpper(strings.ReplaceAll(n.Prefix, "-", "_")) }

// ChangesStream is the durable history of every observed object change.
func (n Names) ChangesStream() string { return n.upper() + "_CHANGES" }

// ChangesAll matches every change subject.
func (n Names) ChangesAll() string { return n.Prefix + ".changes.>" }

// ChangeKind returns the kind token (KindToken, escaped) of a change
// subject, and false for a subject that is not one of n's changes.
func (n Names) ChangeKind(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, n.Prefix+".changes.")
	if !ok {
		return "", false
	}
	_, rest, ok = strings.Cut(rest, ".") // the cluster
	if !ok {
		return "", false
	}
	kind, rest, ok := strings.Cut(rest, ".")
	if !ok || !strings.Contains(rest, ".") { // a namespace and a name follow
		return "", false
	}
	return kind, true
}

// ChangesCluster matches every change subject of one cluster.
func (n Names) ChangesCluster(cluster string) string {
	return n.Prefix + ".changes." + EscapeToken(cluster) + ".>"
}

// ChangeSubject names one object: <prefix>.changes.<cluster>.<kind>.<ns>.<name>.
func (n Names) ChangeSubject(cluster string, ref *pb.ObjectRef) string {
	var b strings.Builder
	b.Grow(len(n.Prefix) + 40 + len(cluster) + len(ref.GetName()) + len(ref.GetNamespace()))
	b.WriteString(n.Prefix)
	b.WriteString(".changes.")
	b.WriteString(EscapeToken(cluster))
	b.WriteByte('.')
	b.WriteString(EscapeToken(KindToken(ref)))
	b.WriteByte('.')
	b.WriteString(NamespaceToken(ref.GetNamespace()))
	b.WriteByte('.')
	b.WriteString(EscapeToken(ref.GetName()))
	return b.String()
}

// PushesStream holds debounced PushRequests.
func (n Names) PushesStream() string { return n.upper() + "_PUSHES" }

// PushesSubject is the subject of every PushRequest.
func (n Names) PushesSubject() string { return n.Prefix + ".pushes" }

// DeliveriesStream holds what frontends sent to proxies and how they answered.
func (n Names) DeliveriesStream() string { return n.upper() + "_DELIVERIES" }

// DeliveriesAll matches every delivery subject.
func (n Names) DeliveriesAll() string { return n.Prefix + ".deliveries.>" }

// DeliverySubject is where earlier releases recorded one connection's
// exchanges, one DeliveryRecord per message. Readers still decode it.
func (n Names) DeliverySubject(frontend, conn string) string {
	return n.Prefix + ".deliveries." + EscapeToken(frontend) + "." + EscapeToken(conn)
}

// DeliveryBatchSubject is where a frontend records its connections'
// exchanges, a DeliveryBatch per message.
func (n Names) DeliveryBatchSubject(frontend string) string {
	return n.Prefix + ".deliveries." + EscapeToken(frontend) + "." + deliveryBatchTail
}

// DeliveriesOf matches every delivery subject of a frontend: its batches
// and earlier releases' per-connection records.
func (n Names) DeliveriesOf(frontend string) string {
	return n.Prefix + ".deliveries." + EscapeToken(frontend) + ".>"
}

// deliveryBatchTail ends a batch subject. A per-connection subject has one
// token after the frontend, so the two never meet.
const deliveryBatchTail = "batch.v1"

// RegistryBucket is the KV bucket of frontends and their connections.
func (n Names) RegistryBucket() string { return n.upper() + "_REGISTRY" }

// LeaseBucket is the KV bucket of active/standby leases.
func (n Names) LeaseBucket() string { return n.upper() + "_LEASES" }

// SnapshotBucket is the object store of model snapshots (pkg/snapshot).
func (n Names) SnapshotBucket() string { return n.upper() + "_SNAPSHOTS" }

// Kinds of registry keys, as ParseRegistryKey reports them.
const (
	FrontendKeyKind = "fe"   // a frontend's heartbeat: fe.<frontend>
	ConnKeyKind     = "conn" // a connection: conn.<frontend>.<conn>
)

// FrontendKey is a frontend's heartbeat key in the registry bucket.
func FrontendKey(frontend string) string { return FrontendKeyKind + "." + EscapeToken(frontend) }

// ConnKey is a connection's key in the registry bucket.
func ConnKey(frontend, conn string) string {
	return ConnKeyKind + "." + EscapeToken(frontend) + "." + EscapeToken(conn)
}

// ParseRegistryKey reverses FrontendKey and ConnKey: it returns the key's
// kind (FrontendKeyKind or ConnKeyKind) and its unescaped ids (conn is ""
// for a frontend key). ok is false for any other key.
func ParseRegistryKey(key string) (kind, frontend, conn string, ok bool) {
	parts := strings.Split(key, ".")
	switch {
	case len(parts) == 2 && parts[0] == FrontendKeyKind:
		fe, err := UnescapeToken(parts[1])
		return FrontendKeyKind, fe, "", err == nil
	case len(parts) == 3 && parts[0] == ConnKeyKind:
		fe, err1 := UnescapeToken(parts[1])
		c, err2 := UnescapeToken(parts[2])
		return ConnKeyKind, fe, c, err1 == nil && err2 == nil
	}
	return "", "", "", false
}

// OrdersSubject is where a frontend takes PushOrderBatches.
func (n Names) OrdersSubject(frontend string) string {
	return n.Prefix + ".fe." + EscapeToken(frontend) + ".orders"
}

// DoneSubject is where a pusher (shard) takes PushDone reports.
func (n Names) DoneSubject(pusher string) string {
	return n.Prefix + ".pusher." + EscapeToken(pusher) + ".done"
}

// DebouncerConsumer is the durable consumer of the debouncer on CHANGES.
func (n Names) DebouncerConsumer() string { return "debouncer" }

// PusherConsumer is the durable consumer of the pusher (shard) on PUSHES.
func (n Names) PusherConsumer(shard string) string { return "pusher-" + EscapeToken(shard) }

// KindToken is the kind part of a change subject: Kind for the core group,
// Kind.group otherwise (escaped by the caller).
func KindToken(ref *pb.ObjectRef) string {
	if ref.GetGroup() == "" {
		return ref.GetKind()
	}
	return ref.GetKind() + "." + ref.GetGroup()
}

// NamespaceToken is the namespace part of a change subject; cluster-scoped
// objects use "_", which no Kubernetes namespace can be.
func NamespaceToken(ns string) string {
	if ns == "" {
		return "_"
	}
	return EscapeToken(ns)
}

// EscapeToken makes s one token valid in a NATS subject, a JetStream KV key
// and a consumer name, reversibly: letters, digits, '-' and '_' stay, every
// other byte becomes =XX (upper-case hex). The empty string becomes "=",
// which no other string escapes to, so that no token is empty.
func EscapeToken(s string) string {
	if s == "" {
		return string(escapeByte)
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if !plainByte(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plainByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(escapeByte)
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// UnescapeToken reverses EscapeToken.
func UnescapeToken(tok string) (string, error) {
	if tok == string(escapeByte) {
		return "", nil
	}
	if strings.IndexByte(tok, escapeByte) < 0 {
		return tok, nil
	}
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if c != escapeByte {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(tok) {
			return "", fmt.Errorf("token %q: truncated escape", tok)
		}
		hi, lo := unhex(tok[i+1]), unhex(tok[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("token %q: bad escape", tok)
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}

// escapeByte starts an escape. It must be valid in a subject token, a
// JetStream KV key ([-/_=.a-zA-Z0-9]) and a consumer name, and not plain:
// '=' is the one byte that is all three. ('%' is not a valid KV key byte:
// with it, a frontend id with a dot could never heartbeat.)
const escapeByte = '='

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// ChangesKind matches the change subjects of one kind (ref's group and
// kind) in every cluster and namespace.
func (n Names) ChangesKind(ref *pb.ObjectRef) string {
	return n.Prefix + ".changes.*." + EscapeToken(KindToken(ref)) + ".>"
}
