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
	"runtime"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"

	"github.com/quotaplatform/quota/natsrole"
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
func Users(regions []string) []string {
	var out []string
	for _, r := range regions {
		out = append(out, natsrole.Limiter(r))
	}
	return append(out, natsrole.ControlPlane, natsrole.Reconciler)
}

// PasswordEnv is the environment variable nats-server reads the password of
// user (one of Users, or "gateway") from.
func PasswordEnv(user string) string {
	return "QUOTA_NATS_PASSWORD_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_"))
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
	return map[string]cty.Value{
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
		"upper":      stdlib.UpperFunc,
		"replace":    stdlib.ReplaceFunc,
	}
}
