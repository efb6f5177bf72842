package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/edge"
)

// setQuotaEnv makes env the only QUOTA_* variables for the rest of the test
// (ff reads the process environment; an empty variable counts as unset).
func setQuotaEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envPrefix+"_") {
			t.Setenv(k, "")
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "limiter.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestParseOptions(t *testing.T) {
	cfgFile := writeConfig(t, "# comment\nregion = eu\n--window = 30s\nlisten = \":9000\"\nadmin-token = fromfile\n")
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, o Options)
		err   bool
	}{
		{"defaults", nil, nil, func(t *testing.T, o Options) {
			if o.Region != "local" || o.Listen != ":8080" || o.DataDir != "./data" || o.Limiter.Window != time.Minute ||
				o.Limiter.StoreTimeout != 5*time.Millisecond || o.Limiter.ProcessEstimate != 1 || o.ProcessID == "" || o.DefaultPlan.Rate != 100 {
				t.Errorf("%+v", o)
			}
		}, false},
		{"env", nil, map[string]string{"QUOTA_ADMIN_TOKEN": "x", "QUOTA_REDIS_CLUSTER": "true", "QUOTA_REDIS": "redis://a:1"},
			func(t *testing.T, o Options) {
				if o.AdminToken != "x" || !o.RedisCluster {
					t.Errorf("%+v", o)
				}
			}, false},
		{"flag beats env beats file", []string{"--config", cfgFile, "--region", "us"}, map[string]string{"QUOTA_REGION": "ap", "QUOTA_WINDOW": "10s"},
			func(t *testing.T, o Options) {
				if o.Region != "us" || o.Limiter.Window != 10*time.Second || o.Listen != ":9000" || o.AdminToken != "fromfile" {
					t.Errorf("%+v", o)
				}
			}, false},
		{"config from env", nil, map[string]string{"QUOTA_CONFIG": cfgFile}, func(t *testing.T, o Options) {
			if o.Region != "eu" {
				t.Errorf("%+v", o)
			}
		}, false},
		{"bad duration env", nil, map[string]string{"QUOTA_WINDOW": "soon"}, nil, true},
		{"zero window", []string{"--window", "0s"}, nil, nil, true},
		{"bad log level", []string{"--log-level", "loud"}, nil, nil, true},
		{"unknown flag", []string{"--nope"}, nil, nil, true},
		{"half default plan", []string{"--default-rate", "0"}, nil, nil, true},
		{"shutdown delay default", nil, nil, func(t *testing.T, o Options) {
			if o.ShutdownDelay != 5*time.Second {
				t.Errorf("--shutdown-delay = %v, want 5s", o.ShutdownDelay)
			}
		}, false},
		{"tokens from env", []string{"--shutdown-delay", "0s"},
			map[string]string{"QUOTA_CHECK_TOKEN": checkA + "," + checkB, "QUOTA_READ_TOKEN": readA},
			func(t *testing.T, o Options) {
				if o.CheckToken != checkA+","+checkB || o.ReadToken != readA || o.ShutdownDelay != 0 {
					t.Errorf("%+v", o)
				}
				if s := fmt.Sprintf("%v %+v %#v", o, o, o); strings.Contains(s, checkA) || strings.Contains(s, readA) {
					t.Errorf("Options print their tokens: %s", s)
				}
			}, false},
		{"negative shutdown delay", []string{"--shutdown-delay", "-1s"}, nil, nil, true},
		{"long shutdown delay", []string{"--shutdown-delay", "6m"}, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setQuotaEnv(t, tt.env)
			o, err := parseOptions(tt.args, io.Discard)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}

const (
	checkA = "check-a-0123456789"
	checkB = "check-b-0123456789"
	readA  = "read-a-0123456789"
)

// With --redis the built-in default plan is off unless --default-rate or
// --default-capacity is given, from any source: ff sets flags from the
// environment and the config file through the FlagSet, so Visit lists
// them as set.
func TestDefaultPlanWithRedis(t *testing.T) {
	const redis = "redis://127.0.0.1:1/0"
	tests := []struct {
		name           string
		args           []string
		env            map[string]string
		file           string
		rate, capacity float64
	}{
		{"in-process store", nil, nil, "", 100, 200},
		{"redis flag", []string{"--redis", redis}, nil, "", 0, 0},
		{"redis from env", nil, map[string]string{"QUOTA_REDIS": redis}, "", 0, 0},
		{"redis from file", nil, nil, "redis = " + redis, 0, 0},
		{"redis, rate flag", []string{"--redis", redis, "--default-rate", "50"}, nil, "", 50, 200},
		{"redis, default value given", []string{"--redis", redis, "--default-rate", "100", "--default-capacity", "200"}, nil, "", 100, 200},
		{"redis, capacity from env", []string{"--redis", redis}, map[string]string{"QUOTA_DEFAULT_CAPACITY": "300"}, "", 100, 300},
		{"redis, both from file", []string{"--redis", redis}, nil, "default-rate = 10\ndefault-capacity = 20", 10, 20},
		{"redis, empty env is unset", []string{"--redis", redis}, map[string]string{"QUOTA_DEFAULT_RATE": ""}, "", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setQuotaEnv(t, tt.env)
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeConfig(t, tt.file+"\n")}, args...)
			}
			o, err := parseOptions(args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if o.DefaultPlan.Rate != tt.rate || o.DefaultPlan.Capacity != tt.capacity {
				t.Fatalf("default plan %v/%v, want %v/%v", o.DefaultPlan.Rate, o.DefaultPlan.Capacity, tt.rate, tt.capacity)
			}
		})
	}
}

