package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/test/multiregion"
)

// TestFleet runs the fleet as make fleet does (its binaries built first,
// one go build), reads the guide it prints, and checks what the guide
// promises: each region's limiter answers a check of the demo key with the
// plan's limit; the regions together admit about the demo plan's burst of
// the burst key, not each region its own; the billing API answers the
// usage query with what the checks spent; /metrics answers. Then it stops
// the fleet with SIGINT, as Ctrl-C in a terminal does (to the whole
// foreground process group) and as kill -INT does (to the fleet alone),
// and checks that no process the fleet started is left: every process
// below this test, Postgres included (pg_ctl detaches it, and this test
// process adopts orphans as a child subreaper), is gone.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet: skipped under -short (starts three regions of real processes)")
	}
	becomeSubreaper(t)
	bin := buildFleet(t)
	for _, tc := range []struct {
		name string
		// group: the signal goes to the fleet's process group, as a
		// terminal sends Ctrl-C; else to the fleet alone.
		group bool
	}{
		{"ctrl-c to the process group", true},
		{"sigint to the fleet alone", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFleetProcess(t, bin)
			g := parseGuide(t, f.guide)
			checkGuide(t, g)

			started := descendants(t, os.Getpid())
			t.Cleanup(func() {
				// A failed run leaves nothing behind either.
				for _, p := range stillRunning(started) {
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
				}
				reapZombies()
			})
			wantRunning(t, started, map[string]int{
				"fleet": 1, "nats-server": 3, "redis-server": 3,
				"regional-limite": 6, "reconciler": 1, "postgres": 1, // comm is cut at 15 bytes
			})
			target := f.cmd.Process.Pid
			if tc.group {
				target = -target // the process group the fleet leads
			}
			if err := syscall.Kill(target, syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			select {
			case <-f.exited:
			case <-time.After(2 * time.Minute):
				t.Fatalf("fleet did not exit within 2 min of SIGINT; stderr:\n%s", f.stderr.String())
			}
			if err := f.waitErr; err != nil {
				t.Errorf("fleet exited with %v after SIGINT, want 0; stderr:\n%s", err, f.stderr.String())
			}
			testserver.WaitFor(t, 30*time.Second, 50*time.Millisecond, func() error {
				reapZombies()
				if left := stillRunning(started); len(left) > 0 {
					return fmt.Errorf("left running after the fleet exited: %v", left)
				}
				if left := descendants(t, os.Getpid()); len(left) > 0 {
					return fmt.Errorf("processes below the test after the fleet exited: %v", left)
				}
				return nil
			})
			if _, err := os.Stat(g.logs); !os.IsNotExist(err) {
				t.Errorf("the fleet's directory %s is still there (stat: %v)", g.logs, err)
			}
		})
	}
}

// buildFleet builds the fleet and the daemons into a temporary directory in
// one go build, as make fleet does.
func buildFleet(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	// go test puts its own go first on the test's PATH.
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/fleet", "./cmd/regional-limiter", "./cmd/reconciler")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

// fleetProcess is a running fleet command.
type fleetProcess struct {
	cmd     *exec.Cmd
	guide   []string // stdout up to readyLine
	stderr  *testserver.LogBuffer
	exited  chan struct{} // closed when cmd has exited
	waitErr error         // set before exited is closed
}

// startFleetProcess starts the fleet in a process group of its own (a
// terminal's foreground job) and waits until it has printed its guide.
func startFleetProcess(t *testing.T, bin string) *fleetProcess {
	t.Helper()
	f := &fleetProcess{stderr: &testserver.LogBuffer{}, exited: make(chan struct{})}
	f.cmd = exec.Command(filepath.Join(bin, "fleet"), "-bin", bin)
	f.cmd.Stderr = f.stderr
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64) // the guide is about 30 lines; the reader never blocks on a slow test
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		f.waitErr = f.cmd.Wait()
		close(f.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-f.exited:
		default:
			_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
			<-f.exited
		}
	})
	deadline := time.After(4 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				<-f.exited
				t.Fatalf("fleet exited before it was ready (%v); stdout:\n%s\nstderr:\n%s", f.waitErr, strings.Join(f.guide, "\n"), f.stderr.String())
			}
			f.guide = append(f.guide, l)
			if l == readyLine {
				go func() {
					for range lines {
					}
				}()
				return f
			}
		case <-deadline:
			t.Fatalf("fleet not ready within 4 min; stdout:\n%s\nstderr:\n%s", strings.Join(f.guide, "\n"), f.stderr.String())
		}
	}
}

