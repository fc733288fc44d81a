package model

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fastDecoders are the fast paths with the encoding/json decoders they
// stand in for.
var fastDecoders = []struct {
	kind string
	fast func([]byte) (*entry, bool)
	std  func([]byte) (*entry, error)
}{
	{KindService, fastService, stdService},
	{KindEndpointSlice, fastEndpointSlice, stdEndpointSlice},
}

// slimCmp compares what the model keeps of slices.
var slimCmp = cmp.AllowUnexported(slimService{}, slimSlice{}, slimPort{}, slimEndpoint{})

// checkFast fails unless the fast path either declines raw or decodes it
// to exactly what encoding/json decodes it to. It reports whether the
// fast path took it.
func checkFast(t *testing.T, kind string, fast func([]byte) (*entry, bool), std func([]byte) (*entry, error), raw []byte) bool {
	t.Helper()
	got, ok := fast(raw)
	if !ok {
		return false
	}
	want, err := std(raw)
	if err != nil {
		t.Fatalf("%s %q: the fast path took what encoding/json refuses (%v)", kind, raw, err)
	}
	if d := cmp.Diff(want.svc, got.svc, slimCmp); d != "" {
		t.Fatalf("%s %q: fast path differs from encoding/json (-want +got):\n%s", kind, raw, d)
	}
	if d := cmp.Diff(want.slice, got.slice, slimCmp); d != "" {
		t.Fatalf("%s %q: fast path differs from encoding/json (-want +got):\n%s", kind, raw, d)
	}
	return true
}

// FuzzFastDecode: whatever the fast Service and EndpointSlice decoders
// take, they decode as encoding/json does.
func FuzzFastDecode(f *testing.F) {
	for _, name := range []string{"service.json", "endpointslice.json"} {
		raw, err := os.ReadFile("testdata/decode/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	for _, c := range fastDecodeCases {
		f.Add([]byte(c.raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, d := range fastDecoders {
			checkFast(t, d.kind, d.fast, d.std, raw)
		}
	})
}

// fastDecodeCases are inputs near the fast path's edges, each with whether
// the fast path takes it (else encoding/json decides).
var fastDecodeCases = []struct {
	name string
	kind string
	raw  string
	fast bool
}{
	{"service", KindService, `{"metadata":{"name":"a","annotations":{"x":"{\"y\":1}","networking.istio.io/exportTo":"."}},"spec":{"type":"ClusterIP","clusterIP":"10.0.0.1","ports":[{"name":"http","port":80,"targetPort":"web","appProtocol":"http2","nodePort":30000}]},"status":{"loadBalancer":{}}}`, true},
	{"service empty ports", KindService, `{"spec":{"ports":[]}}`, true},
	{"service no spec", KindService, ` {"metadata":{}} `, true},
	{"service int target port", KindService, `{"spec":{"ports":[{"port":-0,"targetPort":8080}]}}`, true},
	{"service repeated exportTo", KindService, `{"metadata":{"annotations":{"networking.istio.io/exportTo":"a","networking.istio.io/exportTo":"b"}}}`, true},
	{"service skipped values", KindService, `{"a":[1,-2.5e+3,true,false,null,{"b":"\u00e9\n"}],"spec":{"clusterIP":"x"}}`, true},
	{"field by case", KindService, `{"Spec":{"clusterIP":"x"}}`, false},
	{"field by case inside", KindService, `{"spec":{"ClusterIP":"x"}}`, false},
	{"repeated field", KindService, `{"spec":{"clusterIP":"x"},"spec":{"type":"y"}}`, false},
	{"null field", KindService, `{"spec":{"clusterIP":null}}`, false},
	{"escaped value", KindService, `{"spec":{"clusterIP":"10.0.0.\u0031"}}`, false},
	{"non-ASCII value", KindService, `{"spec":{"clusterIP":"é"}}`, false},
	{"port too big", KindService, `{"spec":{"ports":[{"port":2147483648}]}}`, false},
	{"port fraction", KindService, `{"spec":{"ports":[{"port":80.0}]}}`, false},
	{"port as string", KindService, `{"spec":{"ports":[{"port":"80"}]}}`, false},
	{"leading zero", KindService, `{"spec":{"ports":[{"port":080}]}}`, false},
	{"annotation not a string", KindService, `{"metadata":{"annotations":{"a":1}}}`, false},
	{"trailing data", KindService, `{"spec":{}}x`, false},
	{"invalid skipped value", KindService, `{"status":[1,]}`, false},
	{"bad escape in skipped value", KindService, `{"status":"\x"}`, false},
	{"control byte in skipped value", KindService, "{\"status\":\"a\tb\"}", false},
	{"slice", KindEndpointSlice, `{"metadata":{"labels":{"kubernetes.io/service-name":"a","x":"y"}},"addressType":"IPv4","ports":[{"name":"http","port":8080,"protocol":"TCP","appProtocol":"h2c"},{}],"endpoints":[{"addresses":["10.0.0.1","10.0.0.2"],"conditions":{"ready":false,"serving":true},"nodeName":"n1","zone":"z1","targetRef":{"kind":"Pod","namespace":"ns","name":"p1"}},{"addresses":[],"targetRef":{"kind":"Node","name":"n"}},{"zone":"z1","targetRef":{"kind":"Pod","name":""}},{}]}`, true},
	{"slice empty labels", KindEndpointSlice, `{"metadata":{"labels":{}},"endpoints":[]}`, true},
	{"slice repeated label", KindEndpointSlice, `{"metadata":{"labels":{"a":"1","a":"2"}}}`, true},
	{"slice many zones", KindEndpointSlice, `{"endpoints":[{"zone":"a"},{"zone":"b"},{"zone":"c"},{"zone":"d"},{"zone":"e"},{"zone":"f"},{"zone":"g"},{"zone":"h"},{"zone":"i"},{"zone":"a"},{"zone":"i"}]}`, true},
	{"slice null ready", KindEndpointSlice, `{"endpoints":[{"conditions":{"ready":null}}]}`, false},
	{"slice null endpoint", KindEndpointSlice, `{"endpoints":[null]}`, false},
	{"slice ready as string", KindEndpointSlice, `{"endpoints":[{"conditions":{"ready":"true"}}]}`, false},
	{"slice label not a string", KindEndpointSlice, `{"metadata":{"labels":{"a":1}}}`, false},
}

func TestFastDecode(t *testing.T) {
	for _, c := range fastDecodeCases {
		t.Run(c.name, func(t *testing.T) {
			for _, d := range fastDecoders {
				if d.kind != c.kind {
					continue
				}
				if took := checkFast(t, d.kind, d.fast, d.std, []byte(c.raw)); took != c.fast {
					t.Errorf("fast path took it: %v, want %v", took, c.fast)
				}
			}
		})
	}
}

// TestFastDecodeTakesTheMesh: the objects ingest records for the benchmark
// mesh take the fast path (else replay would not be fast).
func TestFastDecodeTakesTheMesh(t *testing.T) {
	for _, d := range fastDecoders {
		raw, err := os.ReadFile("testdata/decode/" + strings.ToLower(d.kind) + ".json")
		if err != nil {
			t.Fatal(err)
		}
		if !checkFast(t, d.kind, d.fast, d.std, raw) {
			t.Errorf("%s: the fast path declined testdata/decode", d.kind)
		}
	}
}
