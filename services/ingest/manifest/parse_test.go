package manifest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// got is the comparable shape of an Object (JSON as a string).
type got struct {
	Group, Version, Kind, Namespace, Name, UID string
	JSON                                       string
	Doc, Item, Line                            int
}

type gotErr struct {
	Doc, Item, Line int
	Reason          Reason
	// Contains is a substring the error text must hold.
	Contains string
}

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		want     []got
		wantErrs []gotErr
	}{
		{
			name: "single service gets default namespace",
			in: `apiVersion: v1
kind: Service
metadata:
  name: reviews
spec:
  ports:
  - port: 9080
`,
			want: []got{{
				Version: "v1", Kind: "Service", Namespace: "default", Name: "reviews",
				JSON: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"reviews","namespace":"default"},"spec":{"ports":[{"port":9080}]}}`,
				Item: -1, Line: 1,
			}},
		},
		{
			name: "multi document with leading marker, comments and empty documents",
			in: `---
# a comment only document
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: ns1}
data: {k: "<v>"}
---

---   # comment after marker
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-abc
  namespace: bookinfo
  uid: 0b6c3d5e-0000-4000-8000-000000000001
addressType: IPv4
endpoints: []
...
`,
			want: []got{
				{
					Version: "v1", Kind: "ConfigMap", Namespace: "ns1", Name: "a",
					JSON: `{"apiVersion":"v1","data":{"k":"<v>"},"kind":"ConfigMap","metadata":{"name":"a","namespace":"ns1"}}`,
					Doc:  0, Item: -1, Line: 4,
				},
				{
					Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "bookinfo", Name: "reviews-abc",
					UID:  "0b6c3d5e-0000-4000-8000-000000000001",
					JSON: `{"addressType":"IPv4","apiVersion":"discovery.k8s.io/v1","endpoints":[],"kind":"EndpointSlice","metadata":{"name":"reviews-abc","namespace":"bookinfo","uid":"0b6c3d5e-0000-4000-8000-000000000001"}}`,
					Doc:  1, Item: -1, Line: 10, // the marker line, which carries a comment
				},
			},
		},
		{
			name: "content on the marker line",
			in:   "--- {apiVersion: v1, kind: Namespace, metadata: {name: bookinfo}}\n--- {apiVersion: v1, kind: Namespace, metadata: {name: other}}\n",
			want: []got{
				{Version: "v1", Kind: "Namespace", Name: "bookinfo", JSON: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bookinfo"}}`, Doc: 0, Item: -1, Line: 1},
				{Version: "v1", Kind: "Namespace", Name: "other", JSON: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"other"}}`, Doc: 1, Item: -1, Line: 2},
			},
		},
		{
			name: "List items, with a bad item in the middle",
			in: `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: a}
- apiVersion: v1
  metadata: {name: b}
- apiVersion: networking.istio.io/v1
  kind: VirtualService
  metadata: {name: c}
