package helmtest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
)

// cluster is a test kube-apiserver with the clients the tests use.
type cluster struct {
	kubeconfig string
	cfg        *rest.Config
	cs         kubernetes.Interface
	dyn        dynamic.Interface
	mapper     meta.RESTMapper
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := k8stest.Start(t)
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = -1, 0     // the RBAC matrix sends a few thousand reviews
	cfg.Timeout = 30 * time.Second // bounds the calls that take no context (OpenAPI discovery)
	cs := kubernetes.NewForConfigOrDie(cfg)
	return &cluster{
		kubeconfig: c.Kubeconfig,
		cfg:        cfg,
		cs:         cs,
		dyn:        dynamic.NewForConfigOrDie(cfg),
		mapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery())),
	}
}

func (c *cluster) createNamespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	_, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// resource is where obj lives on the API server.
func (c *cluster) resource(t *testing.T, obj *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s %s: the API server does not serve it: %v", gvk, obj.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			t.Fatalf("%s %s: namespaced, rendered without a namespace", gvk.Kind, obj.GetName())
		}
		return c.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	if obj.GetNamespace() != "" {
		t.Errorf("%s %s: cluster-scoped, rendered with namespace %q", gvk.Kind, obj.GetName(), obj.GetNamespace())
	}
	return c.dyn.Resource(m.Resource)
}

// apply server-side applies each manifest as helm rendered it, with strict
// field validation (an unknown or duplicate field fails, as does anything
// the object's OpenAPI schema or the API's validation refuses).
func (c *cluster) apply(ctx context.Context, t *testing.T, docs []doc, dryRun bool) {
	t.Helper()
	opts := metav1.PatchOptions{FieldManager: "helmtest", FieldValidation: "Strict", Force: new(true)}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, d := range docs {
		_, err := c.resource(t, d.obj).Patch(ctx, d.obj.GetName(), types.ApplyPatchType, d.raw, opts)
		if err != nil {
			t.Errorf("apply (dry run %v) %s %s/%s: %v", dryRun, d.obj.GetKind(), d.obj.GetNamespace(), d.obj.GetName(), err)
		}
	}
}

// TestApply applies every variant's manifests to a real kube-apiserver:
// first a server-side dry run (which must store nothing), then for real,
// and reads each object back. Then it validates them on the client side
// against the server's OpenAPI schemas (schema_test.go) and checks the
// RBAC they granted with SubjectAccessReviews (rbac_test.go).
func TestApply(t *testing.T) {
	helmBin(t) // fail or skip before starting a cluster
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	c.createNamespace(ctx, t, "istio-system") // the full variant's cluster-secrets namespace

	names := []string{"default", "full", "nats-bundle"}
	all := variants(t)
	if len(all) != len(names) {
		t.Fatalf("variants %d, test applies %v", len(all), names)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ns := "pw-" + name
			c.createNamespace(ctx, t, ns)
			docs := renderDocs(t, "pw", ns, all[name])
			c.apply(ctx, t, docs, true)
			for _, d := range docs {
				_, err := c.resource(t, d.obj).Get(ctx, d.obj.GetName(), metav1.GetOptions{})
				if !apierrors.IsNotFound(err) {
					t.Errorf("%s %s after a dry run: %v, want NotFound", d.obj.GetKind(), d.obj.GetName(), err)
				}
			}
			c.apply(ctx, t, docs, false)
			kinds := map[string]int{}
			for _, d := range docs {
				got, err := c.resource(t, d.obj).Get(ctx, d.obj.GetName(), metav1.GetOptions{})
				if err != nil {
					t.Errorf("%s %s after apply: %v", d.obj.GetKind(), d.obj.GetName(), err)
					continue
				}
				if !slices.ContainsFunc(got.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool { return f.Manager == "helmtest" }) {
					t.Errorf("%s %s: not managed by the apply", got.GetKind(), got.GetName())
				}
				kinds[d.obj.GetKind()]++
			}
			t.Logf("applied %d objects: %v", len(docs), kinds)
		})
	}
	if t.Failed() {
		return
	}

	t.Run("helm-install", func(t *testing.T) { testHelmLifecycle(ctx, t, c) })
	t.Run("openapi", func(t *testing.T) { testSchema(t, c) })
	t.Run("rbac", func(t *testing.T) {
		testRBAC(ctx, t, c, "pw-default", "pw-default", true, "ingest", "debouncer", "pusher", "ads")
	})
	t.Run("rbac-full", func(t *testing.T) { testRBAC(ctx, t, c, "pw-full", "istio-system", false, "ingest", "ads") })
	t.Run("rbac-ca", func(t *testing.T) { testCARBAC(ctx, t, c, "pw-full", "istio-system") })
}

// saUser is the user name of a ServiceAccount, as SubjectAccessReviews and
// the authenticator spell it.
func saUser(ns, name string) (string, []string) {
	return fmt.Sprintf("system:serviceaccount:%s:%s", ns, name),
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// testHelmLifecycle installs, upgrades and uninstalls the chart with helm
// itself against the API server (hooks off: the streams Job would wait for
// a Job controller this cluster does not run), so helm's own checks run
// too (kubeVersion against the real server, ownership of what it applies).
func testHelmLifecycle(ctx context.Context, t *testing.T, c *cluster) {
	const ns, rel = "pw-helm", "pwh"
	kc := "--kubeconfig=" + c.kubeconfig
	helm(t, "install", rel, chartDir, "-n", ns, "--create-namespace", kc, "--no-hooks", "--timeout=60s")
	deps := func() []string {
		l, err := c.cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range l.Items {
			out = append(out, d.Name)
		}
		slices.Sort(out)
		return out
	}
	if got, want := deps(), []string{"pwh-pilotwire-ads", "pwh-pilotwire-debouncer", "pwh-pilotwire-ingest", "pwh-pilotwire-pusher"}; !slices.Equal(got, want) {
		t.Errorf("after install: Deployments %v, want %v", got, want)
	}
	helm(t, "upgrade", rel, chartDir, "-n", ns, kc, "--no-hooks", "--timeout=60s", "--set", "ca.enabled=true")
	if got := deps(); !slices.Contains(got, "pwh-pilotwire-ca") {
		t.Errorf("after the upgrade with the CA: Deployments %v", got)
	}
	helm(t, "uninstall", rel, "-n", ns, kc, "--timeout=60s")
	if got := deps(); len(got) != 0 {
		t.Errorf("after uninstall: Deployments %v", got)
	}
	if _, err := c.cs.RbacV1().ClusterRoles().Get(ctx, "pwh-pilotwire-ingest-"+ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ingest's ClusterRole after uninstall: %v", err)
	}
}
