package model

import (
	"strconv"
	"strings"
)

// DomainSuffix is the cluster DNS domain of service hostnames.
const DomainSuffix = "svc.cluster.local"

// TLSModeLabel is the workload label by which Istio's injector says a pod
// has a sidecar that accepts Istio mTLS ("istio"); "disabled" or no label
// means it does not.
const TLSModeLabel = "security.istio.io/tlsMode"

// TLSMode is an endpoint's TLS mode: its workload's [TLSModeLabel], "" for
// none or "disabled".
func (e *Endpoint) TLSMode() string {
	if m := e.Labels[TLSModeLabel]; m != "disabled" {
		return m
	}
	return ""
}

// Hostname returns the mesh hostname of a Service: <name>.<namespace>.svc.cluster.local.
func Hostname(namespace, name string) string {
	return name + "." + namespace + "." + DomainSuffix
}

// OutboundClusterName returns Istio's name for the cluster of one service port
// (and subset, usually empty): outbound|<port>|<subset>|<hostname>.
func OutboundClusterName(port int32, subset, hostname string) string {
	return "outbound|" + strconv.Itoa(int(port)) + "|" + subset + "|" + hostname
}

// ParseOutboundClusterName splits a name built by [OutboundClusterName]. ok is
// false when name is not of that form.
func ParseOutboundClusterName(name string) (port int32, subset, hostname string, ok bool) {
	rest, found := strings.CutPrefix(name, "outbound|")
	if !found {
		return 0, "", "", false
	}
	p, rest, found := strings.Cut(rest, "|")
	if !found {
		return 0, "", "", false
	}
	subset, hostname, found = strings.Cut(rest, "|")
	if !found || hostname == "" || strings.Contains(hostname, "|") {
		return 0, "", "", false
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, "", "", false
	}
	return int32(n), subset, hostname, true
}
