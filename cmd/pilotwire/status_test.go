package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// authzPluginYAML is untranslated config whose absence fails open.
const authzPluginYAML = `apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: authz, namespace: shop}
spec:
  phase: AUTHZ
  url: oci://example.com/authz:1
`

const ingressSidecarYAML = `apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: in, namespace: shop}
spec:
  ingress:
  - port: {number: 9080, protocol: HTTP}
    defaultEndpoint: 127.0.0.1:8080
`

// TestStatusListsUnsupportedConfig: status lists the config every
// frontend leaves out, errors first, as the frontends report it; an
// object deleted leaves the list.
func TestStatusListsUnsupportedConfig(t *testing.T) {
	_, dir, cc, _ := startMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	pipelinetest.WriteFile(t, dir, "policy.yaml", authzPluginYAML+"---\n"+ingressSidecarYAML)

	type ignored struct {
		Object, Severity string
	}
	read := func() ([]ignored, string) {
		t.Helper()
		var out bytes.Buffer
		jc := cc
		jc.Output = "json"
		if err := runStatus(ctx, &out, statusConfig{connConfig: jc}); err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Ignored []struct {
				Object   string `json:"object"`
				Severity string `json:"severity"`
				Reason   string `json:"reason"`
			} `json:"ignored"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("status -o json: %v\n%s", err, out.String())
		}
		var got []ignored
		for _, i := range rep.Ignored {
			if i.Reason == "" {
				t.Errorf("no reason: %+v", i)
			}
			got = append(got, ignored{i.Object, i.Severity})
		}
		return got, out.String()
	}
	want := []ignored{
		{"Kubernetes/WasmPlugin/shop/authz", "error"},
		{"Kubernetes/Sidecar/shop/in", "warning"},
	}
	var got []ignored
	var raw string
	testutil.Eventually(t, "status to list the plugin and the Sidecar", func() bool {
		got, raw = read()
		return len(got) == len(want)
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status ignored (-want +got):\n%s\n%s", diff, raw)
	}

	var table bytes.Buffer
	if err := runStatus(ctx, &table, statusConfig{connConfig: cc}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"CONFIG NOT APPLIED", "error", "Kubernetes/WasmPlugin/shop/authz", "the requests it would refuse are allowed", "Kubernetes/Sidecar/shop/in"} {
		if !strings.Contains(table.String(), w) {
			t.Errorf("status table lacks %q:\n%s", w, table.String())
		}
	}

	pipelinetest.WriteFile(t, dir, "policy.yaml", ingressSidecarYAML)
	testutil.Eventually(t, "the deleted plugin to leave status", func() bool {
		got, raw = read()
		return len(got) == 1
	})
	if diff := cmp.Diff(want[1:], got); diff != "" {
		t.Errorf("status ignored after the delete (-want +got):\n%s\n%s", diff, raw)
	}
}
