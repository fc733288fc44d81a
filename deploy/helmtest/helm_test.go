package helmtest

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The value sets every test renders: the defaults, everything optional
// turned on, and the values pilotwire-nats gives the chart.
func variants(t testing.TB) map[string]map[string]any {
	t.Helper()
	return map[string]map[string]any{
		"default": nil,
		"full": {
			"ca": map[string]any{"enabled": true, "namespace": "istio-system"},
			"ads": map[string]any{
				"autoscaling": map[string]any{"connections": map[string]any{"enabled": true}},
				"meshConfig":  map[string]any{"outboundTrafficPolicy": map[string]any{"mode": "REGISTRY_ONLY"}},
				"tls":         map[string]any{"secretName": "xds-tls", "clientCASecret": "xds-client-ca", "trustDomain": "cluster.local"},
				// Frontends without API access: the RBAC test checks
				// they then get none.
				"gatewayCredentials": map[string]any{"enabled": false},
			},
			"ingest": map[string]any{"clusterSecrets": map[string]any{"namespace": "istio-system"}},
			"natsClient": map[string]any{
				"url": "tls://nats-0.nats:4222,tls://nats-1.nats:4222",
				"auth": map[string]any{"mode": "creds",
					"ingest":    map[string]any{"secretName": "nats-ingest"},
					"debouncer": map[string]any{"secretName": "nats-debouncer"},
					"pusher":    map[string]any{"secretName": "nats-pusher"},
					"ads":       map[string]any{"secretName": "nats-ads"},
					"admin":     map[string]any{"secretName": "nats-admin"},
				},
				"tls": map[string]any{"caSecret": map[string]any{"name": "nats-ca"}, "clientCertSecret": "nats-client"},
			},
		},
		"nats-bundle": bundleValues(t),
	}
}

// bundleValues are the pilotwire values of deploy/helm/pilotwire-nats.
func bundleValues(t testing.TB) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), bundleDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	p, ok := v["pilotwire"].(map[string]any)
	if !ok {
		t.Fatalf("%s/values.yaml has no pilotwire block", bundleDir)
	}
	return p
}

func TestLint(t *testing.T) {
	helm(t, "lint", "--strict", chartDir)
	for name, values := range variants(t) {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "values.yaml")
			b, _ := yaml.Marshal(values)
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			helm(t, "lint", "--strict", chartDir, "--values", f)
		})
	}
	// The bundle lints without its dependencies downloaded (a warning
	// names them); templating it needs `helm dependency update`.
	helm(t, "lint", bundleDir)
}

// TestPodsHardened holds every pod the chart renders, in every variant, to
// the security and health settings the issue asks for.
func TestPodsHardened(t *testing.T) {
	for name, values := range variants(t) {
		t.Run(name, func(t *testing.T) {
			objs := render(t, "pw", "pilotwire", values)
			pods := 0
			for _, o := range objs {
				spec, ok := podSpec(o)
				if !ok {
					continue
				}
				pods++
				id := o.GetKind() + " " + o.GetName()
				if v, _, _ := unstructured.NestedBool(spec, "securityContext", "runAsNonRoot"); !v {
					t.Errorf("%s: pod runAsNonRoot not set", id)
				}
				if v, _, _ := unstructured.NestedString(spec, "securityContext", "seccompProfile", "type"); v != "RuntimeDefault" {
					t.Errorf("%s: seccompProfile %q", id, v)
				}
				if v, _, _ := unstructured.NestedFieldNoCopy(spec, "securityContext", "runAsUser"); num(v) <= 0 {
					t.Errorf("%s: runAsUser %v", id, v)
				}
				containers, _, _ := unstructured.NestedSlice(spec, "containers")
				for _, c := range containers {
					c := c.(map[string]any)
					cid := id + "/" + c["name"].(string)
					if v, _, _ := unstructured.NestedBool(c, "securityContext", "readOnlyRootFilesystem"); !v {
						t.Errorf("%s: root filesystem writable", cid)
					}
					if v, _, _ := unstructured.NestedBool(c, "securityContext", "allowPrivilegeEscalation"); v {
						t.Errorf("%s: privilege escalation allowed", cid)
					}
					if v, _, _ := unstructured.NestedStringSlice(c, "securityContext", "capabilities", "drop"); !slices.Equal(v, []string{"ALL"}) {
						t.Errorf("%s: capabilities drop %v", cid, v)
					}
					if _, ok, _ := unstructured.NestedMap(c, "resources", "requests"); !ok {
						t.Errorf("%s: no resource requests", cid)
					}
					if o.GetKind() != "Deployment" {
						continue
					}
					for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
						if v, _, _ := unstructured.NestedString(c, probe, "httpGet", "path"); v != path {
							t.Errorf("%s: %s path %q, want %s", cid, probe, v, path)
						}
						if v, _, _ := unstructured.NestedString(c, probe, "httpGet", "port"); v != "http" {
							t.Errorf("%s: %s port %q, want the http port", cid, probe, v)
						}
					}
				}
			}
			if pods < 5 {
				t.Errorf("%d pod templates rendered, want the 4 services and the streams Job at least", pods)
			}
		})
	}
}

