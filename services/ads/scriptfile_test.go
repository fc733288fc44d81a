package ads

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the expected output of testdata/*.txt script tests")

// A script file is a list of cases in the style of etcd-io/raft's
// interaction tests (cockroachdb/datadriven):
//
//	# comments and blank lines, kept as they are
//	command arg key=value key="quoted value"
//	----
//	output, one or more lines, never blank
//
// A case's output ends at the first blank line or at the end of the file.
// With -update the outputs are rewritten from what the commands print.

// scriptCase is one command of a script file and the output it expects.
type scriptCase struct {
	pre  []string // comment and blank lines before the command
	line int      // 1-based line of the command
	cmd  string
	args []scriptArg
	want []string
}

// scriptArg is one argument: key=value, or a bare word (key only).
type scriptArg struct {
	key, val string
	bare     bool
}

// parseScript reads a script file. tail is what follows the last case
// (comments and blank lines).
func parseScript(path string) (cases []*scriptCase, tail []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		c := &scriptCase{pre: pre, line: i + 1}
		pre = nil
		if c.cmd, c.args, err = parseCommand(l); err != nil {
			return nil, nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			return nil, nil, fmt.Errorf("%s:%d: command without a ---- line after it", path, i+1)
		}
		i += 2
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			c.want = append(c.want, lines[i])
		}
		i-- // the blank line (or the end) is read again as a prefix line
		cases = append(cases, c)
	}
	return cases, pre, nil
}

// parseCommand splits a command line into words; a value may be quoted.
func parseCommand(l string) (string, []scriptArg, error) {
	var words []string
	var cur strings.Builder
	inQuote, any := false, false
	for _, r := range l {
		switch {
		case r == '"':
			inQuote, any = !inQuote, true
		case r == ' ' && !inQuote:
			if any {
				words = append(words, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteRune(r)
			any = true
		}
	}
	if inQuote {
		return "", nil, fmt.Errorf("unterminated quote in %q", l)
	}
	if any {
		words = append(words, cur.String())
	}
	var args []scriptArg
	for _, w := range words[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			args = append(args, scriptArg{key: k, val: v})
		} else {
			args = append(args, scriptArg{key: w, bare: true})
		}
	}
	return words[0], args, nil
}

// runScript runs every case of the file at path through run, which returns
// the case's output lines, and compares (or with -update rewrites) them.
func runScript(t *testing.T, path string, run func(*scriptCase) []string) {
	t.Helper()
	cases, tail, err := parseScript(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cases {
		got := run(c)
		if len(got) == 0 {
			got = []string{"ok"}
		}
		for i, l := range got {
			if strings.TrimSpace(l) == "" {
				got[i] = "."
			}
		}
		if !*update {
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("%s:%d: %s (-want +got):\n%s", path, c.line, c.cmd, diff)
			}
		}
		out = append(out, c.pre...)
		out = append(out, commandLine(c), "----")
		out = append(out, got...)
	}
	out = append(out, tail...)
	if *update {
		if err := os.WriteFile(path, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func commandLine(c *scriptCase) string {
	w := []string{c.cmd}
	for _, a := range c.args {
		switch {
		case a.bare:
			w = append(w, a.key)
		case a.val == "" || strings.ContainsAny(a.val, " \""):
			w = append(w, a.key+"="+`"`+a.val+`"`)
		default:
			w = append(w, a.key+"="+a.val)
		}
	}
	return strings.Join(w, " ")
}