`,
			want: []got{
				{Version: "v1", Kind: "Service", Namespace: "default", Name: "a", JSON: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"default"}}`, Item: 0, Line: 1},
				{Group: "networking.istio.io", Version: "v1", Kind: "VirtualService", Namespace: "default", Name: "c", JSON: `{"apiVersion":"networking.istio.io/v1","kind":"VirtualService","metadata":{"name":"c","namespace":"default"}}`, Item: 2, Line: 1},
			},
			wantErrs: []gotErr{{Doc: 0, Item: 1, Line: 1, Reason: ReasonMissingKind, Contains: "#0/items/1"}},
		},
		{
			name: "ServiceList from kubectl get and an empty List",
			in: `apiVersion: v1
kind: ServiceList
items:
- {apiVersion: v1, kind: Service, metadata: {name: a, namespace: x}}
---
apiVersion: v1
kind: List
items: []
`,
			want: []got{
				{Version: "v1", Kind: "Service", Namespace: "x", Name: "a", JSON: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"x"}}`, Item: 0, Line: 1},
			},
		},
		{
			name: "missing apiVersion, kind, name; good documents around them still parse",
			in: `kind: Service
metadata: {name: a}
---
apiVersion: v1
metadata: {name: b}
---
apiVersion: v1
kind: Service
metadata: {generateName: c-}
---
apiVersion: v1
kind: Service
spec: {}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: good}
---
apiVersion: a/b/c
kind: Thing
metadata: {name: d}
`,
			want: []got{
				{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "good", JSON: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"good","namespace":"default"}}`, Doc: 4, Item: -1, Line: 15},
			},
			wantErrs: []gotErr{
				{Doc: 0, Item: -1, Line: 1, Reason: ReasonMissingAPIVersion, Contains: "f.yaml#0 (line 1)"},
				{Doc: 1, Item: -1, Line: 4, Reason: ReasonMissingKind, Contains: "f.yaml#1 (line 4)"},
				{Doc: 2, Item: -1, Line: 7, Reason: ReasonMissingName, Contains: "metadata.name"},
				{Doc: 3, Item: -1, Line: 11, Reason: ReasonMissingName, Contains: "metadata is missing"},
				{Doc: 5, Item: -1, Line: 19, Reason: ReasonInvalidAPIVersion, Contains: `"a/b/c"`},
			},
		},
		{
			name: "names and namespaces validated as Kubernetes does",
			in: `apiVersion: v1
kind: ConfigMap
metadata: {name: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ok, namespace: Bad_NS}
---
apiVersion: v1
kind: Service
metadata: {name: a.b}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a.b}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:aggregate-to-view"}
---
apiVersion: v1
kind: Namespace
metadata: {name: "ns.with.dots"}
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: "reviews/route"}
`,
			want: []got{
				{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "a.b", JSON: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a.b","namespace":"default"}}`, Doc: 3, Item: -1, Line: 13},
				{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "system:aggregate-to-view", JSON: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"system:aggregate-to-view"}}`, Doc: 4, Item: -1, Line: 17},
			},
			wantErrs: []gotErr{
				{Doc: 0, Item: -1, Line: 1, Reason: ReasonInvalidName, Contains: "metadata.name"},
				{Doc: 1, Item: -1, Line: 5, Reason: ReasonInvalidName, Contains: `metadata.namespace "Bad_NS"`},
				{Doc: 2, Item: -1, Line: 9, Reason: ReasonInvalidName, Contains: `metadata.name "a.b"`},
				{Doc: 5, Item: -1, Line: 21, Reason: ReasonInvalidName, Contains: `metadata.name "ns.with.dots"`},
				{Doc: 6, Item: -1, Line: 25, Reason: ReasonInvalidName, Contains: `metadata.name "reviews/route"`},
			},
		},
		{
			name: "malformed YAML names file, document and file line",
			in: `apiVersion: v1
kind: ConfigMap
metadata: {name: ok}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: broken
	namespace: tab
---
apiVersion: v1
kind: ConfigMap
metadata: {name: after}
`,
			want: []got{
				{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "ok", JSON: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ok","namespace":"default"}}`, Doc: 0, Item: -1, Line: 1},
				{Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "after", JSON: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"after","namespace":"default"}}`, Doc: 2, Item: -1, Line: 11},
			},
			wantErrs: []gotErr{{Doc: 1, Item: -1, Line: 9, Reason: ReasonMalformed, Contains: "f.yaml#1 (line 9): malformed_yaml"}},
		},
		{
			name:     "duplicate keys are malformed, as kubectl's strict validation says",
			in:       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\nkind: Secret\n",
			wantErrs: []gotErr{{Doc: 0, Item: -1, Line: 4, Reason: ReasonMalformed, Contains: "line 4"}},
		},
		{
			name: "scalar, sequence and null documents",
			in:   "just a string\n---\n- a\n- b\n---\nnull\n---\n~\n",
			wantErrs: []gotErr{
				{Doc: 0, Item: -1, Line: 1, Reason: ReasonNotAnObject, Contains: "string"},
				{Doc: 1, Item: -1, Line: 3, Reason: ReasonNotAnObject, Contains: "sequence"},
			},
		},
		{
			name: "cluster-scoped kinds lose a namespace, custom resources keep theirs",
			in: `apiVersion: v1
