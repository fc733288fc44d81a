package k8stest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Configuration, read once per Start (never on a hot path).
const (
	// envBinDir names the directory holding the etcd and kube-apiserver
	// binaries. Default: <repo>/.cache/k8s/bin, where <repo> is the nearest
	// directory above the working directory that has hack/k8s-binaries.sh.
	// hack/k8s-binaries.sh honours the same variable.
	envBinDir = "PILOTWIRE_K8S_BIN"

	// defaultBinDir is the default location relative to the repo root.
	defaultBinDir = ".cache/k8s/bin"

	// buildScript is the script that fills the binary directory.
	buildScript = "hack/k8s-binaries.sh"
)

// binaries are the absolute paths of the two programs a cluster runs.
type binaries struct {
	etcd      string
	apiserver string
}

// findBinaries locates etcd and kube-apiserver, or returns an error that
// says how to build them.
func findBinaries() (binaries, error) {
	dir, from := os.Getenv(envBinDir), "$"+envBinDir
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return binaries{}, fmt.Errorf("%w; set %s to the directory holding etcd and kube-apiserver", err, envBinDir)
		}
		dir, from = filepath.Join(root, defaultBinDir), "the default; override with $"+envBinDir
	}
	b := binaries{
		etcd:      filepath.Join(dir, "etcd"),
		apiserver: filepath.Join(dir, "kube-apiserver"),
	}
	var missing []error
	for _, p := range []string{b.etcd, b.apiserver} {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, fmt.Errorf("no executable %s", p))
		}
	}
	if len(missing) > 0 {
		return binaries{}, fmt.Errorf("etcd and kube-apiserver not found in %s (%s):\n%w\n"+
			"build them with `%s` from the repo root (a few minutes the first time; it honours $%s)",
			dir, from, errors.Join(missing...), buildScript, envBinDir)
	}
	return b, nil
}

// repoRoot walks up from the working directory (a test's package dir) to
// the directory that holds hack/k8s-binaries.sh.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repo root: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("find repo root: no %s above %s", buildScript, wd)
		}
		dir = parent
	}
}
