package helmtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const envImages = "PILOTWIRE_IMAGES_DIR"

// imagesDir is where `make images` wrote the image tarballs.
func imagesDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envImages)
	if dir == "" {
		dir = filepath.Join(repoRoot(t), "bin", "images")
	}
	if _, err := os.Stat(dir); err != nil {
		if testing.Short() {
			t.Skipf("no images in %s; skipped under -short", dir)
		}
		t.Fatalf("no images in %s: run `make images` (or set $%s)", dir, envImages)
	}
	return dir
}

// imageTarball is what a docker-archive tarball holds for one image.
type imageTarball struct {
	tags       []string
	user       string
	entrypoint []string
	labels     map[string]string
	layers     [][]byte // gzipped or plain tar layers, in order
}

func readTarball(path string) (*imageTarball, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			return nil, err
		}
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		return nil, fmt.Errorf("manifest.json: %d images, %v", len(manifest), err)
	}
	var cfg struct {
		OS     string `json:"os"`
		Config struct {
			User       string
			Entrypoint []string
			Labels     map[string]string
		} `json:"config"`
	}
	if err := json.Unmarshal(files[manifest[0].Config], &cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", manifest[0].Config, err)
	}
	if cfg.OS != "linux" {
		return nil, fmt.Errorf("config os %q", cfg.OS)
	}
	img := &imageTarball{tags: manifest[0].RepoTags, user: cfg.Config.User, entrypoint: cfg.Config.Entrypoint, labels: cfg.Config.Labels}
	for _, l := range manifest[0].Layers {
		b, ok := files[l]
		if !ok {
			return nil, fmt.Errorf("layer %s missing", l)
		}
		img.layers = append(img.layers, b)
	}
	return img, nil
}

// extract unpacks a layer into dir (regular files and directories only).
func extract(layer []byte, dir string) error {
	var r io.Reader = bytes.NewReader(layer)
	if len(layer) > 2 && layer[0] == 0x1f && layer[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return fmt.Errorf("layer entry %q escapes the root", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(p, b, os.FileMode(h.Mode).Perm()); err != nil {
				return err
			}
		default:
			return fmt.Errorf("layer entry %q: unexpected type %c", h.Name, h.Typeflag)
		}
	}
}

// chartImages are the images the chart's pods run, with every optional
// component on whose image `make images` builds.
func chartImages(t *testing.T) []string {
	t.Helper()
	values := map[string]any{}
	if _, err := os.Stat(filepath.Join(repoRoot(t), "services", "ca", "cmd", "ca")); err == nil {
		values["ca"] = map[string]any{"enabled": true}
	}
	var out []string
	for _, o := range render(t, "pw", "pilotwire", values) {
		spec, ok := podSpec(o)
		if !ok {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(spec, "containers")
		for _, c := range cs {
			img := c.(map[string]any)["image"].(string)
			if !slices.Contains(out, img) {
				out = append(out, img)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestImages checks the images `make images` built, with the names the
// chart's pods use: each is one layer with a static binary at its
// entrypoint that runs (`--help` exits 0; no container engine here, so the
// binary runs from the extracted layer), as a non-root user.
func TestImages(t *testing.T) {
	helmBin(t)
	dir := imagesDir(t)
	want := chartImages(t)
	if len(want) < 5 {
		t.Fatalf("chart renders images %v, want the four services and the CLI", want)
	}
	for _, ref := range want {
		name := ref[strings.LastIndex(ref, "/")+1:]
		name = name[:strings.Index(name, ":")]
		t.Run(name, func(t *testing.T) {
			img, err := readTarball(filepath.Join(dir, name+".tar"))
			if err != nil {
				t.Fatalf("%s (run `make images`): %v", name, err)
			}
			if !slices.Contains(img.tags, ref) {
				t.Errorf("tarball tagged %v, the chart runs %s (build with the chart's registry and appVersion)", img.tags, ref)
			}
			uid, gid, ok := strings.Cut(img.user, ":")
			if n, err := strconv.Atoi(uid); err != nil || n <= 0 || !ok {
				t.Errorf("user %q: want a numeric non-root uid:gid", img.user)
			} else if g, err := strconv.Atoi(gid); err != nil || g <= 0 {
				t.Errorf("user %q: want a non-root gid", img.user)
			} else if n != 65532 {
				t.Errorf("uid %d, the chart's podSecurityContext runs 65532", n)
			}
			if len(img.entrypoint) != 1 || !strings.HasPrefix(img.entrypoint[0], "/usr/local/bin/") {
				t.Fatalf("entrypoint %v", img.entrypoint)
			}
			if img.labels["org.opencontainers.image.version"] == "" {
				t.Errorf("labels %v: no version", img.labels)
			}
			if len(img.layers) != 1 {
				t.Fatalf("%d layers, want one on an empty base", len(img.layers))
			}
			root := t.TempDir()
			if err := extract(img.layers[0], root); err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(root, img.entrypoint[0])
			st, err := os.Stat(bin)
			if err != nil {
				t.Fatalf("entrypoint not in the layer: %v", err)
			}
			if st.Mode().Perm() != 0o555 {
				t.Errorf("binary mode %v", st.Mode())
			}
			if err := static(bin); err != nil {
				t.Error(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, "--help").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", img.entrypoint[0], err, out)
			}
			if !strings.Contains(string(out), "Usage:") {
				t.Errorf("%s --help printed no usage:\n%s", img.entrypoint[0], out)
			}
		})
	}
}

// static fails for a dynamically linked ELF binary: one that needs an
// interpreter (ld.so) the empty base does not have.
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: it would not run on an empty base", path)
		}
	}
	return nil
}
