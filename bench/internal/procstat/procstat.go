// Package procstat reads what the harness measures about processes from
// Linux's /proc: CPU time (utime + stime), page faults, resident memory
// (VmRSS) and the process tree.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime: 100 on every Linux
// architecture Go supports.
const clockTick = 100

// CPU returns the user plus system CPU time a process has used.
func CPU(pid int) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	// Fields after the command: state(3) ppid(4) ... utime(14) stime(15).
	utime, err1 := strconv.ParseUint(f[14-3], 10, 64)
	stime, err2 := strconv.ParseUint(f[15-3], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat times: %v %v", pid, err1, err2)
	}
	return time.Duration(utime+stime) * time.Second / clockTick, nil
}

// MinorFaults returns a process's minor page faults (minflt): each first
// touch of a page of fresh memory is one.
func MinorFaults(pid int) (uint64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(f[10-3], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat minflt: %w", pid, err)
	}
	return n, nil
}

// PPID returns the parent of a process.
func PPID(pid int) (int, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[4-3])
}

// statFields returns /proc/<pid>/stat from field 3 (state) on; the command
// (field 2) may hold spaces and parentheses, so it is cut at the last ')'.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	return f, nil
}

// RSS returns a process's resident set size in bytes (VmRSS).
func RSS(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS %q", pid, v)
			}
			kb, err := strconv.ParseUint(f[0], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// Tree returns pid and every live descendant of it.
func Tree(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := make(map[int][]int)
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		pp, err := PPID(p)
		if err != nil {
			continue // gone meanwhile
		}
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out, nil
}

// TreeCPU sums the CPU time of processes, skipping any that has exited
// (its time is lost: read before stopping what you measure).
func TreeCPU(pids []int) time.Duration {
	var total time.Duration
	for _, p := range pids {
		if c, err := CPU(p); err == nil {
			total += c
		}
	}
	return total
}
