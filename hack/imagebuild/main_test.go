package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const testTimeout = 30 * time.Second

// fixture writes a fake binary and returns a config that packs it.
func fixture(t *testing.T) (config, []byte) {
	t.Helper()
	dir := t.TempDir()
	bin := []byte("\x7fELF not really a binary")
	if err := os.WriteFile(filepath.Join(dir, "ads"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseFlags([]string{"--bin-dir", dir, "--out", filepath.Join(dir, "out"),
		"--registry", "example.test/pw", "--tag", "1.2.3", "--source-date-epoch", "1700000000",
		"--labels", "org.opencontainers.image.revision=abc", "pilotwire-ads=ads"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, bin
}

func TestTarballImage(t *testing.T) {
	cfg, bin := fixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.out, "pilotwire-ads.tar")
	if got, want := out.String(), "example.test/pw/pilotwire-ads:1.2.3 "+path+"\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
	tag, _ := name.NewTag("example.test/pw/pilotwire-ads:1.2.3")
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cf.Config.User)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/usr/local/bin/ads" {
		t.Errorf("entrypoint %q", got)
	}
	if cf.OS != "linux" || cf.Created.Unix() != 1700000000 {
		t.Errorf("os %q created %v", cf.OS, cf.Created)
	}
	for k, v := range map[string]string{"org.opencontainers.image.revision": "abc", "org.opencontainers.image.version": "1.2.3", "org.opencontainers.image.title": "pilotwire-ads"} {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cf.Config.Labels[k], v)
		}
	}
	files := layerFiles(t, img)
	if !bytes.Equal(files["usr/local/bin/ads"].data, bin) || files["usr/local/bin/ads"].mode != 0o555 {
		t.Errorf("binary in the layer: mode %o, %d bytes", files["usr/local/bin/ads"].mode, len(files["usr/local/bin/ads"].data))
	}
	if !strings.Contains(string(files["etc/passwd"].data), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd: %q", files["etc/passwd"].data)
	}
	if f, ok := files["tmp/"]; !ok || f.mode != 0o1777 {
		t.Errorf("/tmp: %+v", f)
	}

	// The same inputs make the same image: the digest does not depend on
	// when or where it was built.
	var out2 bytes.Buffer
	if err := run(ctx, cfg, &out2); err != nil {
		t.Fatal(err)
	}
	img2, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 {
		t.Errorf("rebuilt image digest %s, first %s", d2, d1)
	}
}

// TestPush pushes to a registry on loopback (go-containerregistry's
// in-memory registry) and pulls the image back by tag.
func TestPush(t *testing.T) {
	cfg, _ := fixture(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	cfg.registry = strings.TrimPrefix(srv.URL, "http://") + "/pw"
	cfg.push = true
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatal(err)
	}
	ref := cfg.registry + "/pilotwire-ads:1.2.3"
	if out.String() != "pushed "+ref+"\n" {
		t.Errorf("output %q", out.String())
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	built, err := build(cfg, cfg.images[0], filepath.Join(cfg.binDir, "ads"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := img.Digest()
	want, _ := built.Digest()
	if got != want {
		t.Errorf("pulled digest %s, built %s", got, want)
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{name: "root", args: []string{"--uid", "0", "a=b"}, err: "non-root"},
		{name: "no images", args: nil, err: "no images"},
		{name: "path as binary", args: []string{"a=../b"}, err: "IMAGE=BINARY"},
		{name: "bad label", args: []string{"--labels", "x", "a=b"}, err: "key=value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("err %v, want one containing %q", err, tc.err)
			}
		})
	}
}

type file struct {
	mode int64
	data []byte
}

func layerFiles(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = file{mode: h.Mode, data: data}
	}
}
