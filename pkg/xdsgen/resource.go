package xdsgen

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Resource is one generated xDS resource. It is shared by every caller and
// every connection: nothing in it may be modified.
type Resource struct {
	Name string
	// Msg is the resource itself.
	Msg proto.Message
	// Any is Msg marshalled once, deterministically, ready to send.
	Any *anypb.Any
	// Version is a hash of Any.Value (hex, 128 bits). Marshalling is
	// deterministic for a given build, so replicas running the same build
	// agree on it.
	Version string
}

// Set is every resource of one type generated from one mesh. Read-only.
type Set struct {
	TypeURL string
	// Resources sorted by name, unique by name.
	Resources []*Resource
	// Version is VersionOf(Resources).
	Version string

	byName map[string]*Resource
}

// newSet builds a set from resources in any order. When two resources share
// a name, the one earlier in rs wins.
func newSet(typeURL string, rs []*Resource) *Set {
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, compareNames)
	rs = slices.CompactFunc(rs, func(a, b *Resource) bool { return a.Name == b.Name })
	byName := make(map[string]*Resource, len(rs))
	for _, r := range rs {
		byName[r.Name] = r
	}
	return &Set{TypeURL: typeURL, Resources: rs, Version: VersionOf(rs), byName: byName}
}

// Get returns the resource named name, or nil.
func (s *Set) Get(name string) *Resource { return s.byName[name] }

// Select returns the resources a request names, sorted by name, and the
// version of that response (see [VersionOf]). No names, or the name "*",
// selects every resource (a wildcard subscription). Names the set does not
// hold are left out. The returned slice may be the set's own: read-only.
func (s *Set) Select(names []string) ([]*Resource, string) {
	if len(names) == 0 || slices.Contains(names, "*") {
		return s.Resources, s.Version
	}
	var out []*Resource
	for _, n := range names {
		if r := s.byName[n]; r != nil {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, compareNames)
	out = slices.Compact(out)
	return out, VersionOf(out)
}

func compareNames(a, b *Resource) int { return strings.Compare(a.Name, b.Name) }

func isSortedByName(rs []*Resource) bool { return slices.IsSortedFunc(rs, compareNames) }

func sortedByName(rs []*Resource) []*Resource {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, compareNames)
	return rs
}
