package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/internal/natsconf"
	"github.com/quotaplatform/quota/internal/natsrole"
)

// TestProbeOnShippedConfig runs the probe on the shipped template rendered as the region module
// renders it for eu, with the environment and credentials laid out as applycheck natscreds
// writes them: with a user per process it passes; with the region's limiters sharing one user
// (the deploy before issue 37) it must fail, pod A's publish on pod B's subject accepted.
func TestProbeOnShippedConfig(t *testing.T) {
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("nats-server not in PATH")
	}
	tests := []struct {
		name      string
		processes map[string][]string
		users     [2]string // pod A's and pod B's NATS user
		wantErr   string
	}{
		{"a user per process", map[string][]string{"eu": {"limiter-eu-0", "limiter-eu-1"}},
			[2]string{natsrole.LimiterProcess("eu", "limiter-eu-0"), natsrole.LimiterProcess("eu", "limiter-eu-1")}, ""},
		{"one user for the region", nil,
			[2]string{natsrole.Limiter("eu"), natsrole.Limiter("eu")}, "published on another process's subject quota.usage.eu.limiter-eu-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			conf, err := natsconf.Render(natsconf.Params{
				Name: "eu", Regions: []string{"ap", "eu", "us"}, ControlRegion: "eu",
				StoreDir: "/data/jetstream", PIDFile: "/var/run/nats/nats.pid",
				Routes:    []string{"nats://nats-eu-0.nats-eu-headless.quota-eu.svc.cluster.local:6222"},
				Advertise: "nats-eu-gateway.quota-eu.svc.cluster.local:7222",
				Gateways:  []natsconf.Gateway{{Name: "us", URLs: []string{"nats://nats-us-gateway.quota-us.svc.cluster.local:7222"}}},
				Processes: tt.processes,
			})
			if err != nil {
				t.Fatal(err)
			}
			// As Secret nats-eu holds them: double-quoted.
			env := map[string]string{"POD_NAME": "nats-eu-0"}
			passwords := map[string]string{}
			for _, u := range append(natsconf.UsersOf([]string{"ap", "eu", "us"}, tt.processes), "gateway") {
				passwords[u] = "pw;" + strings.ReplaceAll(u, ".", "-") + "-0123456789"
				env[natsconf.PasswordEnv(u)] = `"` + passwords[u] + `"`
			}
			procs := []process{
				{Pod: "limiter-eu-0-0", Region: "eu", Process: "limiter-eu-0", User: tt.users[0], Password: passwords[tt.users[0]]},
				{Pod: "limiter-eu-1-0", Region: "eu", Process: "limiter-eu-1", User: tt.users[1], Password: passwords[tt.users[1]]},
				{Pod: "limiter-us-0-0", Region: "us", Process: "limiter-us-0", User: natsrole.LimiterProcess("us", "limiter-us-0")},
			}
			write(t, filepath.Join(dir, "nats.conf"), []byte(conf))
			writeJSONFile(t, filepath.Join(dir, "server-env.json"), env)
			writeJSONFile(t, filepath.Join(dir, "processes.json"), procs)

			err = run(dir, bin)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("probe: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("probe: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func write(t *testing.T, file string, b []byte) {
	t.Helper()
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeJSONFile(t *testing.T, file string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	write(t, file, b)
}
