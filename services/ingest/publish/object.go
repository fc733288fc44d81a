package publish

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Key names one object within a cluster. It is what a change subject names:
// the API version is not part of it.
type Key struct {
	// Group is the API group, empty for the core group.
	Group     string
	Kind      string
	Namespace string // empty for cluster-scoped objects
	Name      string
}

// String is "<Kind>[.<group>] <namespace>/<name>" for logs.
func (k Key) String() string {
	return bus.KindToken(&pb.ObjectRef{Group: k.Group, Kind: k.Kind}) + " " + k.Namespace + "/" + k.Name
}

// CompareKeys orders keys by group, kind, namespace and name.
func CompareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// KindLabel is the bounded metric label of the key's kind: Kind or Kind.group.
func (k Key) KindLabel() string { return bus.KindToken(&pb.ObjectRef{Group: k.Group, Kind: k.Kind}) }

func (k Key) ref(version string) *pb.ObjectRef {
	return &pb.ObjectRef{Group: k.Group, Version: version, Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
}

// Object is a source's view of one object.
type Object struct {
	Key Key
	// Version is the API version without the group ("v1").
	Version string
	// UID is the Kubernetes uid; empty for sources without uids, for which
	// the publisher keeps the live record's uid or synthesizes one.
	UID string
	// ResourceVersion is the Kubernetes resourceVersion; empty means
	// ContentVersion(JSON).
	ResourceVersion string
	// ContentVersion, when set, stands for the record's content apart from
	// its resourceVersion (a hash, see ContentVersion): the publisher then
	// takes an object as unchanged when it equals the live record's, even
	// if the resourceVersion moved. A source whose records drop fields
	// (a Pod's container statuses, a Node's heartbeats) sets it, so that a
	// write only to dropped fields is no change, also across a restart. It
	// travels in the record's ContentVersionHeader.
	ContentVersion string
	// JSON is the whole object. For a delete it may be nil: the publisher
	// then takes the last object recorded on the stream.
	JSON []byte
	// Source says where the object came from ("file:a.yaml#2").
	Source string
}

// Change is one add/update (Upsert) or delete reported by a source.
type Change struct {
	Delete bool
	Object Object
}

// Upsert reports o as present; the publisher decides between ADD, UPDATE
// and nothing.
func Upsert(o Object) Change { return Change{Object: o} }

// Delete reports o as gone. Only o.Key is required.
func Delete(o Object) Change { return Change{Delete: true, Object: o} }

// ContentVersionHeader carries a record's Object.ContentVersion, when the
// source gave one.
const ContentVersionHeader = "Pilotwire-Content-Version"

// ContentVersion is the resourceVersion of an object that has none: "h-"
// and 16 hex digits of the SHA-256 of its (canonical) JSON.
func ContentVersion(json []byte) string {
	sum := sha256.Sum256(json)
	return "h-" + hex.EncodeToString(sum[:8])
}
