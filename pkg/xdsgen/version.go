package xdsgen

import (
	"crypto/sha256"
	"encoding/hex"
	"sync/atomic"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// marshals counts resources marshalled by this package.
var marshals atomic.Uint64

// Marshals returns how many resources this package has marshalled since the
// process started. Memoised generation does not marshal.
func Marshals() uint64 { return marshals.Load() }

var deterministic = proto.MarshalOptions{Deterministic: true}

// newResource marshals msg once, deterministically, and versions it by the
// hash of those bytes.
func newResource(name string, msg proto.Message) (*Resource, error) {
	b, err := deterministic.Marshal(msg)
	if err != nil {
		return nil, err
	}
	marshals.Add(1)
	sum := sha256.Sum256(b)
	return &Resource{
		Name:    name,
		Msg:     msg,
		Any:     &anypb.Any{TypeUrl: typeURLOf(msg), Value: b},
		Version: hex.EncodeToString(sum[:versionBytes]),
	}, nil
}

// versionBytes is how much of a SHA-256 a version keeps: 128 bits make a
// collision between two states of one resource practically impossible.
const versionBytes = 16

func typeURLOf(msg proto.Message) string {
	return "type.googleapis.com/" + string(msg.ProtoReflect().Descriptor().FullName())
}

// VersionOf returns the version of a response carrying resources: a hash of
// their (name, version) pairs in name order. It depends on content only, so
// every replica computes the same version for the same resources.
func VersionOf(resources []*Resource) string {
	rs := resources
	if !isSortedByName(rs) {
		rs = sortedByName(rs)
	}
	n := 0
	for _, r := range rs {
		n += len(r.Name) + len(r.Version) + 2
	}
	buf := make([]byte, 0, n)
	for _, r := range rs {
		buf = append(buf, r.Name...)
		buf = append(buf, 0)
		buf = append(buf, r.Version...)
		buf = append(buf, 0)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:versionBytes])
}
