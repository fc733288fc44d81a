package k8stest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindBinaries(t *testing.T) {
	tests := []struct {
		name    string
		files   []string
		wantErr []string // substrings of the error; nil: no error
	}{
		{name: "both present", files: []string{"etcd", "kube-apiserver"}},
		{name: "none", wantErr: []string{"no executable", "etcd", "kube-apiserver", buildScript, envBinDir}},
		{name: "apiserver missing", files: []string{"etcd"}, wantErr: []string{"kube-apiserver", buildScript}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv(envBinDir, dir)
			b, err := findBinaries()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("findBinaries: %v", err)
				}
				if b.etcd != filepath.Join(dir, "etcd") || b.apiserver != filepath.Join(dir, "kube-apiserver") {
					t.Errorf("findBinaries = %+v, want both in %s", b, dir)
				}
				return
			}
			if err == nil {
				t.Fatalf("findBinaries: no error, want one mentioning %q", tt.wantErr)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestRepoRootDefault(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("repoRoot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, buildScript)); err != nil {
		t.Errorf("repoRoot = %s, which has no %s", root, buildScript)
	}
}
