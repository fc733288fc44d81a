package kubesource

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
)

func TestTransformStripsManagedFieldsAndSetsKind(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name: "a", Namespace: "ns", ResourceVersion: "7",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Annotations:   map[string]string{lastAppliedAnnotation: "{}", "keep": "me"},
	}}
	got, err := transformFor(gvkService)(svc)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "7", Annotations: map[string]string{"keep": "me"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transformed service (-want +got):\n%s", diff)
	}

	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
		"metadata": map[string]any{
			"name": "vs", "managedFields": []any{map[string]any{"manager": "x"}},
			"annotations": map[string]any{lastAppliedAnnotation: "{}"},
		},
		"spec": map[string]any{"hosts": []any{"a"}},
	}}
	gotU, _ := transformFor(gvkService)(u)
	wantU := map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "VirtualService",
		"metadata": map[string]any{"name": "vs"},
		"spec":     map[string]any{"hosts": []any{"a"}},
	}
	if diff := cmp.Diff(wantU, gotU.(*unstructured.Unstructured).Object); diff != "" {
		t.Errorf("transformed custom resource (-want +got):\n%s", diff)
	}
}

func TestMeshAnnotations(t *testing.T) {
	in := map[string]string{
		"sidecar.istio.io/inject":   "true",
		"proxy.istio.io/config":     "{}",
		"istio.io/rev":              "canary",
		"prometheus.io/scrape":      "true",
		"notistio.io/x":             "y",
		"example.com/istio.io":      "z",
		"kubernetes.io/psp":         "p",
		"traffic.sidecar.istio.io/": "",
	}
	want := map[string]string{
		"sidecar.istio.io/inject":   "true",
		"proxy.istio.io/config":     "{}",
		"istio.io/rev":              "canary",
		"traffic.sidecar.istio.io/": "",
	}
	if diff := cmp.Diff(want, meshAnnotations(in)); diff != "" {
		t.Errorf("mesh annotations (-want +got):\n%s", diff)
	}
}

func TestPreferredVersion(t *testing.T) {
	tests := []struct {
		name     string
		versions []apiextensionsv1.CustomResourceDefinitionVersion
		want     string
	}{
		{name: "GA over beta over alpha", want: "v1", versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1alpha3", Served: true}, {Name: "v1", Served: true}, {Name: "v1beta1", Served: true}}},
		{name: "unserved versions are skipped", want: "v1beta1", versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1", Served: false}, {Name: "v1beta1", Served: true}, {Name: "v1alpha2", Served: true}}},
		{name: "higher number", want: "v2", versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1", Served: true}, {Name: "v2", Served: true}}},
		{name: "nothing served", want: "", versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1", Served: false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: tt.versions}}
			if got := preferredVersion(crd); got != tt.want {
				t.Errorf("preferredVersion = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestUnchanged(t *testing.T) {
	pod := func(rv, ip string) runtime.Object {
		p, _ := transformFor(gvkPod)(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "u1", ResourceVersion: rv},
			Status:     corev1.PodStatus{PodIP: ip, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: int32(len(rv))}}},
		})
		return p.(runtime.Object)
	}
	tests := []struct {
		name     string
		old, new runtime.Object
		want     bool
	}{
		{name: "resync: same resourceVersion", old: pod("1", "10.0.0.1"), new: pod("1", "10.0.0.1"), want: true},
		{name: "only dropped fields changed", old: pod("1", "10.0.0.1"), new: pod("22", "10.0.0.1"), want: true},
		{name: "a kept field changed", old: pod("1", "10.0.0.1"), new: pod("2", "10.0.0.2"), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unchanged(tt.old, tt.new); got != tt.want {
				t.Errorf("unchanged = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSecretKubeconfigRules(t *testing.T) {
	const base = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443", %CLUSTER%}}]
users: [{name: u, user: {%USER%}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	tests := []struct {
		name, cluster, user string
		wantErr             string
	}{
		{name: "embedded token", cluster: "insecure-skip-tls-verify: true", user: "token: abc"},
		{name: "exec plugin", cluster: "insecure-skip-tls-verify: true", user: "exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}", wantErr: "exec plugins"},
		{name: "auth provider", cluster: "insecure-skip-tls-verify: true", user: "auth-provider: {name: gcp}", wantErr: "auth-provider"},
		{name: "token file", cluster: "insecure-skip-tls-verify: true", user: "tokenFile: /var/run/secrets/token", wantErr: "file references"},
		{name: "CA file", cluster: "certificate-authority: /etc/ca.crt", user: "token: abc", wantErr: "certificate-authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kc := strings.NewReplacer("%CLUSTER%", tt.cluster, "%USER%", tt.user).Replace(base)
			if _, err := clientcmd.Load([]byte(kc)); err != nil {
				t.Fatalf("test kubeconfig does not parse: %v", err)
			}
			cfg, err := configFromSecret([]byte(kc))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("configFromSecret: %v", err)
			case tt.wantErr == "" && cfg.Host != "https://10.0.0.1:6443":
				t.Errorf("host = %q", cfg.Host)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("configFromSecret error = %v, want one about %q", err, tt.wantErr)
			}
		})
	}
}