// TestPrecedence sets --report-interval from each source in turn: the
// command line beats the environment, which beats the config file, which
// beats the default.
func TestPrecedence(t *testing.T) {
	file := writeConfig(t, "report-interval = 3s\n")
	flagArgs := []string{"--report-interval", "1s"}
	env := map[string]string{"QUOTA_REPORT_INTERVAL": "2s"}
	tests := []struct {
		name       string
		flag       bool
		env        bool
		file       bool
		want       time.Duration
		wantSource string
	}{
		{"default", false, false, false, 5 * time.Second, "default"},
		{"file", false, false, true, 3 * time.Second, "file"},
		{"env", false, true, false, 2 * time.Second, "env"},
		{"env over file", false, true, true, 2 * time.Second, "env"},
		{"flag", true, false, false, time.Second, "flag"},
		{"flag over file", true, false, true, time.Second, "flag"},
		{"flag over env", true, true, false, time.Second, "flag"},
		{"flag over env over file", true, true, true, time.Second, "flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args []string
			if tt.flag {
				args = append(args, flagArgs...)
			}
			if tt.file {
				args = append(args, "--config", file)
			}
			if tt.env {
				setQuotaEnv(t, env)
			} else {
				setQuotaEnv(t, nil)
			}
			o, err := parseOptions(args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if o.Ledger.ReportInterval != tt.want {
				t.Fatalf("--report-interval = %v, want %v (from the %s)", o.Ledger.ReportInterval, tt.want, tt.wantSource)
			}
		})
	}
}

// TestConfigSelection: --config on the command line beats QUOTA_CONFIG, and
// an empty QUOTA_* variable counts as unset.
func TestConfigSelection(t *testing.T) {
	eu := writeConfig(t, "region = eu\n")
	us := writeConfig(t, "region = us\n")
	setQuotaEnv(t, map[string]string{"QUOTA_CONFIG": eu, "QUOTA_REGION": ""})
	o, err := parseOptions([]string{"--config", us}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Config != us || o.Region != "us" {
		t.Fatalf("config %q region %q, want %q us", o.Config, o.Region, us)
	}
}

// TestConfigFileFormat: the `flag = value` lines the file has always had.
func TestConfigFileFormat(t *testing.T) {
	file := writeConfig(t, strings.Join([]string{
		"# a comment line",
		"",
		"   region   =   eu   ",
		"--listen = \":9000\"",
		"-data-dir=/var/lib/quota",
		"admin-token = a#b=c",
		"redis-cluster = true",
		"redis = \"redis://x:1\"",
		"region-weights = eu=0.5,us=0.5",
		"log-level = \"debug",
		"nats-creds =",
		"config = /elsewhere.conf",
	}, "\n"))
	setQuotaEnv(t, nil)
	o, err := parseOptions([]string{"--config", file, "--log-level", "warn"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	type read struct {
		Region, Listen, DataDir, Redis, RegionWeights, LogLevel, Config string
		AdminToken                                                      edge.Secret
		RedisCluster                                                    bool
	}
	want := read{Region: "eu", Listen: ":9000", DataDir: "/var/lib/quota", AdminToken: "a#b=c",
		RedisCluster: true, Redis: "redis://x:1", RegionWeights: "eu=0.5,us=0.5", LogLevel: "warn", Config: file}
	got := read{Region: o.Region, Listen: o.Listen, DataDir: o.DataDir, AdminToken: o.AdminToken,
		RedisCluster: o.RedisCluster, Redis: o.Redis, RegionWeights: o.RegionWeightList, LogLevel: o.LogLevel, Config: o.Config}
	if got != want {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}

	// An unterminated quote is kept as written (and here fails validation).
	if _, err := parseOptions([]string{"--config", file}, io.Discard); err == nil || !strings.Contains(err.Error(), `"\"debug"`) {
		t.Fatalf("err = %v, want --log-level to reject the raw value", err)
	}
}

// TestParseOptionsErrors: every bad input names where it came from and the
// flag.
func TestParseOptionsErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.conf")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		file string // config file contents, if any
		want []string
	}{
		{"bad flag value", []string{"--window", "soon"}, nil, "", []string{"-window", `"soon"`}},
		{"bad int flag", []string{"--processes", "many"}, nil, "", []string{"-processes", `"many"`}},
		{"bad env value", nil, map[string]string{"QUOTA_REPORT_INTERVAL": "soon"}, "", []string{"QUOTA_REPORT_INTERVAL", `"report-interval"`}},
		{"bad file value", nil, nil, "# x\nwindow = soon\n", []string{"limiter.conf:2", "--window", `"soon"`}},
		{"bad file bool", nil, nil, "redis-cluster = maybe\n", []string{"limiter.conf:1", "--redis-cluster"}},
		{"unknown file key", nil, nil, "region = eu\nregoin = us\n", []string{"limiter.conf:2", `unknown flag "regoin"`}},
		{"file key by env name", nil, nil, "QUOTA_REGION = us\n", []string{`unknown flag "QUOTA_REGION"`}},
		{"line without =", nil, nil, "region eu\n", []string{"limiter.conf:1", "flag = value"}},
		{"line without name", nil, nil, "= eu\n", []string{"limiter.conf:1", "flag = value"}},
		{"missing file", []string{"--config", missing}, nil, "", []string{"--config", "missing.conf"}},
		{"unknown flag", []string{"--nope"}, nil, "", []string{"-nope"}},
		{"positional argument", []string{"serve"}, nil, "", []string{"unexpected arguments"}},
		{"validation", []string{"--share-floor", "1"}, nil, "", []string{"--share-floor"}},
		{"gossip's bound", []string{"--share-floor", "0.7"}, nil, "", []string{"--share-floor: must be in (0, 0.5], got 0.7"}},
		{"owner's bound", []string{"--idempotency-horizon", "0s"}, nil, "", []string{"--idempotency-horizon: must be at least 1ms"}},
		{"gc percent too small", []string{"--gc-percent", "5"}, nil, "", []string{"--gc-percent", "got 5"}},
		{"validation joins all", []string{"--window", "0s", "--processes", "0"}, nil, "", []string{"--window", "--processes"}},
		{"usage encoding", []string{"--usage-encoding", "xml"}, nil, "", []string{"--usage-encoding"}},
		{"hot-key metrics", []string{"--hotkey-metrics", "101"}, nil, "", []string{"--hotkey-metrics"}},
		{"otlp endpoint", nil, map[string]string{"QUOTA_OTLP_ENDPOINT": "collector:4318"}, "", []string{"--otlp-endpoint"}},
		{"short check token", []string{"--check-token", checkA + ",shorty"}, nil, "", []string{"--check-token: entry 2: a token must be 16 to 256 bytes"}},
		{"read token twice", nil, map[string]string{"QUOTA_READ_TOKEN": readA + "," + readA}, "", []string{"--read-token: entry 2: the same token is listed twice"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setQuotaEnv(t, tt.env)
			args := tt.args
			if tt.file != "" {
				args = append([]string{"--config", writeConfig(t, tt.file)}, args...)
			}
			_, err := parseOptions(args, io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to contain %q", err, w)
				}
			}
			for _, tok := range []string{checkA, readA, "shorty"} {
				if strings.Contains(err.Error(), tok) {
					t.Errorf("err = %q quotes a token", err)
				}
			}
		})
	}
}