// guide is what the test reads from the fleet's printed guide.
type guide struct {
	limiters     map[string][]string // region → limiter base URLs, in order
	metrics      string
	usageURL     string
	billingToken string
	logs         string
}

var (
	limiterLine = regexp.MustCompile(`^  limiter (\w+)/\d+ +(http://\S+)`)
	metricsLine = regexp.MustCompile(`^metrics +(http://\S+/metrics)`)
	logsLine    = regexp.MustCompile(`^logs +(\S+)`)
	usageLine   = regexp.MustCompile(`^curl -s -H 'Authorization: Bearer (\S+)' '(http://[^']+/v1/usage\?[^']+)'`)
)

func parseGuide(t *testing.T, lines []string) guide {
	t.Helper()
	g := guide{limiters: map[string][]string{}}
	for _, l := range lines {
		if m := limiterLine.FindStringSubmatch(l); m != nil {
			g.limiters[m[1]] = append(g.limiters[m[1]], m[2])
		}
		if m := metricsLine.FindStringSubmatch(l); m != nil {
			g.metrics = m[1]
		}
		if m := logsLine.FindStringSubmatch(l); m != nil {
			g.logs = m[1]
		}
		if m := usageLine.FindStringSubmatch(l); m != nil {
			g.billingToken, g.usageURL = m[1], m[2]
		}
	}
	regions := multiregion.DefaultSpec().Regions
	for _, r := range regions {
		if len(g.limiters[r]) != 2 {
			t.Fatalf("guide lists %d limiters of region %s, want 2:\n%s", len(g.limiters[r]), r, strings.Join(lines, "\n"))
		}
	}
	if g.metrics == "" || g.usageURL == "" || g.logs == "" {
		t.Fatalf("guide lacks the metrics URL, the usage query or the logs directory:\n%s", strings.Join(lines, "\n"))
	}
	return g
}

// decision is the part of a check's answer the test reads.
type decision struct {
	Allowed  bool  `json:"allowed"`
	Limit    int64 `json:"limit"`
	Degraded bool  `json:"degraded"`
}

// checkGuide does what the guide's lines do and checks the answers.
func checkGuide(t *testing.T, g guide) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	regions := multiregion.DefaultSpec().Regions

	// One check of the demo key in each region.
	for _, r := range regions {
		d := allow(t, client, g.limiters[r][0], demoKey)
		if !d.Allowed || d.Limit != demoBurst {
			t.Errorf("region %s: first check of %s: %+v, want allowed with limit %d", r, demoKey, d, demoBurst)
		}
	}

	// The burst key, back to back in each region: one global limit.
	began := time.Now()
	total, degraded := 0, false
	for _, r := range regions {
		allowed := 0
		for range burstPerRegion {
			d := allow(t, client, g.limiters[r][0], burstKey)
			degraded = degraded || d.Degraded
			if d.Allowed {
				allowed++
			}
		}
		if allowed == 0 {
			t.Errorf("region %s admitted none of %d checks of %s: its share of the limit is unused", r, burstPerRegion, burstKey)
		}
		total += allowed
	}
	elapsed := time.Since(began)
	// Every region's bucket is its share of the one limit; a degraded
	// decision may exceed it by the degraded factor (docs/design.md
	// [degraded-share]).
	factor := 1.0
	if degraded {
		spec := multiregion.DefaultSpec()
		factor = spec.DegradedFactor()
	}
	bound := int(factor*(demoBurst+demoRate*elapsed.Seconds())) + 1
	if total > bound || total >= burstPerRegion*len(regions) {
		t.Errorf("the regions admitted %d of %d checks of %s in %v: want at most %d (burst %d + rate %d/s, degraded %v), one limit for all regions",
			total, burstPerRegion*len(regions), burstKey, elapsed.Round(time.Millisecond), bound, demoBurst, demoRate, degraded)
	}
	t.Logf("burst: the regions admitted %d of %d checks in %v", total, burstPerRegion*len(regions), elapsed.Round(time.Millisecond))

	// The ledger: the billing API answers what the three checks of the
	// demo key spent, once their reports land.
	testserver.WaitFor(t, 30*time.Second, 200*time.Millisecond, func() error {
		var u struct {
			Totals struct {
				Net     int64 `json:"net"`
				Allowed int64 `json:"allowed"`
			} `json:"totals"`
		}
		if err := getJSON(client, g.usageURL, g.billingToken, &u); err != nil {
			return err
		}
		if u.Totals.Net != int64(len(regions)) || u.Totals.Allowed != int64(len(regions)) {
			return fmt.Errorf("usage of %s: net %d, allowed %d; want %d each", demoKey, u.Totals.Net, u.Totals.Allowed, len(regions))
		}
		return nil
	})

	resp, err := client.Get(g.metrics)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "quota_config_version") {
		t.Errorf("GET %s: %s, want 200 with quota_config_version", g.metrics, resp.Status)
	}
}

