// Package xdsstate describes the configuration an Envoy proxy holds, in a
// form the benchmark compares cheaply: for each of CDS, EDS, LDS and RDS,
// an order-independent hash of the set of (resource name, resource bytes)
// it holds. It is independent of response versions and nonces, so a proxy
// of pilotwire and a proxy of the go-control-plane baseline that hold the
// same resources have the same State.
//
// It also computes the State a proxy should reach for a mesh (Expected),
// by following the references an Envoy follows: every EDS cluster's load
// assignment, every route configuration a listener names.
package xdsstate

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cespare/xxhash/v2"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

// Type indexes, in the order Envoy applies them.
const (
	CDS = iota
	EDS
	LDS
	RDS
	NumTypes
)

// TypeURLs are the type URLs of CDS, EDS, LDS and RDS.
var TypeURLs = [NumTypes]string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}

// Names are short names of the types, for reports.
var Names = [NumTypes]string{"cds", "eds", "lds", "rds"}

// Index returns the index of a type URL, or -1.
func Index(typeURL string) int {
	for i, u := range TypeURLs {
		if u == typeURL {
			return i
		}
	}
	return -1
}

// FullState reports whether a state-of-the-world response of type t
// carries every resource of the type (CDS, LDS) rather than only those
// that changed being allowed (EDS, RDS).
func FullState(t int) bool { return t == CDS || t == LDS }

// State is, per type, the XOR of EntryHash over the resources held: equal
// sets give equal states whatever the order they arrived in.
type State [NumTypes]uint64

func (s State) String() string {
	return fmt.Sprintf("cds=%016x eds=%016x lds=%016x rds=%016x", s[CDS], s[EDS], s[LDS], s[RDS])
}

// ContentHash hashes a resource's serialized bytes.
func ContentHash(b []byte) uint64 { return xxhash.Sum64(b) }

// EntryHash hashes one held resource: its name and its content hash.
func EntryHash(name string, content uint64) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(name)
	var b [9]byte
	binary.LittleEndian.PutUint64(b[1:], content)
	_, _ = d.Write(b[:])
	return d.Sum64()
}

// Decoded is what a proxy needs from one resource: its name and the names
// it makes the proxy subscribe to (load assignments of an EDS cluster,
// route configurations of a listener).
type Decoded struct {
	Name string
	Refs []string
}

// Decode unmarshals a resource of type t and returns its name and refs.
func Decode(t int, value []byte) (Decoded, error) {
	var m proto.Message
	switch t {
	case CDS:
		m = &clusterv3.Cluster{}
	case EDS:
		m = &endpointv3.ClusterLoadAssignment{}
	case LDS:
		m = &listenerv3.Listener{}
	case RDS:
		m = &routev3.RouteConfiguration{}
	default:
		return Decoded{}, fmt.Errorf("unknown type index %d", t)
	}
	if err := proto.Unmarshal(value, m); err != nil {
		return Decoded{}, fmt.Errorf("decode %s: %w", Names[t], err)
	}
	refs, err := Refs(m)
	if err != nil {
		return Decoded{}, err
	}
	return Decoded{Name: NameOf(m), Refs: refs}, nil
}

// NameOf returns the name of a CDS, EDS, LDS or RDS resource.
func NameOf(m proto.Message) string {
	switch r := m.(type) {
	case *clusterv3.Cluster:
		return r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return r.GetClusterName()
	case *listenerv3.Listener:
		return r.GetName()
	case *routev3.RouteConfiguration:
		return r.GetName()
	}
	return ""
}

// Refs returns the resources m makes an Envoy subscribe to, sorted: the
// load assignment of an EDS cluster; the route configurations named by a
// listener's HTTP connection managers (filter chains and API listener).
func Refs(m proto.Message) ([]string, error) {
	var refs []string
	switch r := m.(type) {
	case *clusterv3.Cluster:
		if r.GetType() == clusterv3.Cluster_EDS {
			name := r.GetEdsClusterConfig().GetServiceName()
			if name == "" {
				name = r.GetName()
			}
			refs = append(refs, name)
		}
	case *listenerv3.Listener:
		add := func(a *anypb.Any) error {
			if a.GetTypeUrl() != hcmTypeURL {
				return nil
			}
			var hcm hcmv3.HttpConnectionManager
			if err := a.UnmarshalTo(&hcm); err != nil {
				return fmt.Errorf("listener %s: decode connection manager: %w", r.GetName(), err)
			}
			if n := hcm.GetRds().GetRouteConfigName(); n != "" {
				refs = append(refs, n)
			}
			return nil
		}
		chains := r.GetFilterChains()
		if dc := r.GetDefaultFilterChain(); dc != nil {
			chains = append(slices.Clip(chains), dc)
		}
		for _, fc := range chains {
			for _, f := range fc.GetFilters() {
				if err := add(f.GetTypedConfig()); err != nil {
					return nil, err
				}
			}
		}
		if err := add(r.GetApiListener().GetApiListener()); err != nil {
			return nil, err
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs), nil
}

var hcmTypeURL = "type.googleapis.com/" + string((&hcmv3.HttpConnectionManager{}).ProtoReflect().Descriptor().FullName())

// Res is one resource a proxy holds: its content hash and size in bytes.
type Res struct {
	Content uint64
	Size    int
}

// Config is what a proxy holds, per type: resource name -> resource.
type Config [NumTypes]map[string]Res

// State returns the config's State.
func (c *Config) State() State {
	var s State
	for t := range NumTypes {
		for name, r := range c[t] {
			s[t] ^= EntryHash(name, r.Content)
		}
	}
	return s
}

// Count is the number of resources held.
func (c *Config) Count() int {
	n := 0
	for t := range NumTypes {
		n += len(c[t])
	}
	return n
}

// Changed counts the resources of next that prev lacks or holds with other
// content, and their bytes: the least a server must send to take a proxy
// from prev to next.
func Changed(prev, next *Config) (resources, bytes int) {
	for t := range NumTypes {
		for name, r := range next[t] {
			if old, ok := prev[t][name]; !ok || old.Content != r.Content {
				resources++
				bytes += r.Size
			}
		}
	}
	return resources, bytes
}

// Expected returns the configuration an Envoy that subscribes like a
// sidecar (CDS and LDS wildcard, EDS for its EDS clusters, RDS for the
// route configurations its listeners name) holds once in sync with m,
// served by generator gen.
func Expected(m *model.Mesh, gen xdsgen.Generator) (*Config, error) {
	var c Config
	sets := make([]*xdsgen.Set, NumTypes)
	for t := range NumTypes {
		s, err := xdsgen.Generate(m, gen, TypeURLs[t])
		if err != nil {
			return nil, err
		}
		sets[t] = s
		c[t] = make(map[string]Res)
	}
	follow := func(from, to int) error {
		for _, r := range sets[from].Resources {
			c[from][r.Name] = res(r)
			refs, err := Refs(r.Msg)
			if err != nil {
				return err
			}
			for _, n := range refs {
				if x := sets[to].Get(n); x != nil {
					c[to][n] = res(x)
				}
			}
		}
		return nil
	}
	if err := follow(CDS, EDS); err != nil {
		return nil, err
	}
	if err := follow(LDS, RDS); err != nil {
		return nil, err
	}
	return &c, nil
}

func res(r *xdsgen.Resource) Res {
	v := r.Any.GetValue()
	return Res{Content: ContentHash(v), Size: len(v)}
}
