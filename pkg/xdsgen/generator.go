package xdsgen

import (
	"errors"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// Generator selects the kind of client resources are generated for.
type Generator uint8

const (
	// Envoy generates Istio-style sidecar configuration.
	Envoy Generator = iota + 1
	// GRPC generates configuration for proxyless gRPC clients.
	GRPC
)

func (g Generator) String() string {
	switch g {
	case Envoy:
		return "envoy"
	case GRPC:
		return "grpc"
	}
	return fmt.Sprintf("Generator(%d)", uint8(g))
}

// GeneratorFor picks the generator for a client from its node metadata, as
// Istio does: GENERATOR=grpc selects [GRPC], anything else [Envoy].
func GeneratorFor(node *corev3.Node) Generator {
	if node.GetMetadata().GetFields()["GENERATOR"].GetStringValue() == "grpc" {
		return GRPC
	}
	return Envoy
}

// TypeURLs returns the resource types [Generate] produces, in the order
// Envoy applies them: clusters, endpoints, listeners, routes.
func TypeURLs() []string {
	return []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}
}

// memoKey names one generated type in the memo of a mesh or a service.
// Keys are boxed once, here, so that memo lookups do not allocate. EDS is
// the same for both generators, so its key has no generator.
type memoKey struct {
	gen     Generator
	typeURL string
}

var (
	keyEDS      any = memoKey{typeURL: resource.EndpointType}
	keyEnvoyCDS any = memoKey{Envoy, resource.ClusterType}
	keyEnvoyLDS any = memoKey{Envoy, resource.ListenerType}
	keyEnvoyRDS any = memoKey{Envoy, resource.RouteType}
	keyGRPCCDS  any = memoKey{GRPC, resource.ClusterType}
	keyGRPCLDS  any = memoKey{GRPC, resource.ListenerType}
	keyGRPCRDS  any = memoKey{GRPC, resource.RouteType}
	keyEnvoyTCP any = memoKey{Envoy, "tcp-listeners"} // per service, part of keyEnvoyLDS
)

type setResult struct {
	set *Set
	err error
}

// Generate returns every resource of type typeURL that g produces for m.
// Calling it again with the same mesh (or a mesh that differs only in Seq,
// or, for types other than endpoints, only in endpoints) returns the same
// *Set without generating anything. The Set is shared and read-only.
//
// Load assignments are identical for both generators: they carry what
// gRPC needs (localities, weights, health) and Envoy accepts it.
func Generate(m *model.Mesh, g Generator, typeURL string) (*Set, error) {
	if m == nil {
		return nil, errors.New("xdsgen: nil mesh")
	}
	var (
		key   any
		build func(*model.Mesh) (*Set, error)
	)
	switch {
	case g != Envoy && g != GRPC:
		return nil, fmt.Errorf("xdsgen: unknown generator %v", g)
	case typeURL == resource.EndpointType:
		key, build = keyEDS, endpointSet
	case typeURL == resource.ClusterType && g == Envoy:
		key, build = keyEnvoyCDS, envoyClusterSet
	case typeURL == resource.ClusterType && g == GRPC:
		key, build = keyGRPCCDS, grpcClusterSet
	case typeURL == resource.ListenerType && g == Envoy:
		key, build = keyEnvoyLDS, envoyListenerSet
	case typeURL == resource.ListenerType && g == GRPC:
		key, build = keyGRPCLDS, grpcListenerSet
	case typeURL == resource.RouteType && g == Envoy:
		key, build = keyEnvoyRDS, envoyRouteSet
	case typeURL == resource.RouteType && g == GRPC:
		key, build = keyGRPCRDS, grpcRouteSet
	default:
		return nil, fmt.Errorf("xdsgen: %v generator: unsupported type %q", g, typeURL)
	}
	f := func() any {
		s, err := build(m)
		return setResult{set: s, err: err}
	}
	var r setResult
	if key == keyEDS {
		r = m.Memo(key, f).(setResult)
	} else {
		r = m.ConfigMemo(key, f).(setResult)
	}
	if r.err != nil {
		return nil, fmt.Errorf("xdsgen: %v %s: %w", g, typeURL, r.err)
	}
	return r.set, nil
}

type serviceResult struct {
	resources []*Resource
	err       error
}

// perService builds a set of typeURL from resources generated service by
// service and memoised on each service under key: on its config memo unless
// the resources read endpoints. A name generated for two services keeps the
// first in hostname order.
func perService(m *model.Mesh, typeURL string, key any, endpoints bool, gen func(*model.Service) ([]*Resource, error)) (*Set, error) {
	all := make([]*Resource, 0, len(m.Services))
	for _, svc := range m.Services {
		rs, err := serviceResources(svc, key, endpoints, gen)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	return newSet(typeURL, all), nil
}

func serviceResources(svc *model.Service, key any, endpoints bool, gen func(*model.Service) ([]*Resource, error)) ([]*Resource, error) {
	f := func() any {
		rs, err := gen(svc)
		return serviceResult{resources: rs, err: err}
	}
	var r serviceResult
	if endpoints {
		r = svc.Memo(key, f).(serviceResult)
	} else {
		r = svc.ConfigMemo(key, f).(serviceResult)
	}
	if r.err != nil {
		return nil, fmt.Errorf("service %s: %w", svc.Hostname, r.err)
	}
	return r.resources, nil
}

// servedPorts calls fn for every port xDS is generated for: TCP ports of
// services that are not ExternalName.
func servedPorts(svc *model.Service, fn func(p *model.Port, proto protocol) error) error {
	if svc.ExternalName != "" {
		return nil // would need a DNS cluster; not generated yet
	}
	for _, p := range svc.Ports {
		if proto := classify(p); proto != protoUnsupported {
			if err := fn(p, proto); err != nil {
				return err
			}
		}
	}
	return nil
}

func clusterName(svc *model.Service, p *model.Port) string {
	return model.OutboundClusterName(p.Port, "", svc.Hostname)
}