// TestRenderedShape checks what each variant must and must not render.
func TestRenderedShape(t *testing.T) {
	def := render(t, "pw", "pilotwire", nil)
	for _, o := range def {
		if strings.Contains(o.GetName(), "-ca") {
			t.Errorf("CA object %s %s rendered with ca.enabled=false", o.GetKind(), o.GetName())
		}
	}
	svc := find(t, def, "Service", "pw-pilotwire-ads")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if p := ports[0].(map[string]any); num(p["port"]) != 15010 {
		t.Errorf("ADS Service port %v, want 15010", p["port"])
	}
	hpa := find(t, def, "HorizontalPodAutoscaler", "pw-pilotwire-ads")
	if m, _, _ := unstructured.NestedSlice(hpa.Object, "spec", "metrics"); len(m) != 1 {
		t.Errorf("default HPA has %d metrics, want CPU only", len(m))
	}
	if _, ok, _ := unstructured.NestedFieldNoCopy(find(t, def, "Deployment", "pw-pilotwire-ads").Object, "spec", "replicas"); ok {
		t.Error("the ads Deployment sets replicas while its HPA owns them")
	}
	job := find(t, def, "Job", "pw-pilotwire-streams")
	if h := job.GetAnnotations()["helm.sh/hook"]; h != "pre-install,pre-upgrade" {
		t.Errorf("streams Job hook %q", h)
	}
	if args := containerArgs(t, job); !slices.Equal(args, []string{"streams", "apply", "--replicas=3", "--timeout=60s"}) {
		t.Errorf("streams Job args %v", args)
	}

	full := render(t, "pw", "pilotwire", variants(t)["full"])
	caSvc := find(t, full, "Service", "pw-pilotwire-ca")
	ports, _, _ = unstructured.NestedSlice(caSvc.Object, "spec", "ports")
	if p := ports[0].(map[string]any); num(p["port"]) != 15012 {
		t.Errorf("CA Service port %v, want 15012", p["port"])
	}
	hpa = find(t, full, "HorizontalPodAutoscaler", "pw-pilotwire-ads")
	m, _, _ := unstructured.NestedSlice(hpa.Object, "spec", "metrics")
	if len(m) != 2 {
		t.Fatalf("HPA with connections has %d metrics, want 2", len(m))
	}
	if name, _, _ := unstructured.NestedString(m[1].(map[string]any), "pods", "metric", "name"); name != "pilot_xds" {
		t.Errorf("connection metric %q", name)
	}
	ingest := find(t, full, "Deployment", "pw-pilotwire-ingest")
	env := containerEnv(t, ingest)
	for k, v := range map[string]string{
		"PILOTWIRE_NATS_URL":          "tls://nats-0.nats:4222,tls://nats-1.nats:4222",
		"PILOTWIRE_NATS_CREDS":        "/etc/pilotwire/nats/auth/nats.creds",
		"PILOTWIRE_NATS_INBOX_PREFIX": "_INBOX.ingest",
		"PILOTWIRE_NATS_CA":           "/etc/pilotwire/nats/ca/ca.crt",
		"PILOTWIRE_NATS_CERT":         "/etc/pilotwire/nats/client/tls.crt",
		"PILOTWIRE_HTTP_ADDR":         ":9091",
		"PILOTWIRE_REPLICAS":          "3",
	} {
		if env[k] != v {
			t.Errorf("ingest env %s=%q, want %q", k, env[k], v)
		}
	}
	if args := containerArgs(t, ingest); !slices.Contains(args, "--cluster-secrets-namespace=istio-system") || !slices.Contains(args, "--in-cluster") {
		t.Errorf("ingest args %v", args)
	}
	find(t, full, "Role", "pw-pilotwire-ingest-cluster-secrets")
	if ns := find(t, full, "Role", "pw-pilotwire-ingest-cluster-secrets").GetNamespace(); ns != "istio-system" {
		t.Errorf("cluster-secrets Role in %q", ns)
	}

	// Without status writes, no status RBAC and the writer is off; without
	// the Gateway API, none of its kinds.
	for _, tc := range []struct {
		gw     map[string]any
		arg    string
		denied string
	}{
		{gw: map[string]any{"writeStatus": false}, arg: "--gateway-status-debounce=-1s", denied: "/status"},
		{gw: map[string]any{"enabled": false}, arg: "--enable-gateway-api=false", denied: "gateway.networking.k8s.io"},
	} {
		objs := render(t, "pw", "pilotwire", map[string]any{"ingest": map[string]any{"gatewayAPI": tc.gw}})
		if args := containerArgs(t, find(t, objs, "Deployment", "pw-pilotwire-ingest")); !slices.Contains(args, tc.arg) {
			t.Errorf("gatewayAPI %v: ingest args %v, want %s", tc.gw, args, tc.arg)
		}
		b, _ := yaml.Marshal(find(t, objs, "ClusterRole", "pw-pilotwire-ingest-pilotwire").Object["rules"])
		if strings.Contains(string(b), tc.denied) {
			t.Errorf("gatewayAPI %v: ingest's ClusterRole still names %s:\n%s", tc.gw, tc.denied, b)
		}
	}

	// pilotwire-nats: the URL names the bundled NATS's Service, whatever
	// the release is called, and the streams Job waits for it.
	for release, url := range map[string]string{"mesh": "nats://mesh-nats.pilotwire.svc:4222", "nats-a": "nats://nats-a.pilotwire.svc:4222"} {
		b := render(t, release, "pilotwire", bundleValues(t))
		j := find(t, b, "Job", release+"-pilotwire-streams")
		if got := containerEnv(t, j)["PILOTWIRE_NATS_URL"]; got != url {
			t.Errorf("release %s: NATS URL %q, want %q", release, got, url)
		}
		if h := j.GetAnnotations()["helm.sh/hook"]; h != "post-install,pre-upgrade" {
			t.Errorf("release %s: streams Job hook %q", release, h)
		}
	}

	// Auth without its Secret is refused at template time.
	if _, err := helmErr(t, "template", "pw", chartDir, "--set", "natsClient.auth.mode=creds"); err == nil ||
		!regexp.MustCompile(`natsClient\.auth\.[a-z]+\.secretName is required`).MatchString(err.Error()) {
		t.Errorf("creds without a Secret: %v", err)
	}
	if _, err := helmErr(t, "template", "pw", chartDir, "--set", "natsClient.auth.mode=token"); err == nil ||
		!strings.Contains(err.Error(), "want none, creds, nkey or password") {
		t.Errorf("unknown auth mode: %v", err)
	}
}

