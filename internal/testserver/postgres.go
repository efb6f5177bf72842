package testserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPostgresURL is the machine's Postgres that NewDatabase creates its
// databases on, unless env QUOTA_TEST_POSTGRES names another server.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// NewDatabase creates a fresh, uniquely named database on the Postgres named
// by env QUOTA_TEST_POSTGRES (default DefaultPostgresURL), returns its URL,
// and drops it when the test ends. It never touches a database it did not
// create.
func NewDatabase(t testing.TB) string {
	t.Helper()
	base := os.Getenv("QUOTA_TEST_POSTGRES")
	if base == "" {
		base = DefaultPostgresURL
	}
	return createDatabase(t, base)
}

// NewDatabaseFrom is NewDatabase with the new database a copy of the
// template database named template, which build fills (given its URL) the
// first time any test on the server asks for it. Copying a template is much
// cheaper than building the same schema again: a migrated ledger takes
// 0.7-1.0 s to migrate and about 0.3 s to copy. The name must change whenever
// what build makes does (callers put a hash of their schema in it): a
// template, once built, is kept on the server for every later run.
func NewDatabaseFrom(t testing.TB, template string, build func(ctx context.Context, url string) error) string {
	t.Helper()
	base := os.Getenv("QUOTA_TEST_POSTGRES")
	if base == "" {
		base = DefaultPostgresURL
	}
	if err := ensureTemplate(base, template, build); err != nil {
		t.Fatalf("testserver: template database %s: %v", template, err)
	}
	return createDatabaseFrom(t, base, template)
}

// ensureTemplate builds the template database under another name and
// renames it when built, so that no test ever copies a half-built one; an
// advisory lock on the server lets one process build it while the others
// (test binaries run in parallel) wait. Connections to the template are
// then refused: CREATE DATABASE cannot copy a database someone is in.
func ensureTemplate(baseURL, template string, build func(ctx context.Context, url string) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return fmt.Errorf("connect to postgres (set QUOTA_TEST_POSTGRES to a reachable server): %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", "quota-template:"+template); err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer func() {
		// The session's end releases the lock too.
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock(hashtext($1))", "quota-template:"+template)
	}()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", template).Scan(&exists); err != nil {
		return fmt.Errorf("look up: %w", err)
	}
	if exists {
		return nil
	}
	building := template + "_building"
	id := pgx.Identifier{building}.Sanitize()
	// A process killed while building leaves this name behind.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop a half-built %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return fmt.Errorf("parse postgres URL: %w", err)
	}
	u.Path = "/" + building
	if err := build(ctx, u.String()); err != nil {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)")
		return fmt.Errorf("build: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+id+" RENAME TO "+pgx.Identifier{template}.Sanitize()); err != nil {
		return fmt.Errorf("rename %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{template}.Sanitize()+" WITH ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("close to connections: %w", err)
	}
	return nil
}

// createDatabase creates a database on the server of baseURL and schedules
// its drop.
func createDatabase(t testing.TB, baseURL string) string {
	t.Helper()
	return createDatabaseFrom(t, baseURL, "")
}

// createDatabaseFrom is createDatabase with the new database a copy of
// template (Postgres' template1 when it is empty).
func createDatabaseFrom(t testing.TB, baseURL, template string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		t.Fatalf("testserver: connect to postgres (set QUOTA_TEST_POSTGRES to a reachable server): %v", err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "quota_test_" + hex.EncodeToString(b[:])
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		create += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, create); err != nil {
		t.Fatalf("testserver: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, baseURL)
		if err != nil {
			t.Logf("testserver: drop database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Logf("testserver: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(baseURL)
	if err != nil {
		t.Fatalf("testserver: parse postgres URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// PostgresBinDir holds initdb and pg_ctl for StartPostgres.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

// Postgres is a private Postgres server (initdb + pg_ctl) in a temporary
// directory on a free loopback port. Stop and Start let a test take it away
// and bring it back on the same port with its data intact.
type Postgres struct {
	// URL is the server's "postgres" database.
	URL string
	// Port is the TCP port on 127.0.0.1.
	Port int

	dir     string // owned by the server's OS user
	data    string
	asUser  []string // command prefix to run as the postgres user, or empty
	running bool
}

// StartPostgres initialises and starts a private Postgres server and stops it
// and removes its files when the test ends. Postgres refuses to run as root,
// so when the test runs as root the server runs as the OS user "postgres"
// (through runuser). A missing binary fails the test naming the Debian
// package "postgresql".
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(PostgresBinDir, b)); err != nil {
			t.Fatalf("testserver: %s not found in %s: install the Debian package %q (apt-get install -y postgresql)", b, PostgresBinDir, "postgresql")
		}
	}
	dir, err := os.MkdirTemp("", "quota-pg-")
	if err != nil {
		t.Fatalf("testserver: postgres temp dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p := &Postgres{dir: dir, data: filepath.Join(dir, "data"), Port: FreePort(t)}
	if os.Geteuid() == 0 {
		RequireBinary(t, "runuser", "util-linux")
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatalf("testserver: chmod %s: %v", dir, err)
		}
		if out, err := exec.Command("chown", "postgres:", dir).CombinedOutput(); err != nil {
			t.Fatalf("testserver: chown %s to postgres (is the postgres user missing? install the Debian package \"postgresql\"): %v: %s", dir, err, out)
		}
		p.asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
	p.run(t, filepath.Join(PostgresBinDir, "initdb"), "-D", p.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	p.Start(t)
	t.Cleanup(p.Stop)
	return p
}

// NewDatabase creates a fresh database on this server and returns its URL.
// It is dropped when the test ends if the server is up then.
func (p *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	return createDatabase(t, p.URL)
}

func (p *Postgres) run(t testing.TB, args ...string) {
	t.Helper()
	full := append(append([]string{}, p.asUser...), args...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Dir = p.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testserver: %v: %v\n%s\nlog:\n%s", args, err, out, p.LogTail())
	}
}

// Start starts the server (again) on the same port and data directory and
// waits until it accepts connections.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	if p.running {
		return
	}
	opts := "-c listen_addresses=127.0.0.1 -p " + strconv.Itoa(p.Port) + " -k " + p.dir +
		" -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50"
	p.run(t, filepath.Join(PostgresBinDir, "pg_ctl"), "-D", p.data, "-l", filepath.Join(p.dir, "postgres.log"), "-o", opts, "-w", "-t", "60", "start")
	p.running = true
	WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, p.URL)
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
}

// Stop stops the server at once (pg_ctl -m immediate: open connections
// break, as in a crash). It is safe to call twice.
func (p *Postgres) Stop() {
	if !p.running {
		return
	}
	full := append(append([]string{}, p.asUser...), filepath.Join(PostgresBinDir, "pg_ctl"), "-D", p.data, "-m", "immediate", "-w", "stop")
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Dir = p.dir
	_ = cmd.Run()
	p.running = false
}

// LogTail returns the server's log, for failure messages.
func (p *Postgres) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
