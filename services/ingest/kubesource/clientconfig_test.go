package kubesource

import (
	"testing"

	"k8s.io/client-go/rest"
)

func TestClientConfigCompression(t *testing.T) {
	tests := []struct {
		name        string
		compression bool
		kubeconfig  bool // the kubeconfig's disable-compression
		wantOff     bool
	}{
		{name: "default: off", wantOff: true},
		{name: "asked for", compression: true},
		{name: "asked for, but the kubeconfig disables it", compression: true, kubeconfig: true, wantOff: true},
		{name: "off, the kubeconfig disables it too", kubeconfig: true, wantOff: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := &rest.Config{Host: "https://127.0.0.1:6443", DisableCompression: tt.kubeconfig}
			got := clientConfig(in, tt.compression)
			if got.DisableCompression != tt.wantOff {
				t.Errorf("DisableCompression = %v, want %v", got.DisableCompression, tt.wantOff)
			}
			if got.UserAgent != "pilotwire-ingest" {
				t.Errorf("UserAgent = %q", got.UserAgent)
			}
			if in.DisableCompression != tt.kubeconfig || in.UserAgent != "" {
				t.Errorf("clientConfig changed its input: %+v", in)
			}
		})
	}
}
