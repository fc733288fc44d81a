package filesource

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pilotwire/pilotwire/services/ingest/manifest"
)

// isManifest reports whether a file name is a manifest: *.yaml, *.yml or
// *.json, not hidden.
func isManifest(name string) bool {
	base := filepath.Base(name)
	if strings.HasPrefix(base, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(base)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// readResult is what reading one manifest file found.
type readResult struct {
	rel  string
	gone bool // the file does not exist (or is no longer a regular file)
	objs []manifest.Object
	// errs are the file's invalid documents.
	errs []*manifest.Error
	// fileErr is set when the file could not be read at all.
	fileErr *manifest.Error
}

// readManifest reads and parses root/rel.
func readManifest(root, rel string, maxSize int64) readResult {
	r := readResult{rel: rel}
	path := filepath.Join(root, filepath.FromSlash(rel))
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		r.gone = true
		return r
	}
	if err != nil {
		r.fileErr = &manifest.Error{File: rel, Item: -1, Reason: manifest.ReasonUnreadableFile, Err: err}
		return r
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		r.fileErr = &manifest.Error{File: rel, Item: -1, Reason: manifest.ReasonUnreadableFile, Err: err}
		return r
	}
	if !st.Mode().IsRegular() {
		// A directory now has this name (or a device): no manifest here.
		r.gone = true
		return r
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		r.fileErr = &manifest.Error{File: rel, Item: -1, Reason: manifest.ReasonUnreadableFile, Err: err}
		return r
	}
	if int64(len(data)) > maxSize {
		r.fileErr = &manifest.Error{File: rel, Item: -1, Reason: manifest.ReasonFileTooLarge,
			Err: fmt.Errorf("file is larger than %d bytes", maxSize)}
		return r
	}
	r.objs, r.errs = manifest.Parse(rel, data)
	return r
}

// readAll reads and parses files in parallel (one worker per CPU: YAML
// parsing dominates the initial scan) and returns the results in the order
// of files.
func readAll(root string, files []string, maxSize int64) []readResult {
	out := make([]readResult, len(files))
	workers := min(runtime.GOMAXPROCS(0), len(files))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(files) {
					return
				}
				out[i] = readManifest(root, files[i], maxSize)
			}
		}()
	}
	wg.Wait()
	return out
}

// walk lists the manifest files at or below dir (relative to root, "" for
// root itself) and calls watch for every directory, skipping hidden ones.
func walk(root, dir string, watch func(rel string) error) ([]string, []error) {
	var (
		files []string
		errs  []error
	)
	start := filepath.Join(root, filepath.FromSlash(dir))
	err := filepath.WalkDir(start, func(path string, d fs.DirEntry, err error) error {
		rel, relErr := filepath.Rel(root, path)
		if relErr != nil {
			return relErr
		}
		rel = filepath.ToSlash(rel)
		if rel == "." {
			rel = ""
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking: its events follow
			}
			errs = append(errs, err)
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if rel != "" && strings.HasPrefix(d.Name(), ".") {
				return fs.SkipDir
			}
			if err := watch(rel); err != nil {
				errs = append(errs, err)
			}
			return nil
		}
		if isManifest(d.Name()) {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	return files, errs
}
