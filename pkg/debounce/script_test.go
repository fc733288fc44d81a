package debounce

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the expectations in testdata/*.txt")

// epoch is time zero of every script; script times are offsets from it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestScripts runs the scripts in testdata/. A script is one command a
// line; "#" starts a comment. The text after "->" is the expected output of
// the command; no arrow means no output (nothing emitted, no deadline).
//
//	config after=100ms max=10s eds-debounce=false   (first command only)
//	add <t> seq=<n> full|eds [reason=<r>] [key=<Kind/ns/name[@cluster]>]... [start=<t>]
//	tick <t>         -> emit ...    Tick(t)
//	done <t>         -> emit ...    Done(t)
//	deadline         -> <t>         NextDeadline()
//	state            -> pending=<n> inflight=<bool> oldest=<n|->
//
// An emitted request prints as
//
//	emit seqs=<ranges> full|eds [keys=<k,...>] reasons=<r:n,...> start=<t> added=<t>
//
// where <t> is a duration since the script's epoch. Run with -update to
// rewrite the expectations from the actual output.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scripts in testdata/")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file)
		})
	}
}

func runScript(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	d := New(DefaultConfig())
	changed := false
	sawCommand := false
	for i, line := range lines {
		cmdText, want, hasArrow := strings.Cut(line, "->")
		if c, _, _ := strings.Cut(cmdText, "#"); strings.TrimSpace(c) == "" {
			continue
		}
		if strings.Contains(cmdText, "#") {
			t.Fatalf("%s:%d: comments go on their own line", file, i+1)
		}
		fields := strings.Fields(cmdText)
		if fields[0] == "config" && sawCommand {
			t.Fatalf("%s:%d: config must be the first command", file, i+1)
		}
		sawCommand = true
		got, err := runCommand(d, fields)
		if err != nil {
			t.Fatalf("%s:%d: %q: %v", file, i+1, line, err)
		}
		if fields[0] == "config" {
			d = New(got.(Config))
			got = ""
		}
		want = strings.TrimSpace(want)
		if !hasArrow {
			want = ""
		}
		if got != want {
			if *update {
				lines[i] = strings.TrimRight(cmdText, " ")
				if got != "" {
					lines[i] += " -> " + got.(string)
				}
				changed = true
				continue
			}
			t.Errorf("%s:%d: %s\n got: %s\nwant: %s", file, i+1, strings.TrimSpace(cmdText), orNone(got.(string)), orNone(want))
		}
	}
	if changed {
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(nothing)"
	}
	return s
}

// runCommand runs one script command. It returns the output string, or the
// new Config for a config command.
func runCommand(d *Debouncer, f []string) (any, error) {
	switch f[0] {
	case "config":
		cfg := DefaultConfig()
		for _, arg := range f[1:] {
			k, v, _ := strings.Cut(arg, "=")
			var err error
			switch k {
			case "after":
				cfg.DebounceAfter, err = time.ParseDuration(v)
			case "max":
				cfg.DebounceMax, err = time.ParseDuration(v)
			case "eds-debounce":
				cfg.EnableEDSDebounce, err = strconv.ParseBool(v)
			default:
				err = fmt.Errorf("unknown config %q", k)
			}
			if err != nil {
				return nil, err
			}
		}
		return cfg, nil
	case "add":
		if len(f) < 2 {
			return nil, fmt.Errorf("add needs a time")
		}
		now, err := scriptTime(f[1])
		if err != nil {
			return nil, err
		}
		ev, err := parseEvent(f[2:])
		if err != nil {
			return nil, err
		}
		d.Add(ev, now)
		return "", nil
	case "tick", "done":
		if len(f) != 2 {
			return nil, fmt.Errorf("%s takes one time", f[0])
		}
		now, err := scriptTime(f[1])
		if err != nil {
			return nil, err
		}
		var req *Request
		var ok bool
		if f[0] == "tick" {
			req, ok = d.Tick(now)
		} else {
			req, ok = d.Done(now)
		}
		if ok != (req != nil) {
			return nil, fmt.Errorf("ok=%v with request %v", ok, req)
		}
		if !ok {
			return "", nil
		}
		if err := checkRequest(req); err != nil {
			return nil, err
		}
		return formatRequest(req), nil
	case "deadline":
		at, ok := d.NextDeadline()
		if !ok {
			return "", nil
		}
		return formatTime(at), nil
	case "state":
		oldest := "-"
		if s, ok := oldestPendingSeq(d); ok {
			oldest = strconv.FormatUint(s, 10)
		}
		return fmt.Sprintf("pending=%d inflight=%v oldest=%s", d.Pending(), d.inFlight, oldest), nil
	default:
		return nil, fmt.Errorf("unknown command %q", f[0])
	}
}

func parseEvent(args []string) (Event, error) {
	var ev Event
	var kind bool
	for _, arg := range args {
		k, v, _ := strings.Cut(arg, "=")
		switch k {
		case "full", "eds":
			ev.Full = k == "full"
			kind = true
		case "seq":
			s, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return ev, err
			}
			ev.Seq = s
		case "reason":
			ev.Reason = v
		case "start":
			s, err := scriptTime(v)
			if err != nil {
				return ev, err
			}
			ev.Start = s
		case "key":
			key, err := parseKey(v)
			if err != nil {
				return ev, err
			}
			ev.ConfigKeys = append(ev.ConfigKeys, key)
		default:
			return ev, fmt.Errorf("unknown event field %q", k)
		}
	}
	if !kind {
		return ev, fmt.Errorf("event needs full or eds")
	}
	return ev, nil
}

func parseKey(s string) (ConfigKey, error) {
	s, cluster, _ := strings.Cut(s, "@")
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return ConfigKey{}, fmt.Errorf("key %q is not Kind/namespace/name[@cluster]", s)
	}
	return ConfigKey{Kind: parts[0], Namespace: parts[1], Name: parts[2], Cluster: cluster}, nil
}

func scriptTime(s string) (time.Time, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return time.Time{}, err
	}
	return epoch.Add(d), nil
}

func formatTime(t time.Time) string { return t.Sub(epoch).String() }

// checkRequest verifies the invariants every request must satisfy.
func checkRequest(r *Request) error {
	if r.Merged == 0 || r.Merged != len(r.Seqs) {
		return fmt.Errorf("merged %d with %d seqs", r.Merged, len(r.Seqs))
	}
	if !slices.IsSorted(r.Seqs) {
		return fmt.Errorf("seqs not sorted: %v", r.Seqs)
	}
	if r.FirstSeq != r.Seqs[0] || r.ThroughSeq != r.Seqs[len(r.Seqs)-1] {
		return fmt.Errorf("first/through %d/%d with seqs %v", r.FirstSeq, r.ThroughSeq, r.Seqs)
	}
	total := 0
	for _, n := range r.Reasons {
		total += n
	}
	if total != r.Merged {
		return fmt.Errorf("reasons count %d events, merged %d", total, r.Merged)
	}
	for i := 1; i < len(r.ConfigKeys); i++ {
		if r.ConfigKeys[i-1].Compare(r.ConfigKeys[i]) >= 0 {
			return fmt.Errorf("keys not sorted and unique: %v", r.ConfigKeys)
		}
	}
	return nil
}

func formatRequest(r *Request) string {
	var b strings.Builder
	b.WriteString("emit seqs=")
	b.WriteString(formatSeqs(r.Seqs))
	if r.Full {
		b.WriteString(" full")
	} else {
		b.WriteString(" eds")
	}
	if len(r.ConfigKeys) > 0 {
		keys := make([]string, len(r.ConfigKeys))
		for i, k := range r.ConfigKeys {
			keys[i] = k.String()
		}
		b.WriteString(" keys=" + strings.Join(keys, ","))
	}
	var reasons []string
	for _, k := range slices.Sorted(maps.Keys(r.Reasons)) {
		reasons = append(reasons, fmt.Sprintf("%s:%d", k, r.Reasons[k]))
	}
	b.WriteString(" reasons=" + strings.Join(reasons, ","))
	b.WriteString(" start=" + formatTime(r.Start))
	b.WriteString(" added=" + formatTime(r.FirstAdded))
	return b.String()
}

// formatSeqs prints sorted seqs as ranges: 1-3,5.
func formatSeqs(seqs []uint64) string {
	var parts []string
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.FormatUint(seqs[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", seqs[i], seqs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
