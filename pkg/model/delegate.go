package model

import (
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
)

// mergeDelegateRoute is Istio's delegate merge of root route r and
// delegate route d: d's matches must each fall within one of r's (the
// result has every compatible pair merged), and what d leaves unset r
// gives. ok is false when some match of d conflicts with every one of r.
func mergeDelegateRoute(r, d *networkingv1.HTTPRoute) (*networkingv1.HTTPRoute, bool) {
	out := proto.Clone(d).(*networkingv1.HTTPRoute)
	switch {
	case len(r.GetMatch()) == 0:
	case len(d.GetMatch()) == 0:
		out.Match = r.GetMatch()
	default:
		var matches []*networkingv1.HTTPMatchRequest
		for _, dm := range d.GetMatch() {
			found := false
			for _, rm := range r.GetMatch() {
				if matchConflict(rm, dm) {
					continue
				}
				matches = append(matches, mergeMatch(rm, dm))
				found = true
			}
			if !found {
				return nil, false
			}
		}
		out.Match = matches
	}
	out.Name = joinNames(r.GetName(), out.Name)
	inherit(&out.Rewrite, r.Rewrite)
	inherit(&out.DirectResponse, r.DirectResponse)
	inherit(&out.Timeout, r.Timeout)
	inherit(&out.Retries, r.Retries)
	inherit(&out.Fault, r.Fault)
	inherit(&out.Mirror, r.Mirror)
	inherit(&out.MirrorPercentage, r.MirrorPercentage)
	if out.Mirrors == nil {
		out.Mirrors = r.Mirrors
	}
	inherit(&out.CorsPolicy, r.CorsPolicy)
	inherit(&out.Headers, r.Headers)
	return out, true
}

func mergeMatch(r, d *networkingv1.HTTPMatchRequest) *networkingv1.HTTPMatchRequest {
	out := proto.Clone(d).(*networkingv1.HTTPMatchRequest)
	out.Name = joinNames(r.GetName(), out.Name)
	inherit(&out.Uri, r.Uri)
	inherit(&out.Scheme, r.Scheme)
	inherit(&out.Method, r.Method)
	inherit(&out.Authority, r.Authority)
	out.Headers = mergeMaps(r.Headers, d.Headers)
	out.WithoutHeaders = mergeMaps(r.WithoutHeaders, d.WithoutHeaders)
	out.QueryParams = mergeMaps(r.QueryParams, d.QueryParams)
	out.SourceLabels = mergeMaps(r.SourceLabels, d.SourceLabels)
	if out.Port == 0 {
		out.Port = r.Port
	}
	if out.SourceNamespace == "" {
		out.SourceNamespace = r.SourceNamespace
	}
	if len(out.Gateways) == 0 {
		out.Gateways = r.Gateways
	}
	return out
}

// mergeMaps is base with top's entries set over it (nil when both are
// empty).
func mergeMaps[V any](base, top map[string]V) map[string]V {
	if len(base)+len(top) == 0 {
		return nil
	}
	out := make(map[string]V, len(base)+len(top))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range top {
		out[k] = v
	}
	return out
}

// matchConflict reports whether delegate match d can match a request root
// match r cannot.
func matchConflict(r, d *networkingv1.HTTPMatchRequest) bool {
	for _, pair := range [][2]*networkingv1.StringMatch{{r.Uri, d.Uri}, {r.Scheme, d.Scheme}, {r.Method, d.Method}, {r.Authority, d.Authority}} {
		if stringConflict(pair[0], pair[1]) {
			return true
		}
	}
	for _, m := range []struct {
		r, d map[string]*networkingv1.StringMatch
	}{{r.Headers, d.Headers}, {r.WithoutHeaders, d.WithoutHeaders}, {r.QueryParams, d.QueryParams}} {
		for k, dv := range m.d {
			if stringConflict(m.r[k], dv) {
				return true
			}
		}
	}
	if r.IgnoreUriCase != d.IgnoreUriCase || r.Port > 0 && d.Port > 0 && r.Port != d.Port {
		return true
	}
	if r.SourceNamespace != "" && d.SourceNamespace != r.SourceNamespace {
		return true
	}
	for k, v := range d.SourceLabels {
		if rv, ok := r.SourceLabels[k]; ok && rv != v {
			return true
		}
	}
	if len(r.Gateways) > 0 && len(d.Gateways) > 0 {
		for _, g := range d.Gateways {
			if !slices.Contains(r.Gateways, g) {
				return true
			}
		}
	}
	return false
}

// stringConflict reports whether leaf matches something root does not;
// an unset side never conflicts.
func stringConflict(root, leaf *networkingv1.StringMatch) bool {
	if root == nil || leaf == nil {
		return false
	}
	if root.GetRegex() != "" || leaf.GetRegex() != "" {
		return true // regexes cannot be compared
	}
	if e := root.GetExact(); e != "" {
		return leaf.GetExact() != e
	}
	if p := root.GetPrefix(); p != "" {
		switch {
		case leaf.GetPrefix() != "":
			return !strings.HasPrefix(leaf.GetPrefix(), p)
		case leaf.GetExact() != "":
			return !strings.HasPrefix(leaf.GetExact(), p)
		}
	}
	return true
}

// inherit sets *dst to src when *dst is unset.
func inherit[T any](dst **T, src *T) {
	if *dst == nil {
		*dst = src
	}
}

// joinNames names a merged route or match: root-delegate, or whichever
// is set.
func joinNames(root, delegate string) string {
	switch {
	case delegate == "":
		return root
	case root != "":
		return root + "-" + delegate
	}
	return delegate
}
