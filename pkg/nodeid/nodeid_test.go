package nodeid_test

import (
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pilotwire/pilotwire/pkg/nodeid"
)

func TestParseLabels(t *testing.T) {
	md := func(fields map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(fields)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name string
		md   *structpb.Struct
		want map[string]string
	}{
		{name: "no metadata", want: nil},
		{name: "no labels", md: md(map[string]any{"NAMESPACE": "ns"}), want: nil},
		{name: "labels", md: md(map[string]any{"LABELS": map[string]any{"app": "web", "version": "v2"}}), want: map[string]string{"app": "web", "version": "v2"}},
		{name: "empty labels", md: md(map[string]any{"LABELS": map[string]any{}}), want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := nodeid.Parse(&core.Node{Id: "sidecar~10.0.0.1~web-0.ns~ns.svc.cluster.local", Metadata: tc.md})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, p.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, p.XDS(nil).Labels); diff != "" {
				t.Errorf("generation labels (-want +got):\n%s", diff)
			}
		})
	}
}
