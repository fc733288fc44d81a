package helmtest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
)

// access is one request a ServiceAccount might make: a verb on a
// resource (or its subresource) in a namespace ("" for cluster-wide, or
// for all namespaces).
type access struct {
	ns, group, resource, sub, verb string
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.sub != "" {
		r += "/" + a.sub
	}
	ns := a.ns
	if ns == "" {
		ns = "*"
	}
	return fmt.Sprintf("%s %s in %s", a.verb, r, ns)
}

var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// resourceOf is the resource of a kind: from the API server when it serves
// the kind, else its English plural, lower case, which is what every Istio
// and Gateway API CRD declares (serviceentries, gateways, gatewayclasses,
// authorizationpolicies, ...). meta.UnsafeGuessKindToResource would say
// "gatewaies".
func resourceOf(t *testing.T, c *cluster, gk schema.GroupKind) string {
	t.Helper()
	if m, err := c.mapper.RESTMapping(gk); err == nil {
		return m.Resource.Resource
	}
	return plural(gk.Kind)
}

func plural(kind string) string {
	k := strings.ToLower(kind)
	switch {
	case strings.HasSuffix(k, "s"), strings.HasSuffix(k, "x"), strings.HasSuffix(k, "ch"), strings.HasSuffix(k, "sh"):
		return k + "es"
	case strings.HasSuffix(k, "y") && len(k) > 1 && !strings.ContainsRune("aeiou", rune(k[len(k)-2])):
		return k[:len(k)-1] + "ies"
	}
	return k + "s"
}

// ingestWants is what ingest's ServiceAccount must be allowed, derived
// from the code: list and watch of every kind kubesource watches, of
// CustomResourceDefinitions (its CRD discovery, discovery.go), of Secrets
// in the cluster-secrets namespace (secrets.go), and update of the status
// of the kinds its Gateway API status writer writes.
func ingestWants(t *testing.T, c *cluster, secretsNS string) []access {
	t.Helper()
	var kinds []schema.GroupKind
	for _, gvk := range kubesource.CoreKinds {
		kinds = append(kinds, gvk.GroupKind())
	}
	kinds = append(kinds, kubesource.IstioKinds...)
	kinds = append(kinds, kubesource.GatewayAPIKinds...)
	kinds = append(kinds, schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"})
	var out []access
	for _, gk := range kinds {
		for _, v := range []string{"list", "watch"} {
			out = append(out, access{group: gk.Group, resource: resourceOf(t, c, gk), verb: v})
		}
	}
	for _, gk := range kubesource.StatusWriteKinds {
		out = append(out, access{group: gk.Group, resource: resourceOf(t, c, gk), sub: "status", verb: "update"})
	}
	for _, v := range []string{"list", "watch"} {
		out = append(out, access{ns: secretsNS, resource: "secrets", verb: v})
	}
	return out
}

// adsWants is what a frontend's ServiceAccount must be allowed while it
// serves gateway credentials over SDS (services/ads secrets.go): list and
// watch of Secrets in every namespace, and SubjectAccessReviews to check
// that a gateway may read the Secret it names.
func adsWants() []access {
	return []access{
		{resource: "secrets", verb: "list"},
		{resource: "secrets", verb: "watch"},
		{group: "authorization.k8s.io", resource: "subjectaccessreviews", verb: "create"},
	}
}

// universe is every (group, resource, subresource) the API server serves,
// with whether it is namespaced, plus the CRD-backed kinds ingest watches
// (not installed on the test server) and their status.
type resourceInfo struct {
	group, resource, sub string
	namespaced           bool
}

func universe(t *testing.T, c *cluster) []resourceInfo {
	t.Helper()
	lists, err := c.cs.Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	seen := map[string]bool{}
	var out []resourceInfo
	add := func(r resourceInfo) {
		k := r.group + "/" + r.resource + "/" + r.sub
		if !seen[k] {
			seen[k] = true
			out = append(out, r)
		}
	}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			res, sub, _ := strings.Cut(r.Name, "/")
			add(resourceInfo{group: gv.Group, resource: res, sub: sub, namespaced: r.Namespaced})
		}
	}
	for _, gk := range append(slices.Clone(kubesource.IstioKinds), kubesource.GatewayAPIKinds...) {
		res := resourceOf(t, c, gk)
		add(resourceInfo{group: gk.Group, resource: res, namespaced: true})
		add(resourceInfo{group: gk.Group, resource: res, sub: "status", namespaced: true})
	}
	return out
}

