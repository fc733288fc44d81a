// Command imagebuild packs pilotwire's static binaries into container
// images without a container engine and without pulling a base image: each
// image is one layer on an empty base (scratch) holding the binary, a
// passwd/group naming the non-root user and an empty /tmp, with the user,
// entrypoint and OCI labels in its config. It writes each image as a
// tarball that `docker load`, `podman load` and `crane push` read, and
// with --push sends it to the registry instead.
//
// It is a build tool, its own module (go-containerregistry stays out of
// the product's go.mod), run by `make images`:
//
//	imagebuild --bin-dir bin/static --out bin/images --registry R --tag T \
//	    pilotwire-ads=ads pilotwire-cli=pilotwire ...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// config is what the flags set.
type config struct {
	binDir   string // where the binaries are
	out      string // where the tarballs go
	registry string // image name prefix: <registry>/<image>:<tag>
	tag      string
	uid      int
	arch     string
	labels   map[string]string // OCI labels every image carries
	created  time.Time         // the images' creation time (reproducible: SOURCE_DATE_EPOCH)
	push     bool              // send to the registry instead of writing tarballs
	images   []imageSpec
}

// imageSpec names one image and the binary it runs.
type imageSpec struct {
	name   string // pilotwire-ads
	binary string // ads
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	cfg := config{labels: map[string]string{}}
	var labels, epoch string
	fs.StringVar(&cfg.binDir, "bin-dir", "bin/static", "directory of the static binaries")
	fs.StringVar(&cfg.out, "out", "bin/images", "directory the image tarballs are written to")
	fs.StringVar(&cfg.registry, "registry", "pilotwire", "registry and path the image names start with")
	fs.StringVar(&cfg.tag, "tag", "latest", "tag of every image")
	fs.IntVar(&cfg.uid, "uid", nonRootUID, "uid and gid the images run as (not 0)")
	fs.StringVar(&cfg.arch, "arch", runtime.GOARCH, "architecture of the binaries (GOARCH)")
	fs.StringVar(&labels, "labels", "", "more OCI labels, key=value,key=value")
	fs.StringVar(&epoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time of the images and their files, seconds since 1970 (env SOURCE_DATE_EPOCH; default 0)")
	fs.BoolVar(&cfg.push, "push", false, "push the images to the registry (credentials from the docker config) instead of writing tarballs")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.uid <= 0 {
		return cfg, fmt.Errorf("--uid %d: the images must run as a non-root user", cfg.uid)
	}
	for kv := range strings.SplitSeq(labels, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return cfg, fmt.Errorf("--labels: %q is not key=value", kv)
		}
		cfg.labels[k] = v
	}
	cfg.created = time.Unix(0, 0).UTC()
	if epoch != "" {
		var sec int64
		if _, err := fmt.Sscanf(epoch, "%d", &sec); err != nil {
			return cfg, fmt.Errorf("--source-date-epoch %q: %w", epoch, err)
		}
		cfg.created = time.Unix(sec, 0).UTC()
	}
	for _, a := range fs.Args() {
		name, bin, ok := strings.Cut(a, "=")
		if !ok || name == "" || bin == "" || strings.ContainsRune(bin, '/') {
			return cfg, fmt.Errorf("image %q: want IMAGE=BINARY (BINARY a file name in --bin-dir)", a)
		}
		cfg.images = append(cfg.images, imageSpec{name: name, binary: bin})
	}
	if len(cfg.images) == 0 {
		return cfg, errors.New("no images named (IMAGE=BINARY ...)")
	}
	return cfg, nil
}

// run builds every image and writes (or pushes) it, printing one line each.
func run(ctx context.Context, cfg config, out interface{ Write([]byte) (int, error) }) error {
	if !cfg.push {
		if err := os.MkdirAll(cfg.out, 0o755); err != nil {
			return err
		}
	}
	for _, spec := range cfg.images {
		if err := ctx.Err(); err != nil {
			return err
		}
		ref := fmt.Sprintf("%s/%s:%s", strings.TrimSuffix(cfg.registry, "/"), spec.name, cfg.tag)
		img, err := build(cfg, spec, filepath.Join(cfg.binDir, spec.binary))
		if err != nil {
			return fmt.Errorf("%s: %w", spec.name, err)
		}
		if cfg.push {
			if err := push(ctx, ref, img); err != nil {
				return fmt.Errorf("%s: %w", spec.name, err)
			}
			fmt.Fprintf(out, "pushed %s\n", ref)
			continue
		}
		path := filepath.Join(cfg.out, spec.name+".tar")
		if err := writeTarball(path, ref, img); err != nil {
			return fmt.Errorf("%s: %w", spec.name, err)
		}
		fmt.Fprintf(out, "%s %s\n", ref, path)
	}
	return nil
}
