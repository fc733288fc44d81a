// Gateway API objects in the model.
//
// Gateway API Gateways, HTTPRoutes, GRPCRoutes and ReferenceGrants are
// stored as decoded objects and never read by the generators directly:
// [Store.routingInputs] runs them through [gatewayapi.Convert], as Istio's
// gateway controller does, and appends the Istio Gateways and
// VirtualServices it yields to the user's own, with [FromGatewayAPI] as
// their source and the Gateway API object as what their problems are
// reported against. The conversion resolves backendRefs against the
// services the model knows, so it runs again when the set of Services or
// ServiceEntries changes, not on every endpoint change.
package model

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/pilotwire/pilotwire/pkg/gatewayapi"
)

// GroupGatewayAPI is the API group of the Gateway API kinds.
const GroupGatewayAPI = "gateway.networking.k8s.io"

// storedGatewayAPI is one decoded Gateway API object: exactly one field set.
type storedGatewayAPI struct {
	key     ObjectKey
	gateway *gwv1.Gateway
	http    *gwv1.HTTPRoute
	grpc    *gwv1.GRPCRoute
	grant   *gwv1beta1.ReferenceGrant
}

// decodeGatewayAPI decodes a Gateway API record into an entry; ok is false
// for kinds of other groups (and for Gateway API kinds the model does not
// read, such as GatewayClass).
func decodeGatewayAPI(key ObjectKey, raw []byte) (e *entry, ok bool, err error) {
	if key.Group != GroupGatewayAPI {
		return nil, false, nil
	}
	st := &storedGatewayAPI{key: key}
	var obj any
	switch key.Kind {
	case gatewayapi.KindGateway:
		st.gateway = &gwv1.Gateway{}
		obj = st.gateway
	case gatewayapi.KindHTTPRoute:
		st.http = &gwv1.HTTPRoute{}
		obj = st.http
	case gatewayapi.KindGRPCRoute:
		st.grpc = &gwv1.GRPCRoute{}
		obj = st.grpc
	case gatewayapi.KindReferenceGrant:
		st.grant = &gwv1beta1.ReferenceGrant{}
		obj = st.grant
	default:
		return nil, false, nil
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, true, fmt.Errorf("decode %s: %w", key.Kind, err)
	}
	return &entry{gwapi: st}, true, nil
}

// gatewayAPIInput gathers the stored Gateway API objects and what their
// references resolve against.
func (s *Store) gatewayAPIInput() gatewayapi.Input {
	in := gatewayapi.Input{DomainSuffix: "cluster.local"}
	for _, k := range slices.SortedFunc(maps.Keys(s.gatewayAPI), compareKeys) {
		st := s.gatewayAPI[k]
		switch {
		case st.gateway != nil:
			in.Gateways = append(in.Gateways, st.gateway)
		case st.http != nil:
			in.HTTPRoutes = append(in.HTTPRoutes, st.http)
		case st.grpc != nil:
			in.GRPCRoutes = append(in.GRPCRoutes, st.grpc)
		case st.grant != nil:
			in.ReferenceGrants = append(in.ReferenceGrants, st.grant)
		}
	}
	in.Services, in.ServiceEntries = s.gatewayAPIRefs()
	return in
}