// reviewer runs SubjectAccessReviews for one user, concurrently.
type reviewer struct {
	c      *cluster
	user   string
	groups []string
}

func (r reviewer) allowed(ctx context.Context, a access) (bool, error) {
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: r.user, Groups: r.groups,
		ResourceAttributes: &authzv1.ResourceAttributes{
			Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub,
		},
	}}
	got, err := r.c.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("review %s: %w", a, err)
	}
	return got.Status.Allowed, nil
}

// allowedOf reviews every access and returns those allowed.
func (r reviewer) allowedOf(ctx context.Context, t *testing.T, all []access) map[access]bool {
	t.Helper()
	var (
		mu   sync.Mutex
		out  = map[access]bool{}
		errs []error
		wg   sync.WaitGroup
		work = make(chan access)
	)
	for range 8 {
		wg.Go(func() {
			for a := range work {
				ok, err := r.allowed(ctx, a)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if ok {
					out[a] = true
				}
				mu.Unlock()
			}
		})
	}
	for _, a := range all {
		work <- a
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d reviews failed, first: %v", len(errs), errs[0])
	}
	return out
}

// matrix is every verb on every resource in each of namespaces (namespaced
// resources) or cluster-wide.
func matrix(res []resourceInfo, namespaces []string) []access {
	var out []access
	for _, r := range res {
		nss := []string{""}
		if r.namespaced {
			nss = namespaces
		}
		for _, ns := range nss {
			for _, v := range verbs {
				out = append(out, access{ns: ns, group: r.group, resource: r.resource, sub: r.sub, verb: v})
			}
		}
	}
	return out
}

// testRBAC checks the chart's ServiceAccounts sas in release namespace ns:
// ingest may do exactly what ingestWants says (a grant for all namespaces
// shows in each namespace too) and nothing else; the frontends exactly
// what adsWants says when the release serves gateway credentials
// (gatewayCredentials), else nothing; the debouncer and the pusher nothing
// at all. "Nothing" is beyond what every authenticated user may do (a
// ServiceAccount with no binding is the baseline).
func testRBAC(ctx context.Context, t *testing.T, c *cluster, ns, secretsNS string, gatewayCredentials bool, sas ...string) {
	namespaces := []string{"", ns, secretsNS, "elsewhere"}
	slices.Sort(namespaces)
	namespaces = slices.Compact(namespaces)
	all := matrix(universe(t, c), namespaces)

	baseUser, baseGroups := saUser(ns, "no-bindings")
	baseline := reviewer{c: c, user: baseUser, groups: baseGroups}.allowedOf(ctx, t, all)

	// What each service's code needs; the others need nothing.
	wantsOf := map[string][]access{"ingest": ingestWants(t, c, secretsNS)}
	if gatewayCredentials {
		wantsOf["ads"] = adsWants()
	}
	expand := func(wants []access) map[access]bool {
		want := map[access]bool{}
		for _, w := range wants {
			if w.ns != "" {
				want[w] = true
				continue
			}
			// A cluster-wide grant also allows the request in each namespace.
			for _, n := range namespaces {
				w.ns = n
				want[w] = true
			}
		}
		return want
	}

	for _, sa := range sas {
		t.Run(sa, func(t *testing.T) {
			wants := wantsOf[sa]
			want := expand(wants)
			user, groups := saUser(ns, "pw-pilotwire-"+sa)
			rv := reviewer{c: c, user: user, groups: groups}
			got := rv.allowedOf(ctx, t, all)
			var extra, missing []string
			for a := range got {
				if !baseline[a] && !want[a] {
					extra = append(extra, a.String())
				}
			}
			// wants may name accesses outside the matrix (CRD kinds'
			// cluster-wide list); review those directly.
			for _, w := range wants {
				ok, err := rv.allowed(ctx, w)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					missing = append(missing, w.String())
				}
			}
			sort.Strings(extra)
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("%s may not (but its code needs to):\n  %s", sa, strings.Join(missing, "\n  "))
			}
			if len(extra) > 0 {
				t.Errorf("%s may (beyond what its code needs):\n  %s", sa, strings.Join(extra, "\n  "))
			}
			t.Logf("%s: %d of %d reviews allowed (%d by the baseline)", sa, len(got), len(all), len(baseline))
		})
	}
}

