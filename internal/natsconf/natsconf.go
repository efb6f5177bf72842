// Package natsconf renders the NATS server configuration the project ships
// (deploy/terraform/modules/region/nats.conf.tftpl) outside Terraform, with
// the same template language (HCL templates, through hashicorp/hcl/v2) and
// the functions the template uses. Tests and the multi-region harness run
// nats-server on exactly the configuration the deploy renders: its roles,
// permissions and gateway authorization are what they prove.
package natsconf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"

	"github.com/quotaplatform/quota/internal/natsrole"
)

// Gateway is one remote region's gateway.
type Gateway struct {
	Name string
	URLs []string
}

// TLS names the PEM files of the server's certificate, key and the CA that
// signed its peers and clients.
type TLS struct {
	CertFile, KeyFile, CAFile string
}

// Params are the template's variables, as the region module passes them.
type Params struct {
	Name          string // this server's region (cluster and gateway name)
	Regions       []string
	ControlRegion string // the region whose control-plane limiter may write the catalogue
	ListenHost    string // default "0.0.0.0"
	ClientPort    int    // default 4222
	HTTPPort      int    // default 8222
	ClusterPort   int    // default 6222
	GatewayPort   int    // default 7222
	StoreDir      string
	MaxFileStore  string // default "1G"
	Routes        []string
	Advertise     string
	Gateways      []Gateway
	TLS           *TLS

	// PIDFile is where the server writes its pid, which the pod's preStop
	// hook signals into lame duck. Default StoreDir + ".pid", beside the
	// store (in its parent, which exists before the server starts).
	PIDFile             string
	LameDuckDuration    string // default "30s"
	LameDuckGracePeriod string // default "10s"

	// Processes lists, by region, the limiter processes (their identities:
	// pod names, ledger.Identity) that each get their own user,
	// natsrole.LimiterProcess, allowed to publish usage and gossip only on
	// that process's subjects; the control plane may not publish on them.
	// A region not listed has one user for all its limiters,
	// natsrole.Limiter, which may publish as any of them. Names are DNS
	// labels (lower-case letters, digits, '-'). Default none.
	Processes map[string][]string

	UsageSubject  string // default "quota.usage"
	GossipSubject string // default "quota.gossip"
	UsageStream   string // default "QUOTA_USAGE"
	CatalogBucket string // default "quota-catalog"
	// QuotaBaseSubject and QuotaBaseQueue are where the reconcilers answer
	// quota-base requests (ledger/quotabase). Defaults "quota.base",
	// "quota-base".
	QuotaBaseSubject string
	QuotaBaseQueue   string
}

// Users are the users the template defines for regions, in order: one
// limiter per region, then the control plane and the reconciler.
// Each subscribes only under its own inbox prefix (natsrole.InboxPrefix).
func Users(regions []string) []string { return UsersOf(regions, nil) }

// UsersOf are the users the template defines for regions and processes
// (Params.Processes), in order: each region's limiter processes, or its
// one limiter user when none are listed, then the control plane and the
// reconciler.
func UsersOf(regions []string, processes map[string][]string) []string {
	var out []string
	for _, r := range regions {
		if len(processes[r]) == 0 {
			out = append(out, natsrole.Limiter(r))
		}
		for _, p := range processes[r] {
			out = append(out, natsrole.LimiterProcess(r, p))
		}
	}
	return append(out, natsrole.ControlPlane, natsrole.Reconciler)
}

// PasswordEnv is the environment variable nats-server reads the password of
// user (one of UsersOf, or "gateway") from.
func PasswordEnv(user string) string {
	return "QUOTA_NATS_PASSWORD_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(user))
}

// processName is what Params.Processes may hold: a DNS label, so a subject
// token whose password variable (PasswordEnv) no other name shares.
var processName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// checkProcesses reports every bad entry of p.Processes, naming it.
func (p *Params) checkProcesses() error {
	var errs []error
	regions := map[string]bool{}
	for _, r := range p.Regions {
		regions[r] = true
	}
	for r, ps := range p.Processes {
		if !regions[r] {
			errs = append(errs, fmt.Errorf("natsconf: Processes[%q]: not one of Regions %v", r, p.Regions))
		}
		seen := map[string]bool{}
		for _, name := range ps {
			switch {
			case !processName.MatchString(name):
				errs = append(errs, fmt.Errorf("natsconf: Processes[%q]: %q is not a DNS label (lower-case letters, digits, '-')", r, name))
			case seen[name]:
				errs = append(errs, fmt.Errorf("natsconf: Processes[%q]: %q listed twice", r, name))
			}
			seen[name] = true
		}
	}
	return errors.Join(errs...)
}

// TemplatePath is the template's path in this source tree.
func TemplatePath() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("natsconf: cannot locate the source tree")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "terraform", "modules", "region", "nats.conf.tftpl"), nil
}

// Render renders the shipped template with p.
func Render(p Params) (string, error) {
	path, err := TemplatePath()
	if err != nil {
		return "", err
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("natsconf: %w", err)
	}
	return RenderSource(src, path, p)
}

