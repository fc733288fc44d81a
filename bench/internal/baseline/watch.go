package baseline

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/pilotwire/pilotwire/bench/internal/yamldir"
)

// watcher turns file events under a directory into batches of changed
// manifest paths: a batch is sent once no event came for quiet, or maxDelay
// after its first event.
type watcher struct {
	// set at construction
	root            string
	quiet, maxDelay time.Duration
	fs              *fsnotify.Watcher
	batches         chan []string // owned by run, read by the server
}

func newWatcher(root string, quiet, maxDelay time.Duration) (*watcher, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &watcher{root: abs, quiet: quiet, maxDelay: maxDelay, fs: fw, batches: make(chan []string)}
	if err := w.addTree(abs); err != nil {
		fw.Close()
		return nil, err
	}
	return w, nil
}

func (w *watcher) close() { w.fs.Close() }

// addTree watches dir and every directory below it that is not hidden.
func (w *watcher) addTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !e.IsDir() {
			return nil
		}
		if p != dir && strings.HasPrefix(e.Name(), ".") {
			return filepath.SkipDir
		}
		return w.fs.Add(p)
	})
}

// run collects events until ctx ends.
func (w *watcher) run(ctx context.Context) {
	pending := make(map[string]struct{})
	var first, last time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	arm := func() {
		due := last.Add(w.quiet)
		if cap := first.Add(w.maxDelay); cap.Before(due) {
			due = cap
		}
		timer.Reset(max(0, time.Until(due)))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.fs.Events:
			if !ok {
				return
			}
			rel, err := filepath.Rel(w.root, ev.Name)
			if err != nil || rel == "." {
				continue
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					_ = w.addTree(ev.Name)
					for _, f := range w.manifestsUnder(ev.Name) {
						pending[f] = struct{}{}
					}
				}
			}
			if !yamldir.IsManifest(rel) {
				continue
			}
			now := time.Now()
			if len(pending) == 0 {
				first = now
			}
			pending[rel] = struct{}{}
			last = now
			arm()
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				for _, f := range w.manifestsUnder(w.root) {
					pending[f] = struct{}{}
				}
				now := time.Now()
				first, last = now, now
				arm()
			}
		case <-timer.C:
			if len(pending) == 0 {
				continue
			}
			files := make([]string, 0, len(pending))
			for f := range pending {
				files = append(files, f)
			}
			slices.Sort(files)
			clear(pending)
			select {
			case w.batches <- files:
			case <-ctx.Done():
				return
			}
		}
	}
}

// manifestsUnder lists the manifests below dir, relative to the root.
func (w *watcher) manifestsUnder(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		if rel, err := filepath.Rel(w.root, p); err == nil && yamldir.IsManifest(rel) {
			out = append(out, rel)
		}
		return nil
	})
	return out
}