// testCARBAC checks the CA's ServiceAccount (full variant, release
// namespace ns, its Secrets in secretsNS): what docs/security.md says it
// needs (TokenReviews; get and create of Secrets in secretsNS; the
// istio-ca-root-cert ConfigMap in every namespace; Namespaces) and not
// other ConfigMaps, or Secrets elsewhere.
func testCARBAC(ctx context.Context, t *testing.T, c *cluster, ns, secretsNS string) {
	user, groups := saUser(ns, "pw-pilotwire-ca")
	rv := reviewer{c: c, user: user, groups: groups}
	for _, tc := range []struct {
		a    access
		name string // resource name, for the ConfigMap checks
		want bool
	}{
		{a: access{group: "authentication.k8s.io", resource: "tokenreviews", verb: "create"}, want: true},
		{a: access{resource: "namespaces", verb: "watch"}, want: true},
		{a: access{ns: secretsNS, resource: "secrets", verb: "get"}, want: true},
		{a: access{ns: secretsNS, resource: "secrets", verb: "create"}, want: true},
		{a: access{ns: secretsNS, resource: "secrets", verb: "list"}, want: false},
		{a: access{ns: secretsNS, resource: "secrets", verb: "delete"}, want: false},
		{a: access{ns: ns, resource: "secrets", verb: "get"}, want: false},
		{a: access{ns: "elsewhere", resource: "configmaps", verb: "watch"}, name: "istio-ca-root-cert", want: true},
		{a: access{ns: "elsewhere", resource: "configmaps", verb: "list"}, want: false},
		{a: access{ns: "elsewhere", resource: "configmaps", verb: "create"}, want: true},
		{a: access{resource: "configmaps", verb: "list"}, name: "istio-ca-root-cert", want: true},
		{a: access{ns: "elsewhere", resource: "configmaps", verb: "update"}, name: "istio-ca-root-cert", want: true},
		{a: access{ns: "elsewhere", resource: "configmaps", verb: "update"}, name: "kube-root-ca.crt", want: false},
		{a: access{ns: "elsewhere", resource: "configmaps", verb: "delete"}, name: "istio-ca-root-cert", want: false},
		{a: access{ns: "elsewhere", resource: "secrets", verb: "get"}, want: false},
		{a: access{resource: "secrets", verb: "list"}, want: false},
		{a: access{ns: ns, resource: "pods", verb: "list"}, want: false},
	} {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: rv.user, Groups: rv.groups,
			ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: tc.a.ns, Verb: tc.a.verb, Group: tc.a.group, Resource: tc.a.resource, Name: tc.name,
			},
		}}
		got, err := c.cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.want {
			t.Errorf("CA: %s %s: allowed %v, want %v", tc.a, tc.name, got.Status.Allowed, tc.want)
		}
	}
}

func TestPlural(t *testing.T) {
	for kind, want := range map[string]string{
		"Gateway": "gateways", "GatewayClass": "gatewayclasses", "ServiceEntry": "serviceentries",
		"AuthorizationPolicy": "authorizationpolicies", "Telemetry": "telemetries", "HTTPRoute": "httproutes",
		"BackendTLSPolicy": "backendtlspolicies", "WasmPlugin": "wasmplugins", "ProxyConfig": "proxyconfigs",
	} {
		if got := plural(kind); got != want {
			t.Errorf("plural(%s) = %s, want %s", kind, got, want)
		}
	}
}