// gatewayAPIRefs lists the Services and ServiceEntries backendRefs resolve
// against, sorted.
func (s *Store) gatewayAPIRefs() ([]types.NamespacedName, []gatewayapi.ServiceEntry) {
	svcs := make([]types.NamespacedName, 0, len(s.services))
	for sk := range s.services {
		svcs = append(svcs, types.NamespacedName{Namespace: sk.Namespace, Name: sk.Name})
	}
	slices.SortFunc(svcs, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	ses := make([]gatewayapi.ServiceEntry, 0, len(s.entries))
	for _, se := range s.entries {
		ses = append(ses, gatewayapi.ServiceEntry{Namespace: se.key.Namespace, Name: se.key.Name, Hosts: se.spec.GetHosts()})
	}
	slices.SortFunc(ses, func(a, b gatewayapi.ServiceEntry) int {
		return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return svcs, ses
}

// gatewayAPIRef is what one object adds to the set Gateway API
// backendRefs and parentRefs resolve against: for a Service, whether its
// name exists in any cluster; for a ServiceEntry, whether it exists and
// its hosts.
type gatewayAPIRef struct {
	present bool
	hosts   []string
}

// gatewayAPIRefOf returns what key adds to that set now.
func (s *Store) gatewayAPIRefOf(key ObjectKey) gatewayAPIRef {
	switch {
	case key.isService():
		_, ok := s.services[serviceKey{Namespace: key.Namespace, Name: key.Name}]
		return gatewayAPIRef{present: ok}
	case key.isNetworking(KindServiceEntry):
		if se := s.entries[key]; se != nil {
			return gatewayAPIRef{present: true, hosts: se.spec.GetHosts()}
		}
	}
	return gatewayAPIRef{}
}

// noteGatewayAPIRef bumps gatewayAPIRefsGen if what key adds to that set
// is no longer before (taken before its record was applied): a Service
// name or a ServiceEntry came or went, or an entry's hosts changed. An
// update that keeps them costs no conversion.
func (s *Store) noteGatewayAPIRef(key ObjectKey, before gatewayAPIRef) {
	after := s.gatewayAPIRefOf(key)
	if after.present != before.present || !slices.Equal(after.hosts, before.hosts) {
		s.gatewayAPIRefsGen++
	}
}

// convertGatewayAPI converts the stored Gateway API objects into routing
// inputs.
func (s *Store) convertGatewayAPI() ([]*VirtualServiceInput, []*GatewayInput) {
	if len(s.gatewayAPI) == 0 {
		return nil, nil
	}
	out := gatewayapi.Convert(s.gatewayAPIInput())
	// The object each config came from (one cluster's copy when several
	// clusters hold it).
	sources := make(map[gatewayapi.Ref]*storedGatewayAPI, len(s.gatewayAPI))
	for _, k := range slices.SortedFunc(maps.Keys(s.gatewayAPI), compareKeys) {
		ref := gatewayapi.Ref{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name}
		if _, ok := sources[ref]; !ok {
			sources[ref] = s.gatewayAPI[k]
		}
	}
	origin := func(r gatewayapi.Ref) (string, time.Time) {
		st := sources[r]
		if st == nil {
			return r.String(), time.Time{}
		}
		return objectName(st.key), st.created()
	}
	vss := make([]*VirtualServiceInput, 0, len(out.VirtualServices))
	for _, c := range out.VirtualServices {
		obj, created := origin(c.Source)
		vss = append(vss, &VirtualServiceInput{Name: c.Name, Namespace: c.Namespace, Created: created, Spec: c.Spec, Source: FromGatewayAPI, Object: obj})
	}
	gws := make([]*GatewayInput, 0, len(out.Gateways))
	for _, c := range out.Gateways {
		obj, created := origin(c.Source)
		gws = append(gws, &GatewayInput{Name: c.Name, Namespace: c.Namespace, Created: created, Spec: c.Spec, Source: FromGatewayAPI, Object: obj})
	}
	return vss, gws
}

// created is the object's creation time (zero when unset).
func (st *storedGatewayAPI) created() time.Time {
	switch {
	case st.gateway != nil:
		return st.gateway.CreationTimestamp.Time
	case st.http != nil:
		return st.http.CreationTimestamp.Time
	case st.grpc != nil:
		return st.grpc.CreationTimestamp.Time
	case st.grant != nil:
		return st.grant.CreationTimestamp.Time
	}
	return time.Time{}
}

// compareKeys orders object keys by cluster, group, kind, namespace, name.
func compareKeys(a, b ObjectKey) int {
	return cmp.Or(strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.Group, b.Group),
		strings.Compare(a.Kind, b.Kind), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}
