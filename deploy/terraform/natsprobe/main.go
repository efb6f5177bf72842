// Command natsprobe is the NATS half of the apply test's credential check (make
// tf-apply-test): given a region's NATS configuration, its servers' environment and two limiter
// pods' credentials, all as the API server holds them (applycheck natscreds writes them), it
// runs a real nats-server on that configuration on free loopback ports and shows, as pod A,
// that its own usage and gossip subjects take its publishes while pod B's subjects and another
// region's refuse them (the server's permissions violation, observed by the client), that
// pod B's credential publishes on B's own subject, and that A's password does not log in as B.
// It prints each publish with its outcome and the figure, and exits non-zero when an outcome
// differs from the one expected.
//
//	natsprobe -dir DIR [-nats-server nats-server]
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/internal/natsrole"
)

// process is one entry of processes.json (applycheck's natsProcess).
type process struct {
	Pod      string `json:"pod"`
	Region   string `json:"region"`
	Process  string `json:"process"`
	User     string `json:"user"`
	Secret   string `json:"secret"`
	Password string `json:"password"`
}

func main() {
	dir := flag.String("dir", "", "directory with nats.conf, server-env.json and processes.json (applycheck natscreds)")
	server := flag.String("nats-server", "nats-server", "the nats-server binary")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: natsprobe -dir DIR [-nats-server PATH]")
		os.Exit(2)
	}
	if err := run(*dir, *server); err != nil {
		fmt.Fprintln(os.Stderr, "natsprobe: FAIL:", err)
		os.Exit(1)
	}
}

func run(dir, serverBin string) error {
	var env map[string]string
	var procs []process
	if err := readJSON(filepath.Join(dir, "server-env.json"), &env); err != nil {
		return err
	}
	if err := readJSON(filepath.Join(dir, "processes.json"), &procs); err != nil {
		return err
	}
	if len(procs) != 3 {
		return fmt.Errorf("processes.json: %d processes, want pod A, pod B and one of another region", len(procs))
	}
	a, b, other := procs[0], procs[1], procs[2]
	src, err := os.ReadFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		return err
	}
	conf, clientURL, err := onLoopback(string(src), dir)
	if err != nil {
		return err
	}
	confFile := filepath.Join(dir, "nats-loopback.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		return err
	}
	stop, err := startServer(serverBin, confFile, env, filepath.Join(dir, "nats-server.log"), clientURL)
	if err != nil {
		return err
	}
	defer stop()

	usage := func(p process) string { return "quota.usage." + p.Region + "." + p.Process }
	gossip := func(p process) string { return "quota.gossip." + p.Region + "." + p.Process }
	tests := []struct {
		as      process
		subject string
		allowed bool
	}{
		{a, usage(a), true},
		{a, gossip(a), true},
		{a, usage(b), false},
		{a, gossip(b), false},
		{a, usage(other), false},
		{a, gossip(other), false},
		{b, usage(b), true},
	}
	var errs []error
	refused, foreign, own, published := 0, 0, 0, 0
	for _, tt := range tests {
		err := publish(clientURL, tt.as, tt.subject)
		outcome := "published"
		if err != nil {
			outcome = "refused: " + err.Error()
		}
		fmt.Printf("pod %s (user %s) -> %s: %s\n", tt.as.Pod, tt.as.User, tt.subject, outcome)
		switch {
		case tt.allowed && err != nil:
			errs = append(errs, fmt.Errorf("pod %s on its own subject %s: %v", tt.as.Pod, tt.subject, err))
		case !tt.allowed && err == nil:
			errs = append(errs, fmt.Errorf("pod %s published on another process's subject %s", tt.as.Pod, tt.subject))
		case !tt.allowed && !isPermission(err):
			errs = append(errs, fmt.Errorf("pod %s on %s: %v, not a permissions violation", tt.as.Pod, tt.subject, err))
		}
		if tt.allowed {
			own++
			if err == nil {
				published++
			}
		} else {
			foreign++
			if isPermission(err) {
				refused++
			}
		}
	}

	// A's password is A's alone: as B's user it does not log in.
	stolen := b
	stolen.Password = a.Password
	nc, err := connect(clientURL, stolen, nil)
	switch {
	case err == nil:
		nc.Close()
		errs = append(errs, fmt.Errorf("pod %s's password logged in as %s", a.Pod, b.User))
	case !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization"):
		errs = append(errs, fmt.Errorf("pod %s's password as %s: %v, not an authorization violation", a.Pod, b.User, err))
	default:
		fmt.Printf("pod %s's password as user %s: refused: %v\n", a.Pod, b.User, err)
	}

	fmt.Printf("figure: pod %s's credential: %d of %d publishes on its own process's subjects accepted (with pod %s's on its own), %d of %d on other processes' subjects (pod %s's, region %s's) refused with a permissions violation\n",
		a.Pod, published, own, b.Pod, refused, foreign, b.Pod, other.Region)
	return errors.Join(errs...)
}

