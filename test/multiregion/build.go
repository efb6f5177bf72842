package multiregion

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// binaryPackages are the commands the harness runs, by short name.
var binaryPackages = map[string]string{
	"regional-limiter": "github.com/quotaplatform/quota/cmd/regional-limiter",
	"reconciler":       "github.com/quotaplatform/quota/cmd/reconciler",
	"weighted-api":     "github.com/quotaplatform/quota/examples/weighted-api",
}

// builds caches the binaries built by this test binary: each command is
// built once, into one temporary directory, and reused by every cluster.
// It holds build artefacts only, never cluster state. RemoveBuilds deletes
// the directory (call it from TestMain).
var builds struct {
	mu   sync.Mutex
	dir  string
	done map[string]buildResult
}

type buildResult struct {
	path string
	err  error
}

// binary returns the path of the named command, building it on first use.
func binary(name string) (string, error) {
	pkg, ok := binaryPackages[name]
	if !ok {
		return "", fmt.Errorf("multiregion: unknown binary %q", name)
	}
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if r, ok := builds.done[name]; ok {
		return r.path, r.err
	}
	if builds.done == nil {
		builds.done = make(map[string]buildResult)
	}
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "quota-multiregion-bin-")
		if err != nil {
			return "", fmt.Errorf("multiregion: binary dir: %w", err)
		}
		builds.dir = d
	}
	out := filepath.Join(builds.dir, name)
	cmd := exec.Command(goTool(), "build", "-o", out, pkg)
	cmd.Dir = moduleRoot()
	b, err := cmd.CombinedOutput()
	r := buildResult{path: out}
	if err != nil {
		r = buildResult{err: fmt.Errorf("multiregion: go build %s: %w\n%s", pkg, err, strings.TrimSpace(string(b)))}
	}
	builds.done[name] = r
	return r.path, r.err
}

// UseBinaries makes the named commands (regional-limiter, reconciler,
// weighted-api) come from dir, built there beforehand, instead of being
// built on first use: a program that builds every binary in one go build
// (a fleet, a CI stage) links them in parallel and once. Each name must be
// an executable file in dir.
func UseBinaries(dir string, names ...string) error {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.done == nil {
		builds.done = make(map[string]buildResult)
	}
	for _, name := range names {
		if _, ok := binaryPackages[name]; !ok {
			return fmt.Errorf("multiregion: unknown binary %q", name)
		}
		p, err := filepath.Abs(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("multiregion: binary %s: %w", name, err)
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("multiregion: %s is not an executable file (build %s there first)", p, binaryPackages[name])
		}
		builds.done[name] = buildResult{path: p}
	}
	return nil
}

// RemoveBuilds deletes the binaries built by this test binary.
func RemoveBuilds() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
		builds.dir, builds.done = "", nil
	}
}

// goTool finds the go command: $GOROOT/bin/go when set, else PATH, else
// /usr/local/go/bin/go.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// moduleRoot is the directory holding go.mod, found upward from the working
// directory (go test runs in the package directory).
func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if fileExists(filepath.Join(d, "go.mod")) {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
