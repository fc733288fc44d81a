package kubesource_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"

	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
)

// The real CRDs ship in Go modules; the tests install them as published,
// never a hand-written copy.
const (
	istioAPIModule   = "istio.io/api@v1.32.0"
	istioCRDFile     = "kubernetes/customresourcedefinitions.gen.yaml"
	gatewayAPIModule = "sigs.k8s.io/gateway-api@v1.6.3"
	gatewayCRDDir    = "config/crd/standard"
)

var (
	moduleDirsMu sync.Mutex
	moduleDirs   = map[string]string{}
)

// moduleDir returns the directory of a module version in the module cache,
// downloading it with `go mod download` (the Go module proxy) if needed.
func moduleDir(t *testing.T, modVersion string) string {
	t.Helper()
	moduleDirsMu.Lock()
	defer moduleDirsMu.Unlock()
	if d, ok := moduleDirs[modVersion]; ok {
		return d
	}
	cmd := exec.Command("go", "mod", "download", "-json", modVersion)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || err != nil || info.Error != "" || info.Dir == "" {
		t.Fatalf("go mod download %s: %v %s %s", modVersion, err, info.Error, stderr.String())
	}
	moduleDirs[modVersion] = info.Dir
	return info.Dir
}

// readCRDs decodes every CustomResourceDefinition of a multi-document YAML
// file, by spec.names.kind.
func readCRDs(t *testing.T, path string) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := make(map[string]*apiextensionsv1.CustomResourceDefinition)
	dec := yaml.NewYAMLOrJSONDecoder(f, 64<<10)
	for {
		var crd apiextensionsv1.CustomResourceDefinition
		err := dec.Decode(&crd)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("decode %s: %v", path, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		out[crd.Spec.Names.Kind] = &crd
	}
}

// istioCRD returns Istio's CRD of kind.
func istioCRD(t *testing.T, kind string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := readCRDs(t, filepath.Join(moduleDir(t, istioAPIModule), istioCRDFile))[kind]
	if crd == nil {
		t.Fatalf("no %s CRD in %s", kind, istioAPIModule)
	}
	return crd
}

// gatewayCRD returns the standard-channel Gateway API CRD of a file, e.g.
// "httproutes".
func gatewayCRD(t *testing.T, plural string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	path := filepath.Join(moduleDir(t, gatewayAPIModule), gatewayCRDDir, "gateway.networking.k8s.io_"+plural+".yaml")
	for _, crd := range readCRDs(t, path) {
		return crd
	}
	t.Fatalf("no CRD in %s", path)
	return nil
}

// installCRD creates a CRD and waits until it is Established.
func installCRD(t *testing.T, cfg *rest.Config, crd *apiextensionsv1.CustomResourceDefinition) {
	t.Helper()
	ext := extClient(t, cfg)
	ctx := testCtx(t)
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD %s: %v", crd.Name, err)
	}
	ingesttest.WaitFor(t, ctx, "CRD "+crd.Name+" established", func() (bool, string) {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, ""
			}
		}
		return false, "not established"
	})
}

// deleteCRD deletes a CRD and waits until it is gone (its custom resources
// are deleted first).
func deleteCRD(t *testing.T, cfg *rest.Config, name string) {
	t.Helper()
	ext := extClient(t, cfg)
	ctx := testCtx(t)
	if err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete CRD %s: %v", name, err)
	}
	ingesttest.WaitFor(t, ctx, "CRD "+name+" gone", func() (bool, string) {
		_, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), "still there"
	})
}

func extClient(t *testing.T, cfg *rest.Config) apiextensionsclient.Interface {
	t.Helper()
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ext
}
