package adstest

import (
	"errors"
	"fmt"
	"regexp"

	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// ErrPreA63HeaderMatcher is what a gRPC client older than gRFC A63 (gRPC
// C-core 1.51 under Python, C++ and Ruby) says of a header matcher it
// cannot read, and it rejects the whole route configuration for it.
//
//lint:ignore ST1005 the client's own words, so a NACK's text can be matched
var ErrPreA63HeaderMatcher = errors.New("Invalid route header matcher specified.")

// PreA63HeaderMatcher reads h as a gRPC client older than gRFC A63 does:
// it knows exact_match, safe_regex_match, range_match, present_match,
// prefix_match, suffix_match and contains_match, and nothing else
// (string_match, the one field Envoy now documents, came with A63). It
// returns nil when the client accepts h.
func PreA63HeaderMatcher(h *route.HeaderMatcher) error {
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *route.HeaderMatcher_ExactMatch, *route.HeaderMatcher_PresentMatch,
		*route.HeaderMatcher_PrefixMatch, *route.HeaderMatcher_SuffixMatch, *route.HeaderMatcher_ContainsMatch:
		return nil
	case *route.HeaderMatcher_SafeRegexMatch:
		// The client compiles the regex (RE2) and refuses one that does not.
		//lint:ignore SA1019 pre-A63 gRPC clients read only the deprecated fields
		if _, err := regexp.Compile(s.SafeRegexMatch.GetRegex()); err != nil {
			return fmt.Errorf("header matcher %s: %w", h.GetName(), err)
		}
		return nil
	case *route.HeaderMatcher_RangeMatch:
		if s.RangeMatch.GetEnd() < s.RangeMatch.GetStart() {
			return fmt.Errorf("header matcher %s: range end %d is below its start %d", h.GetName(), s.RangeMatch.GetEnd(), s.RangeMatch.GetStart())
		}
		return nil
	}
	return fmt.Errorf("header %s (%T): %w", h.GetName(), h.GetHeaderMatchSpecifier(), ErrPreA63HeaderMatcher)
}

// PreA63RouteErrors is every header matcher of every route of rc that a
// gRPC client older than gRFC A63 refuses (PreA63HeaderMatcher), as
// "<virtual host>/<route>: <why>". One is enough for that client to NACK
// rc, and then every call to every host in it fails.
func PreA63RouteErrors(rc *route.RouteConfiguration) []string {
	var out []string
	for _, vh := range rc.GetVirtualHosts() {
		for i, r := range vh.GetRoutes() {
			for _, h := range r.GetMatch().GetHeaders() {
				if err := PreA63HeaderMatcher(h); err != nil {
					out = append(out, fmt.Sprintf("%s/routes[%d] %s: %v", vh.GetName(), i, r.GetName(), err))
				}
			}
		}
	}
	return out
}
