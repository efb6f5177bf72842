package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseOptions(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "limiter.conf")
	os.WriteFile(cfgFile, []byte("# comment\nregion = eu\n--window = 30s\nlisten = \":9000\"\nadmin-token = fromfile\n"), 0o600)
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, o Options)
		err   bool
	}{
		{"defaults", nil, nil, func(t *testing.T, o Options) {
			if o.Region != "local" || o.Listen != ":8080" || o.DataDir != "./data" || o.Window != time.Minute ||
				o.StoreTimeout != 5*time.Millisecond || o.Processes != 1 || o.ProcessID == "" || o.DefaultRate != 100 {
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
				if o.Region != "us" || o.Window != 10*time.Second || o.Listen != ":9000" || o.AdminToken != "fromfile" {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}
