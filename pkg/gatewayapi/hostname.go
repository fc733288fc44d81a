package gatewayapi

import (
	"slices"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// intersectHostnames returns the hostnames a route serves on a listener,
// as the Gateway API defines them: with no listener hostname, the
// route's (or "*"); with no route hostnames, the listener's; else each
// route hostname that matches the listener's, the more specific of the
// two. A wildcard "*.example.com" matches one or more labels in front of
// example.com. The result is deduplicated, in route order.
func intersectHostnames(route []gwv1.Hostname, listener *gwv1.Hostname) []string {
	lh := ""
	if listener != nil {
		lh = string(*listener)
	}
	if len(route) == 0 {
		return []string{or(lh, "*")}
	}
	var out []string
	for _, r := range route {
		h, ok := intersectHostname(string(r), lh)
		if ok && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

func intersectHostname(route, listener string) (string, bool) {
	switch {
	case listener == "" || listener == "*":
		return route, true
	case route == listener:
		return route, true
	case wildcardMatches(listener, route):
		return route, true
	case wildcardMatches(route, listener):
		return listener, true
	}
	return "", false
}

// wildcardMatches reports whether wildcard "*.suffix" matches h, which
// may itself be a longer wildcard.
func wildcardMatches(wildcard, h string) bool {
	if !strings.HasPrefix(wildcard, "*.") {
		return false
	}
	suffix := wildcard[1:] // ".example.com"
	return strings.HasSuffix(h, suffix) && len(h) > len(suffix) && h != wildcard
}