func allow(t *testing.T, client *http.Client, base, key string) decision {
	t.Helper()
	resp, err := client.Post(base+"/v1/allow", "application/json", strings.NewReader(`{"key":"`+key+`","cost":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d decision
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatalf("POST %s/v1/allow: %s: %v", base, resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK { // a denial is a result, answered 200
		t.Errorf("POST %s/v1/allow: %s (allowed=%v), want 200", base, resp.Status, d.Allowed)
	}
	return d
}

func getJSON(client *http.Client, u, token string, v any) error {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s %s", u, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// process is one entry of /proc: a pid is reused, so a process is its pid
// and its start time.
type process struct {
	pid, ppid int
	start     uint64 // clock ticks after boot
	comm      string
	zombie    bool
}

func (p process) String() string { return fmt.Sprintf("%s[%d]", p.comm, p.pid) }

// readProcesses reads every process's stat.
func readProcesses() map[int]process {
	out := map[int]process{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited while listed
		}
		// pid (comm) state ppid … with starttime the 22nd field; comm may
		// hold spaces and parentheses, so split after its last ')'.
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		f := strings.Fields(s[closing+1:])
		if len(f) < 20 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		start, _ := strconv.ParseUint(f[19], 10, 64)
		out[pid] = process{pid: pid, ppid: ppid, start: start, comm: s[open+1 : closing], zombie: f[0] == "Z"}
	}
	return out
}

// descendants lists the live (not zombie) processes below pid.
func descendants(t *testing.T, pid int) []process {
	t.Helper()
	all := readProcesses()
	children := map[int][]int{}
	for _, p := range all {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var out []process
	queue := append([]int(nil), children[pid]...)
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if p := all[c]; !p.zombie {
			out = append(out, p)
		}
		queue = append(queue, children[c]...)
	}
	return out
}

// stillRunning returns the processes of ps that are still alive, the same
// pid with the same start time, not a zombie.
func stillRunning(ps []process) []process {
	all := readProcesses()
	var out []process
	for _, p := range ps {
		if q, ok := all[p.pid]; ok && q.start == p.start && !q.zombie {
			out = append(out, p)
		}
	}
	return out
}

// wantRunning fails unless ps holds at least the given number of processes
// of each command name: the process listing sees what the fleet started.
func wantRunning(t *testing.T, ps []process, want map[string]int) {
	t.Helper()
	got := map[string]int{}
	for _, p := range ps {
		got[p.comm]++
	}
	for comm, n := range want {
		if got[comm] < n {
			t.Fatalf("%d processes %q below the test, want at least %d; all: %v", got[comm], comm, n, ps)
		}
	}
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER (linux/prctl.h).
const prSetChildSubreaper = 36

// becomeSubreaper makes this process adopt its orphaned descendants, so
// that a process a child detached (pg_ctl's Postgres) stays below the test
// and is seen by descendants.
func becomeSubreaper(t *testing.T) {
	t.Helper()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", errno)
	}
}

// reapZombies waits for every exited child, the adopted ones included;
// called once the fleet's own Wait has returned.
func reapZombies() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
