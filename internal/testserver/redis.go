package testserver

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var lookPath = exec.LookPath

// Redis is a private redis-server process.
type Redis struct {
	Addr   string // host:port
	cmd    *exec.Cmd
	exited chan error // cmd.Wait's result, once it has exited
	dir    string
	args   []string
}

// RedisOptions adjusts StartRedis.
type RedisOptions struct {
	// Cluster starts the server with cluster mode on and assigns it every
	// slot, making a one-node Redis Cluster.
	Cluster bool
	// Port, when non-zero, is used instead of a free one (to restart on the
	// same address).
	Port int
}

// StartRedis starts redis-server on a free loopback port, with no
// persistence, and stops it when the test ends.
func StartRedis(t testing.TB) *Redis { return StartRedisWith(t, RedisOptions{}) }

// StartRedisWith is StartRedis with options.
func StartRedisWith(t testing.TB, o RedisOptions) *Redis {
	t.Helper()
	bin := RequireBinary(t, "redis-server", "redis-server")
	port := o.Port
	if port == 0 {
		port = FreePort(t)
	}
	dir := t.TempDir()
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(dir, "redis.log")}
	if o.Cluster {
		// The bus port would default to port+10000, which lies in the
		// ephemeral range where another process may hold it; draw it too.
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(FreePort(t)))
	}
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, args: append([]string{bin}, args...)}
	r.start(t)
	t.Cleanup(r.Stop)
	if o.Cluster {
		if _, err := r.Do("CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
			t.Fatalf("testserver: assign cluster slots: %v", err)
		}
		WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			info, err := r.Do("CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("cluster not ready: %q", info)
			}
			return nil
		})
	}
	return r
}

func (r *Redis) start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(r.args[0], r.args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testserver: start redis-server: %v", err)
	}
	r.cmd = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	r.exited = exited
	WaitFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("testserver: redis-server exited at start (%v); its log:\n%s", err, r.LogTail())
		default:
		}
		_, err := r.Do("PING")
		return err
	})
}

// Stop kills the server. It is safe to call more than once.
func (r *Redis) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

// Restart starts the server again on the same address (empty: nothing is
// persisted).
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	r.Stop()
	r.start(t)
}

// LogTail returns the server's log, for failure messages.
func (r *Redis) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
	return string(b)
}

// Do sends one command over a fresh connection and returns the reply as
// text. It is for test setup and checks, not for speed.
func (r *Redis) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(br, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, n)
		for i := 0; i < n; i++ {
			p, err := readReply(br)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