// podSpec returns the pod spec of a workload object.
func podSpec(o *unstructured.Unstructured) (map[string]any, bool) {
	switch o.GetKind() {
	case "Deployment", "Job", "StatefulSet", "DaemonSet":
		spec, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		return spec, ok
	}
	return nil, false
}

func firstContainer(t testing.TB, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	spec, ok := podSpec(o)
	if !ok {
		t.Fatalf("%s %s has no pod spec", o.GetKind(), o.GetName())
	}
	cs, _, _ := unstructured.NestedSlice(spec, "containers")
	return cs[0].(map[string]any)
}

func containerArgs(t testing.TB, o *unstructured.Unstructured) []string {
	t.Helper()
	args, _, _ := unstructured.NestedStringSlice(firstContainer(t, o), "args")
	return args
}

func containerEnv(t testing.TB, o *unstructured.Unstructured) map[string]string {
	t.Helper()
	env, _, _ := unstructured.NestedSlice(firstContainer(t, o), "env")
	out := map[string]string{}
	for _, e := range env {
		e := e.(map[string]any)
		if v, ok := e["value"].(string); ok {
			out[e["name"].(string)] = v
		}
	}
	return out
}

// num is a YAML number (decoded as float64 into maps), or -1.
func num(v any) int64 {
	switch n := v.(type) {
	case float64:
		return int64(n)
	case int64:
		return n
	case int:
		return int64(n)
	}
	return -1
}
