package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonRootUID is the user the images run as: distroless's "nonroot"
// (65532), a uid with no meaning elsewhere. Not Istio's 1337: istio-iptables
// leaves traffic from 1337 unredirected as the sidecar's own, so a control
// plane pod that ever got a sidecar would bypass it silently.
const nonRootUID = 65532

// binDir is where the binary lies in the image.
const binDir = "usr/local/bin"

// build makes spec's image: one layer on an empty base.
func build(cfg config, spec imageSpec, binary string) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read the binary (run `make images`, which builds it): %w", err)
	}
	layerTar, err := rootfs(spec.binary, bin, cfg.uid, cfg.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: cfg.created},
			CreatedBy: "hack/imagebuild: " + spec.binary,
			Comment:   "static binary on an empty base",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = cfg.arch
	cf.Created = v1.Time{Time: cfg.created}
	labels := map[string]string{
		"org.opencontainers.image.title":       spec.name,
		"org.opencontainers.image.description": "pilotwire " + spec.binary,
		"org.opencontainers.image.version":     cfg.tag,
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
	for k, v := range cfg.labels {
		labels[k] = v
	}
	user := fmt.Sprintf("%d:%d", cfg.uid, cfg.uid)
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{"/" + path.Join(binDir, spec.binary)},
		WorkingDir: "/",
		Env:        []string{"PATH=/" + binDir},
		Labels:     labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return img, nil
}

// rootfs is the layer's tar: the directories, the binary (mode 0555, owned
// by root so the process cannot rewrite it), /etc/passwd and /etc/group
// naming root and nonroot, and /tmp (sticky, world-writable; mount an
// emptyDir there under a read-only root filesystem).
func rootfs(binName string, bin []byte, uid int, mtime time.Time) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	type entry struct {
		name string
		mode int64
		dir  bool
		data []byte
		uid  int
	}
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, dir: true, uid: uid},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: binDir + "/", mode: 0o755, dir: true},
		{name: path.Join(binDir, binName), mode: 0o555, data: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.uid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !e.dir {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeTarball writes img tagged ref to path (a docker-archive tarball,
// which `docker load`, `podman load` and `crane push` read), through a
// temporary file so a reader never sees half an image.
func writeTarball(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// push sends img to the registry of ref with the docker config's
// credentials.
func push(ctx context.Context, ref string, img v1.Image, opts ...remote.Option) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.Write(tag, img, opts...); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}