func TestParseConfigLine(t *testing.T) {
	tests := []struct {
		line, name, value string
		ok, err           bool
	}{
		{"", "", "", false, false},
		{"   ", "", "", false, false},
		{"# region = eu", "", "", false, false},
		{"  # indented comment", "", "", false, false},
		{"region = eu", "region", "eu", true, false},
		{"region=eu", "region", "eu", true, false},
		{"--region = eu", "region", "eu", true, false},
		{"listen = \":9000\"", "listen", ":9000", true, false},
		{"admin-token = \"a\\tb\"", "admin-token", "a\tb", true, false},
		{"admin-token = 'x'", "admin-token", "'x'", true, false},
		{"admin-token = x # not a comment", "admin-token", "x # not a comment", true, false},
		{"region-weights = eu=1", "region-weights", "eu=1", true, false},
		{"admin-token =", "admin-token", "", true, false},
		{"region eu", "", "", false, true},
		{"= eu", "", "", false, true},
		{"-- = eu", "", "", false, true},
	}
	for _, tt := range tests {
		name, value, ok, err := parseConfigLine(tt.line)
		if name != tt.name || value != tt.value || ok != tt.ok || (err != nil) != tt.err {
			t.Errorf("parseConfigLine(%q) = %q, %q, %v, %v; want %q, %q, %v, error %v",
				tt.line, name, value, ok, err, tt.name, tt.value, tt.ok, tt.err)
		}
	}
}

// --gc-percent (default 400) sets the collector's percent, unless GOGC is
// in the environment: an operator's GOGC wins.
func TestGCPercent(t *testing.T) {
	if o, err := parseOptions(nil, io.Discard); err != nil || o.GCPercent != 400 {
		t.Fatalf("default: %d %v, want 400", o.GCPercent, err)
	}
	old := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	if !applyGCPercent(250) {
		t.Fatal("GOGC unset: --gc-percent not applied")
	}
	if got := debug.SetGCPercent(100); got != 250 {
		t.Fatalf("the collector's percent is %d, want 250", got)
	}
	t.Setenv("GOGC", "150")
	if applyGCPercent(250) {
		t.Fatal("GOGC set: --gc-percent applied over it")
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("the collector's percent is %d, want GOGC's setting left alone (100 here)", got)
	}
}
