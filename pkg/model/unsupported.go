// Config pilotwire watches but does not translate.
//
// Ingest records every kind Istio's pilot reads, so the history is whole,
// but the model translates only some of them. Each object of the others
// (and each part of a Sidecar the model does not read) is a [Problem]
// naming it, so that frontends log, count and list it like any config
// they leave out. Its severity says whether leaving it out fails open:
// an error when the config would refuse traffic that now flows (an
// authorizing Wasm plugin, a Sidecar locking egress down), a warning
// otherwise. AuthorizationPolicies, RequestAuthentications (authz.go) and
// PeerAuthentications are translated; [Unsupported] lists what of the
// first two their record alone says is left out.
package model

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Groups of the kinds the model does not translate.
const (
	groupTelemetry  = "telemetry.istio.io"
	groupExtensions = "extensions.istio.io"
)

// GroupKind names a kind.
type GroupKind struct{ Group, Kind string }

// unsupportedKinds are the kinds ingest records that the model does not
// translate at all, each with what it makes of one object.
var unsupportedKinds = map[GroupKind]func(raw []byte) (Severity, string){
	{GroupNetworking, "EnvoyFilter"}: fixed("EnvoyFilter is not applied: pilotwire does not patch the config it generates"),
	{GroupNetworking, "WorkloadGroup"}: fixed("WorkloadGroup is not applied: pilotwire does not register workloads from it or probe their health; " +
		"WorkloadEntries are read as they are"),
	{GroupNetworking, "ProxyConfig"}:      fixed("ProxyConfig is not applied: pilotwire does not configure proxies' agents or bootstrap"),
	{groupTelemetry, "Telemetry"}:         fixed("Telemetry is not applied: pilotwire does not configure metrics, tracing or access logs"),
	{groupExtensions, "WasmPlugin"}:       wasmPluginProblem,
	{GroupGatewayAPI, "TCPRoute"}:         fixed("TCPRoute is not translated: pilotwire converts HTTPRoutes and GRPCRoutes only; no gateway serves it"),
	{GroupGatewayAPI, "TLSRoute"}:         fixed("TLSRoute is not translated: pilotwire converts HTTPRoutes and GRPCRoutes only; no gateway serves it"),
	{GroupGatewayAPI, "BackendTLSPolicy"}: fixed("BackendTLSPolicy is not applied: connections to the services it targets are not TLS-originated"),
}

// UnsupportedKinds lists the kinds whose objects [Unsupported] reports:
// those the model does not translate, and Sidecars (some of whose
// fields it does not read), sorted by group then kind.
func UnsupportedKinds() []GroupKind {
	out := []GroupKind{{GroupNetworking, KindSidecar}}
	for gk := range unsupportedKinds {
		out = append(out, gk)
	}
	slices.SortFunc(out, func(a, b GroupKind) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Kind, b.Kind))
	})
	return out
}

// isUnsupported reports whether the model does not translate key's kind.
func isUnsupported(key ObjectKey) bool {
	_, ok := unsupportedKinds[GroupKind{key.Group, key.Kind}]
	return ok
}

// unsupportedProblems are the problems of an object of a kind the model
// does not translate, nil for other kinds. It never fails: what cannot be
// read of the object is assumed the worst.
func unsupportedProblems(key ObjectKey, raw []byte) []Problem {
	f := unsupportedKinds[GroupKind{key.Group, key.Kind}]
	if f == nil {
		return nil
	}
	sev, why := f(raw)
	return []Problem{{Object: objectName(key), Reason: why, Severity: sev}}
}