kind: Namespace
metadata: {name: bookinfo, namespace: oops}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w2, namespace: team}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: istio}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r}
`,
			want: []got{
				{Version: "v1", Kind: "Namespace", Name: "bookinfo", JSON: `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bookinfo"}}`, Doc: 0, Item: -1, Line: 1},
				{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole", Name: "reader", JSON: `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"reader"}}`, Doc: 1, Item: -1, Line: 5},
				{Group: "example.com", Version: "v1", Kind: "Widget", Name: "w", JSON: `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"}}`, Doc: 2, Item: -1, Line: 9},
				{Group: "example.com", Version: "v1", Kind: "Widget", Namespace: "team", Name: "w2", JSON: `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w2","namespace":"team"}}`, Doc: 3, Item: -1, Line: 13},
				{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "GatewayClass", Name: "istio", JSON: `{"apiVersion":"gateway.networking.k8s.io/v1","kind":"GatewayClass","metadata":{"name":"istio"}}`, Doc: 4, Item: -1, Line: 17},
				{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute", Namespace: "default", Name: "r", JSON: `{"apiVersion":"gateway.networking.k8s.io/v1","kind":"HTTPRoute","metadata":{"name":"r","namespace":"default"}}`, Doc: 5, Item: -1, Line: 21},
			},
		},
		{
			name: "JSON file, big integers and names with dots survive",
			in:   `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a.b.c"},"data":{"n":"1"},"x":12345678901234567890}`,
			want: []got{{
				Version: "v1", Kind: "ConfigMap", Namespace: "default", Name: "a.b.c",
				JSON: `{"apiVersion":"v1","data":{"n":"1"},"kind":"ConfigMap","metadata":{"name":"a.b.c","namespace":"default"},"x":12345678901234567890}`,
				Item: -1, Line: 1,
			}},
		},
		{
			name: "CRLF line endings and a BOM",
			in:   "\xef\xbb\xbfapiVersion: v1\r\nkind: Service\r\nmetadata:\r\n  name: a\r\n---\r\napiVersion: v1\r\nkind: Service\r\nmetadata:\r\n  name: b\r\n",
			want: []got{
				{Version: "v1", Kind: "Service", Namespace: "default", Name: "a", JSON: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","namespace":"default"}}`, Item: -1, Line: 1},
				{Version: "v1", Kind: "Service", Namespace: "default", Name: "b", JSON: `{"apiVersion":"v1","kind":"Service","metadata":{"name":"b","namespace":"default"}}`, Doc: 1, Item: -1, Line: 6},
			},
		},
		{
			name: "empty file",
			in:   "",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, errs := Parse("f.yaml", []byte(tc.in))
			var gotObjs []got
			for _, o := range objs {
				gotObjs = append(gotObjs, got{o.Group, o.Version, o.Kind, o.Namespace, o.Name, o.UID, string(o.JSON), o.Doc, o.Item, o.Line})
			}
			if diff := cmp.Diff(tc.want, gotObjs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			var gotErrs []gotErr
			for i, e := range errs {
				ge := gotErr{Doc: e.Doc, Item: e.Item, Line: e.Line, Reason: e.Reason}
				if i < len(tc.wantErrs) && strings.Contains(e.Error(), tc.wantErrs[i].Contains) {
					ge.Contains = tc.wantErrs[i].Contains
				} else {
					ge.Contains = e.Error()
				}
				if e.File != "f.yaml" {
					t.Errorf("error %d names file %q, want f.yaml", i, e.File)
				}
				gotErrs = append(gotErrs, ge)
			}
			if diff := cmp.Diff(tc.wantErrs, gotErrs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScopeOf(t *testing.T) {
	tests := []struct {
		name, group, kind string
		want              Scope
	}{
		{"core service", "", "Service", Namespaced},
		{"endpointslice", "discovery.k8s.io", "EndpointSlice", Namespaced},
		{"namespace", "", "Namespace", ClusterScoped},
		{"node", "", "Node", ClusterScoped},
		{"clusterrole", "rbac.authorization.k8s.io", "ClusterRole", ClusterScoped},
		{"role", "rbac.authorization.k8s.io", "Role", Namespaced},
		{"istio", "networking.istio.io", "DestinationRule", Namespaced},
		{"crd", "apiextensions.k8s.io", "CustomResourceDefinition", ClusterScoped},
		{"custom", "example.com", "Widget", UnknownScope},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ScopeOf(tc.group, tc.kind); got != tc.want {
				t.Errorf("ScopeOf(%q, %q) = %v, want %v", tc.group, tc.kind, got, tc.want)
			}
		})
	}
}
