package xdsgen

import (
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

type serviceResult struct {
	resources []*Resource
	err       error
}

// perService builds a set of typeURL from resources generated service by
// service and memoised on each service under key: on its config memo unless
// the resources read endpoints. A name generated for two services keeps the
// first in hostname order.
func perService(m *model.Mesh, typeURL string, key any, endpoints bool, gen func(*model.Service) ([]*Resource, error)) (*Set, error) {
	all, err := perServiceResources(m, key, endpoints, gen)
	if err != nil {
		return nil, err
	}
	return newSet(typeURL, all), nil
}

func perServiceResources(m *model.Mesh, key any, endpoints bool, gen func(*model.Service) ([]*Resource, error)) ([]*Resource, error) {
	all := make([]*Resource, 0, len(m.Services))
	for _, svc := range m.Services {
		rs, err := serviceResources(svc, key, endpoints, gen)
		if err != nil {
			return nil, err
		}
		all = append(all, rs...)
	}
	return all, nil
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

// ruledKey memoises a service's resources generated under one
// DestinationRule (nil for none): a rule that changes is a new pointer,
// and a service whose rules change is a new service, so entries never go
// stale.
type ruledKey struct {
	key  any
	rule *model.DestinationRule
}

// perServiceRuled is perServiceResources for resources that read the
// DestinationRule a proxy in namespace ns applies to each service.
func perServiceRuled(m *model.Mesh, ns string, key any, gen func(*model.Mesh, *model.Service, *model.DestinationRule) ([]*Resource, error)) ([]*Resource, error) {
	all := make([]*Resource, 0, len(m.Services))
	for _, svc := range m.Services {
		dr := m.DestinationRule(ns, svc)
		k := key // boxed once: services without rules cost no allocation
		if dr != nil {
			k = ruledKey{key, dr}
		}
		r := svc.ConfigMemo(k, func() any {
			rs, err := gen(m, svc, dr)
			return serviceResult{resources: rs, err: err}
		}).(serviceResult)
		if r.err != nil {
			return nil, fmt.Errorf("service %s: %w", svc.Hostname, r.err)
		}
		all = append(all, r.resources...)
	}
	return all, nil
}