// RenderSource renders template source src (named name in errors) with p.
func RenderSource(src []byte, name string, p Params) (string, error) {
	p.defaults()
	if p.Name == "" || len(p.Regions) == 0 || p.ControlRegion == "" || p.StoreDir == "" {
		return "", errors.New("natsconf: Name, Regions, ControlRegion and StoreDir are required")
	}
	if err := p.checkProcesses(); err != nil {
		return "", err
	}
	expr, diags := hclsyntax.ParseTemplate(src, name, hcl.InitialPos)
	if diags.HasErrors() {
		return "", fmt.Errorf("natsconf: parse: %s", diags.Error())
	}
	out, diags := expr.Value(&hcl.EvalContext{Variables: p.vars(), Functions: functions()})
	if diags.HasErrors() {
		return "", fmt.Errorf("natsconf: render: %s", diags.Error())
	}
	return out.AsString(), nil
}

func (p *Params) defaults() {
	set := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	setPort := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	set(&p.ListenHost, "0.0.0.0")
	setPort(&p.ClientPort, 4222)
	setPort(&p.HTTPPort, 8222)
	setPort(&p.ClusterPort, 6222)
	setPort(&p.GatewayPort, 7222)
	set(&p.MaxFileStore, "1G")
	if p.StoreDir != "" {
		set(&p.PIDFile, filepath.Clean(p.StoreDir)+".pid")
	}
	set(&p.LameDuckDuration, "30s")
	set(&p.LameDuckGracePeriod, "10s")
	set(&p.UsageSubject, "quota.usage")
	set(&p.GossipSubject, "quota.gossip")
	set(&p.UsageStream, "QUOTA_USAGE")
	set(&p.CatalogBucket, "quota-catalog")
	set(&p.QuotaBaseSubject, "quota.base")
	set(&p.QuotaBaseQueue, "quota-base")
}

func (p *Params) vars() map[string]cty.Value {
	strs := func(ss []string) cty.Value {
		if len(ss) == 0 {
			return cty.ListValEmpty(cty.String)
		}
		vs := make([]cty.Value, len(ss))
		for i, s := range ss {
			vs[i] = cty.StringVal(s)
		}
		return cty.ListVal(vs)
	}
	gws := make([]cty.Value, 0, len(p.Gateways))
	sort.Slice(p.Gateways, func(i, j int) bool { return p.Gateways[i].Name < p.Gateways[j].Name })
	for _, g := range p.Gateways {
		gws = append(gws, cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal(g.Name), "urls": strs(g.URLs)}))
	}
	gateways := cty.EmptyTupleVal
	if len(gws) > 0 {
		gateways = cty.TupleVal(gws)
	}
	tlsType := cty.Object(map[string]cty.Type{"cert_file": cty.String, "key_file": cty.String, "ca_file": cty.String})
	tls := cty.NullVal(tlsType)
	if p.TLS != nil {
		tls = cty.ObjectVal(map[string]cty.Value{
			"cert_file": cty.StringVal(p.TLS.CertFile), "key_file": cty.StringVal(p.TLS.KeyFile), "ca_file": cty.StringVal(p.TLS.CAFile),
		})
	}
	// Every region has an entry, empty when its processes are not listed.
	procs := make(map[string]cty.Value, len(p.Regions))
	for _, r := range p.Regions {
		procs[r] = strs(p.Processes[r])
	}
	if _, ok := procs[p.ControlRegion]; !ok {
		procs[p.ControlRegion] = strs(nil)
	}
	return map[string]cty.Value{
		"processes":      cty.MapVal(procs),
		"name":           cty.StringVal(p.Name),
		"regions":        strs(p.Regions),
		"control_region": cty.StringVal(p.ControlRegion),
		"listen_host":    cty.StringVal(p.ListenHost),
		"client_port":    cty.NumberIntVal(int64(p.ClientPort)),
		"http_port":      cty.NumberIntVal(int64(p.HTTPPort)),
		"cluster_port":   cty.NumberIntVal(int64(p.ClusterPort)),
		"gateway_port":   cty.NumberIntVal(int64(p.GatewayPort)),
		"store_dir":      cty.StringVal(p.StoreDir),
		"max_file_store": cty.StringVal(p.MaxFileStore),
		"routes":         strs(p.Routes),
		"advertise":      cty.StringVal(p.Advertise),
		"gateways":       gateways,
		"tls":            tls,
		"usage_subject":  cty.StringVal(p.UsageSubject),
		"gossip_subject": cty.StringVal(p.GossipSubject),
		"usage_stream":   cty.StringVal(p.UsageStream),
		"catalog_bucket": cty.StringVal(p.CatalogBucket),

		"quota_base_subject": cty.StringVal(p.QuotaBaseSubject),
		"quota_base_queue":   cty.StringVal(p.QuotaBaseQueue),

		"pid_file":               cty.StringVal(p.PIDFile),
		"lame_duck_duration":     cty.StringVal(p.LameDuckDuration),
		"lame_duck_grace_period": cty.StringVal(p.LameDuckGracePeriod),
	}
}

// functions are the Terraform functions the template calls.
func functions() map[string]function.Function {
	return map[string]function.Function{
		"jsonencode": stdlib.JSONEncodeFunc,
		"length":     stdlib.LengthFunc,
		"upper":      stdlib.UpperFunc,
		"replace":    stdlib.ReplaceFunc,
	}
}