// permissionError is a publish the server refused for the user's permissions, as the
// connection's error handler got it.
type permissionError struct{ err error }

func (e permissionError) Error() string { return e.err.Error() }

func isPermission(err error) bool {
	var pe permissionError
	return errors.As(err, &pe)
}

// publish publishes one message on subject as p, on a connection of its own, and reports the
// server's answer: the server sends a publish's permissions violation before the PONG of the
// flush that follows it, so after Flush the connection's last error is the publish's outcome.
func publish(url string, p process, subject string) error {
	violations := make(chan error, 1)
	nc, err := connect(url, p, violations)
	if err != nil {
		return fmt.Errorf("connect as %s: %w", p.User, err)
	}
	defer nc.Close()
	if err := nc.Publish(subject, []byte("{}")); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := nc.LastError(); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			// The error handler gets it too (nats.go queues the callback): wait for it, so that
			// what is shown is what a client's handler sees.
			select {
			case herr := <-violations:
				return permissionError{herr}
			case <-time.After(5 * time.Second):
				return fmt.Errorf("%v, but the error handler was not called", err)
			}
		}
		return err
	}
	return nil
}

func connect(url string, p process, violations chan<- error) (*nats.Conn, error) {
	return nats.Connect(url,
		nats.UserInfo(p.User, p.Password),
		natsrole.Inbox(p.User),
		nats.Name("natsprobe "+p.Pod),
		nats.NoReconnect(),
		nats.Timeout(5*time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if violations != nil {
				select {
				case violations <- err:
				default:
				}
			}
		}),
	)
}

// onLoopback rewrites the deploy's configuration to run here: every listener ("0.0.0.0:<port>":
// client, monitor, cluster, gateway) on a free loopback port, the JetStream store and the pid
// file under dir. Users, permissions and everything else stay as rendered. It fails when a
// listener or path it rewrites is not found (the template changed shape) or TLS is on (the
// apply test deploys without).
func onLoopback(conf, dir string) (string, string, error) {
	if strings.Contains(conf, "tls {") {
		return "", "", errors.New("nats.conf has TLS: natsprobe runs the plain configuration only")
	}
	listeners := regexp.MustCompile(`"0\.0\.0\.0:(\d+)"`)
	var ports []int
	var clientURL string
	var ferr error
	conf = listeners.ReplaceAllStringFunc(conf, func(m string) string {
		port, err := freePort()
		if err != nil {
			ferr = err
			return m
		}
		ports = append(ports, port)
		if m == `"0.0.0.0:4222"` {
			clientURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
		}
		return fmt.Sprintf(`"127.0.0.1:%d"`, port)
	})
	if ferr != nil {
		return "", "", ferr
	}
	if len(ports) != 4 || clientURL == "" {
		return "", "", fmt.Errorf("nats.conf: %d listeners on 0.0.0.0 (want client :4222, monitor, cluster, gateway)", len(ports))
	}
	for key, path := range map[string]string{"store_dir": filepath.Join(dir, "jetstream"), "pid_file": filepath.Join(dir, "nats.pid")} {
		re := regexp.MustCompile(key + `: "[^"]*"`)
		if len(re.FindAllString(conf, -1)) != 1 {
			return "", "", fmt.Errorf("nats.conf: no single %s", key)
		}
		conf = re.ReplaceAllLiteralString(conf, fmt.Sprintf("%s: %q", key, path))
	}
	return conf, clientURL, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startServer starts nats-server on conf with env (the NATS pod's: its password variables) and
// waits until its client port accepts connections; stop ends it.
func startServer(bin, conf string, env map[string]string, logFile, clientURL string) (stop func(), err error) {
	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		log.Close()
	}
	addr := strings.TrimPrefix(clientURL, "nats://")
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-exited:
			log.Close()
			b, _ := os.ReadFile(logFile)
			return nil, fmt.Errorf("nats-server exited (%v) on the deploy's configuration:\n%s", err, b)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("nats-server: client port %s not open within 30 s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readJSON(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}