// Unsupported returns the problems the model reports for what it does
// not translate of the object a change record adds or updates (nil for
// a delete, for other kinds and for an object translated in full), as
// frontends with mesh config mc (nil: Istio's defaults) list them. It
// reads the record alone, so the CLI lists them without building a
// model. A Sidecar that another one of its namespace overrides is
// reported here although the model ignores it whole.
func Unsupported(rec *pb.ChangeRecord, mc *meshconfig.MeshConfig) []Problem {
	if op := rec.GetOp(); op != pb.Op_OP_ADD && op != pb.Op_OP_UPDATE {
		return nil
	}
	ref := rec.GetRef()
	key := ObjectKey{Cluster: rec.GetCluster(), Group: ref.GetGroup(), Kind: ref.GetKind(), Namespace: ref.GetNamespace(), Name: ref.GetName()}
	if key.isAuthPolicy() {
		return authPolicyProblems(key, rec.GetObject(), mc)
	}
	if !key.isNetworking(KindSidecar) {
		return unsupportedProblems(key, rec.GetObject())
	}
	spec := &networkingv1.Sidecar{}
	if _, err := decodeIstio(rec.GetObject(), spec); err != nil {
		return nil // the model keeps the previous version, and says so
	}
	return sidecarUnsupported(objectName(key), spec, mc.OutboundMode())
}

func fixed(why string) func([]byte) (Severity, string) {
	return func([]byte) (Severity, string) { return SeverityWarning, why }
}

// policyMeta is the metadata of a policy the problems read.
type policyMeta struct {
	Annotations map[string]string `json:"annotations"`
}

// dryRunAnnotation is Istio's annotation for an AuthorizationPolicy that
// is only reported (Envoy's shadow rules), not enforced.
const dryRunAnnotation = "istio.io/dry-run"

// wasmPluginProblem: a plugin in the AUTHN or AUTHZ phase refuses
// requests; one in another phase only observes or changes them.
func wasmPluginProblem(raw []byte) (Severity, string) {
	const notApplied = "WasmPlugin is not applied (pilotwire does not configure Wasm extensions)"
	var obj struct {
		Spec struct {
			Phase string `json:"phase"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return SeverityError, notApplied + fmt.Sprintf(": its spec cannot be read (%v): if it authenticates or authorizes, the requests it would refuse are allowed", err)
	}
	switch p := obj.Spec.Phase; p {
	case "AUTHN", "AUTHZ":
		return SeverityError, notApplied + ": phase " + p + ": the requests it would refuse are allowed"
	}
	return SeverityWarning, notApplied
}

// sidecarUnsupported are the problems of the fields of a Sidecar the
// model does not read, on a mesh whose outbound mode is mode.
func sidecarUnsupported(obj string, spec *networkingv1.Sidecar, mode meshconfig.Mode) []Problem {
	var out []Problem
	warn := func(why string) { out = append(out, Problem{Object: obj, Reason: why}) }
	if len(spec.GetIngress()) > 0 {
		warn("ingress is not supported yet: inbound traffic goes through the default inbound listeners")
	}
	if spec.GetInboundConnectionPool() != nil {
		warn("inboundConnectionPool is not supported yet: inbound connections are not limited by it")
	}
	if otp := spec.GetOutboundTrafficPolicy(); otp != nil {
		// A policy without a mode is REGISTRY_ONLY (the proto's zero).
		own := meshconfig.AllowAny
		if otp.GetMode() == networkingv1.OutboundTrafficPolicy_REGISTRY_ONLY {
			own = meshconfig.RegistryOnly
		}
		switch {
		case own == mode:
		case own == meshconfig.RegistryOnly:
			out = append(out, Problem{Object: obj, Severity: SeverityError,
				Reason: "outboundTrafficPolicy REGISTRY_ONLY is not supported yet: the mesh's ALLOW_ANY applies, traffic to hosts outside the registry is allowed"})
		default:
			warn("outboundTrafficPolicy ALLOW_ANY is not supported yet: the mesh's REGISTRY_ONLY applies, traffic to hosts outside the registry is blocked")
		}
		if otp.GetEgressProxy() != nil {
			warn("outboundTrafficPolicy.egressProxy is not supported yet: traffic to hosts outside the registry does not go through it")
		}
	}
	return out
}
