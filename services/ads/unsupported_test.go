package ads

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// authzPlugin is a Wasm plugin in the AUTHZ phase: untranslated, and
// leaving it out fails open (an error).
func authzPlugin(name string) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "shop"},
		"spec":     map[string]any{"phase": "AUTHZ", "url": "oci://example.com/authz:1"},
	}
}

func sidecarWithIngress(name string) map[string]any {
	return map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "shop"},
		"spec": map[string]any{"ingress": []any{map[string]any{
			"port": map[string]any{"number": 9080, "protocol": "HTTP"}, "defaultEndpoint": "127.0.0.1:8080"}}},
	}
}

// lines returns the log lines holding every one of substrs.
func (l *lockedBuffer) lines(substrs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if line != "" && !slices.ContainsFunc(substrs, func(s string) bool { return !strings.Contains(line, s) }) {
			out = append(out, line)
		}
	}
	return out
}

// TestUnsupportedConfigReported: config of a kind pilotwire does not
// translate, arriving after the start, is logged once naming the object
// (at error level when leaving it out fails open), counted, and held in
// the gauge of ignored config by kind and severity until it is deleted.
func TestUnsupportedConfigReported(t *testing.T) {
	e := newFollowEnv(t, false)
	reg := prometheus.NewRegistry()
	e.f.metrics = newMetrics(reg)
	e.publishObject(t, pb.Op_OP_ADD, serviceRef("web"), service("shop", "web", 80))
	e.start(t)

	authzRef := &pb.ObjectRef{Group: "extensions.istio.io", Version: "v1alpha1", Kind: "WasmPlugin", Namespace: "shop", Name: "authz"}
	e.publishObject(t, pb.Op_OP_ADD, authzRef, authzPlugin("authz"))
	const denyObj = "object=c1/WasmPlugin/shop/authz"
	testutil.Eventually(t, "the AUTHZ plugin logged at error level and in the gauge", func() bool {
		return len(e.log.lines("level=ERROR", "config ignored", denyObj, "severity=error")) == 1 &&
			testutil.Metric(reg, `pilotwire_ads_config_ignored{kind="WasmPlugin",severity="error"}`) == 1
	})

	telRef := &pb.ObjectRef{Group: "telemetry.istio.io", Version: "v1", Kind: "Telemetry", Namespace: "shop", Name: "logs"}
	e.publishObject(t, pb.Op_OP_ADD, telRef, map[string]any{"metadata": map[string]any{"name": "logs", "namespace": "shop"}, "spec": map[string]any{}})
	testutil.Eventually(t, "the Telemetry logged at warning level and in the gauge", func() bool {
		return len(e.log.lines("level=WARN", "config ignored", "object=c1/Telemetry/shop/logs", "severity=warning")) == 1 &&
			testutil.Metric(reg, `pilotwire_ads_config_ignored{kind="Telemetry",severity="warning"}`) == 1
	})
	if n := len(e.log.lines("config ignored", denyObj)); n != 1 {
		t.Errorf("the AUTHZ plugin logged %d times, want once:\n%s", n, strings.Join(e.log.lines(denyObj), "\n"))
	}
	if got := testutil.Metric(reg, "pilot_total_xds_internal_errors"); got != 2 {
		t.Errorf("pilot_total_xds_internal_errors = %v, want 2", got)
	}

	e.publishObject(t, pb.Op_OP_DELETE, authzRef, nil)
	testutil.Eventually(t, "the deleted plugin leaves the gauge", func() bool {
		return testutil.Metric(reg, `pilotwire_ads_config_ignored{kind="WasmPlugin"}`) == 0
	})
	if got := testutil.Metric(reg, `pilotwire_ads_config_ignored{kind="Telemetry",severity="warning"}`); got != 1 {
		t.Errorf("Telemetry gauge after the plugin's delete = %v, want 1", got)
	}
}

// TestConfigzShowsUnsupported: /debug/configz lists config the frontend
// leaves out with its severity, and /metrics counts it by kind.
func TestConfigzShowsUnsupported(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("shop", "web", 80))
		f.publish(t, pb.Op_OP_ADD, "extensions.istio.io", "WasmPlugin", authzPlugin("authz"))
		f.publish(t, pb.Op_OP_ADD, "networking.istio.io", "Sidecar", sidecarWithIngress("in"))
	})
	type ignored struct {
		Object   string `json:"object"`
		Severity string `json:"severity"`
	}
	var cz struct {
		Ignored []ignored `json:"ignored"`
	}
	testutil.Eventually(t, "configz lists the left-out config", func() bool {
		cz.Ignored = nil
		getJSON(t, f.http+"/debug/configz", &cz)
		return len(cz.Ignored) == 2
	})
	want := []ignored{
		{Object: "c1/Sidecar/shop/in", Severity: "warning"},
		{Object: "c1/WasmPlugin/shop/authz", Severity: "error"},
	}
	if diff := cmp.Diff(want, cz.Ignored); diff != "" {
		t.Errorf("configz ignored (-want +got):\n%s", diff)
	}
	testutil.Eventually(t, "the gauge counts them", func() bool {
		return f.gauge(`pilotwire_ads_config_ignored{kind="WasmPlugin",severity="error"}`) == 1 &&
			f.gauge(`pilotwire_ads_config_ignored{kind="Sidecar",severity="warning"}`) == 1
	})
}
