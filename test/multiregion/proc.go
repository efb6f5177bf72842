package multiregion

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process with its output in a log file. The child dies
// with the test binary (Pdeathsig), so a crashed test leaves nothing behind.
type proc struct {
	name string
	path string
	args []string
	env  []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd     // guarded by mu; nil when not running
	done chan struct{} // closed when cmd has exited; guarded by mu
	err  error         // exit status of the last run; guarded by mu
}

func newProc(name, path, logDir string, args, env []string) *proc {
	return &proc{name: name, path: path, args: args, env: env, log: filepath.Join(logDir, name+".log")}
}

// start runs the process; its output is appended to the log file.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("multiregion: %s already running", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("multiregion: %s log: %w", p.name, err)
	}
	fmt.Fprintf(f, "=== %s start %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("multiregion: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		if p.cmd == cmd {
			p.cmd = nil
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the process is up.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// exited returns an error when the process is not running, naming its exit
// status, for readiness polls.
func (p *proc) exited() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	return fmt.Errorf("multiregion: %s is not running (exit: %v); log:\n%s", p.name, p.err, p.tail(40))
}

// signal sends sig and waits up to timeout for the exit; on timeout it
// kills the process.
func (p *proc) signal(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("multiregion: %s did not exit within %v of %v; killed", p.name, timeout, sig)
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() { _ = p.signal(syscall.SIGKILL, 10*time.Second) }

// stop asks the process to exit (SIGTERM) and waits, killing it after
// timeout.
func (p *proc) stop(timeout time.Duration) error { return p.signal(syscall.SIGTERM, timeout) }

// exitErr is the exit status of the last run, nil for a clean exit.
func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee
	}
	return p.err
}

// tail returns the last n lines of the log.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// execOutput runs a short command and returns its combined output.
func execOutput(name string, args ...string) (string, error) {
	b, err := exec.Command(name, args...).CombinedOutput()
	return string(b), err
}
