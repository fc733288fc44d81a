package k8stest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a child gets to exit after SIGTERM before SIGKILL.
const stopGrace = 15 * time.Second

// process is one running child (etcd or kube-apiserver).
type process struct {
	// Set at start.
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File

	// done is closed by the wait goroutine once the child has exited and
	// waitErr is set; waitErr is only read after done is closed.
	done    chan struct{}
	waitErr error
}

// startProcess starts bin with args, stdout and stderr going to logPath.
// The child is killed if the test binary dies (see setDeathSignal). One
// goroutine per child waits for it; it ends when the child exits, which
// stop guarantees.
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	// Append: a restarted kube-apiserver keeps its earlier output.
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// A clean environment: nothing inherited (proxy settings, KUBECONFIG,
	// ETCD_* variables) can steer the child off loopback.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setDeathSignal(cmd.SysProcAttr)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: logFile, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the child has exited, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM, waits up to stopGrace, then SIGKILLs and waits for
// the exit. It returns an error only if the child had to be killed.
func (p *process) stop() error {
	if done, _ := p.exited(); done {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s did not exit %v after SIGTERM; killed", p.name, stopGrace)
}

// logTail returns the last n lines of the child's output.
func (p *process) logTail(n int) string { return tailFile(p.logPath, n) }

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// errPortInUse marks a start that failed because a chosen port was taken
// between picking it and the child binding it; the caller retries.
var errPortInUse = errors.New("port in use")

// exitError describes a child that exited before it became ready.
func (p *process) exitError(waitErr error) error {
	tail := p.logTail(40)
	err := fmt.Errorf("%s exited before ready (%v); log %s ends:\n%s", p.name, waitErr, p.logPath, tail)
	if strings.Contains(tail, "address already in use") {
		return fmt.Errorf("%w: %w", errPortInUse, err)
	}
	return err
}
