package helmtest

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// schemaValidator checks objects against the API server's OpenAPI v3
// schemas on the client side, with the type converter server-side apply
// itself uses (structured-merge-diff): a field the schema does not
// declare, or a value of the wrong type, is an error.
type schemaValidator struct {
	tc managedfields.TypeConverter
}

func newSchemaValidator(t *testing.T, c *cluster) *schemaValidator {
	t.Helper()
	paths, err := c.cs.Discovery().OpenAPIV3().Paths()
	if err != nil {
		t.Fatalf("openapi/v3: %v", err)
	}
	schemas := map[string]*spec.Schema{}
	for p, gv := range paths {
		if p != "api/v1" && !strings.HasPrefix(p, "apis/") {
			continue
		}
		b, err := gv.Schema("application/json")
		if err != nil {
			t.Fatalf("openapi/v3/%s: %v", p, err)
		}
		var doc spec3.OpenAPI
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("openapi/v3/%s: %v", p, err)
		}
		if doc.Components == nil {
			continue
		}
		for name, s := range doc.Components.Schemas {
			schemas[name] = s
		}
	}
	tc, err := managedfields.NewTypeConverter(schemas, false)
	if err != nil {
		t.Fatalf("type converter from %d schemas: %v", len(schemas), err)
	}
	return &schemaValidator{tc: tc}
}

func (v *schemaValidator) validate(obj *unstructured.Unstructured) error {
	_, err := v.tc.ObjectToTyped(obj)
	return err
}

// testSchema validates every variant's manifests against the OpenAPI
// schema, and shows that the check refuses what it should.
func testSchema(t *testing.T, c *cluster) {
	v := newSchemaValidator(t, c)
	for name, values := range variants(t) {
		for _, o := range render(t, "pw", "pw-"+name, values) {
			if err := v.validate(o); err != nil {
				t.Errorf("%s: %s %s: %v", name, o.GetKind(), o.GetName(), err)
			}
		}
	}
	dep := find(t, render(t, "pw", "pw", nil), "Deployment", "pw-pilotwire-ads").DeepCopy()
	bad := dep.DeepCopy()
	_ = unstructured.SetNestedField(bad.Object, int64(1), "spec", "template", "spec", "securityContext", "runAsNonRot")
	if err := v.validate(bad); err == nil {
		t.Error("a misspelt field passed the schema check")
	}
	bad = dep.DeepCopy()
	_ = unstructured.SetNestedField(bad.Object, "three", "spec", "revisionHistoryLimit")
	if err := v.validate(bad); err == nil {
		t.Error("a string where the schema wants an integer passed the schema check")
	}
}
