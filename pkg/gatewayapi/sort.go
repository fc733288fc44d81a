package gatewayapi

import (
	"slices"

	networkingv1 "istio.io/api/networking/v1"
)

// sortHTTPRoutes orders routes (one match each) by the Gateway API's
// precedence: Exact before PathPrefix before RegularExpression paths,
// longer paths first, then routes with a method match, then more header
// matches, then more query param matches; routes without a match last.
// The sort is stable, so ties keep rule order.
func sortHTTPRoutes(routes []*networkingv1.HTTPRoute) {
	slices.SortStableFunc(routes, func(a, b *networkingv1.HTTPRoute) int {
		switch {
		case len(a.Match) == 0 && len(b.Match) == 0:
			return 0
		case len(a.Match) == 0:
			return 1
		case len(b.Match) == 0:
			return -1
		}
		m1, m2 := a.Match[0], b.Match[0]
		if r1, r2 := uriRank(m1), uriRank(m2); r1 != r2 {
			return r2 - r1
		}
		if l1, l2 := uriLen(m1), uriLen(m2); l1 != l2 {
			return l2 - l1
		}
		if (m1.Method == nil) != (m2.Method == nil) {
			if m1.Method != nil {
				return -1
			}
			return 1
		}
		if len(m1.Headers) != len(m2.Headers) {
			return len(m2.Headers) - len(m1.Headers)
		}
		return len(m2.QueryParams) - len(m1.QueryParams)
	})
}

func uriRank(m *networkingv1.HTTPMatchRequest) int {
	switch m.GetUri().GetMatchType().(type) {
	case *networkingv1.StringMatch_Exact:
		return 3
	case *networkingv1.StringMatch_Prefix:
		return 2
	case *networkingv1.StringMatch_Regex:
		return 1
	}
	return 0
}

func uriLen(m *networkingv1.HTTPMatchRequest) int {
	u := m.GetUri()
	return len(u.GetExact()) + len(u.GetPrefix()) + len(u.GetRegex())
}
