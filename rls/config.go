package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/quotaplatform/quota/region"
)

// ErrInvalidConfig is wrapped by every error of Parse and Load that is
// about the configuration's content (a *ConfigError says where).
var ErrInvalidConfig = errors.New("invalid rate limit config")

// ConfigError is a bad configuration: the file, the line (from 1; 0 when
// the file as a whole is at fault) and the field (a path such as
// descriptors[0].rate_limit.unit).
type ConfigError struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ConfigError) Unwrap() []error { return []error{ErrInvalidConfig, e.Err} }

// Unit is the time unit of a rate_limit.
type Unit uint8

// The units envoyproxy/ratelimit's YAML names, in its spelling.
const (
	UnitSecond Unit = iota + 1
	UnitMinute
	UnitHour
	UnitDay
)

var unitNames = map[string]Unit{"second": UnitSecond, "minute": UnitMinute, "hour": UnitHour, "day": UnitDay}

// Seconds is the unit's length in seconds.
func (u Unit) Seconds() float64 {
	switch u {
	case UnitSecond:
		return 1
	case UnitMinute:
		return 60
	case UnitHour:
		return 3600
	case UnitDay:
		return 86400
	}
	return 0
}

func (u Unit) String() string {
	for name, v := range unitNames {
		if v == u {
			return name
		}
	}
	return "unknown"
}

// letter is the unit's one-byte spelling in override keys.
func (u Unit) letter() byte { return "?smhd"[min(int(u), 4)] }

// Rule is one limited (or explicitly unlimited) descriptor of the
// configuration: what a matched request descriptor is held to.
type Rule struct {
	// Domain is the configuration's domain.
	Domain string
	// Path names the descriptor by its configured keys and values,
	// "key_value.key" (a key without a value matches every value), as
	// envoyproxy/ratelimit names its statistics.
	Path string
	// Name is rate_limit.name; "" when not given.
	Name string
	// RequestsPerUnit and Unit are the limit: RequestsPerUnit cost units
	// per Unit, and a burst of RequestsPerUnit. RequestsPerUnit 0 refuses
	// every request without touching the store.
	RequestsPerUnit uint32
	Unit            Unit
	// Unlimited: the descriptor is never limited and never touches the
	// store.
	Unlimited bool
	// Replaces names the rules (by Name) this one replaces in a request
	// that matches both.
	Replaces []string
	// ShadowMode: an over-limit answer is counted but the answer is OK.
	ShadowMode bool
	// DetailedMetric: counters carry Path (or Name) as a label, not only
	// the domain.
	DetailedMetric bool

	id     string // the key's rule part: hex of a digest of Domain and Path
	label  string // the counters' descriptor label
	plan   region.Plan
	rpuInt int64
}

// Plan is the rule's token bucket: rate RequestsPerUnit per Unit, burst
// RequestsPerUnit.
func (r *Rule) Plan() region.Plan { return r.plan }

// node is one level of a domain's descriptor tree.
type node struct {
	rule  *Rule // nil: not limited at this level
	exact map[entry]*node
	wild  map[string]*node // key → node of an entry with a key and no value
}

type entry struct{ key, value string }

// Config is a loaded set of domains. It is immutable once built.
type Config struct {
	// Files are the files it was read from, in order.
	Files   []string
	domains map[string]*node
	rules   map[string]*Rule // id → rule
}

// Domains lists the configured domains.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// Load reads the configuration at path: one YAML file, or every *.yaml and
// *.yml file directly in a directory (one domain per file, each domain in
// one file only). An empty directory is a configuration with no domain.
func Load(path string) (*Config, error) {
	files, err := configFiles(path)
	if err != nil {
		return nil, err
	}
	c := &Config{domains: map[string]*node{}, rules: map[string]*Rule{}}
	where := map[string]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("rate limit config: %w", err)
		}
		if err := c.add(f, data, where, ""); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// configFiles lists the files of path, sorted.
func configFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rate limit config: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("rate limit config: %w", err)
	}
	var files []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && !strings.HasPrefix(n, ".") && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			files = append(files, filepath.Join(path, n))
		}
	}
	return files, nil
}

// Parse reads one file's YAML (file names it in errors) into a Config of
// its one domain.
func Parse(file string, data []byte) (*Config, error) {
	c := &Config{domains: map[string]*node{}, rules: map[string]*Rule{}}
	if err := c.add(file, data, map[string]string{}, ""); err != nil {
		return nil, err
	}
	return c, nil
}

// CatalogFile is how errors name the catalogue entry of domain (the
// ConfigError's File): "catalog:rls/<domain>".
func CatalogFile(domain string) string { return "catalog:rls/" + domain }

// ParseDomain reads the YAML of the catalogue entry of domain into a
// Config of that one domain, as Parse reads a file; errors name
// CatalogFile(domain) as the file. The YAML's domain field must be domain.
func ParseDomain(domain string, data []byte) (*Config, error) {
	c := &Config{domains: map[string]*node{}, rules: map[string]*Rule{}}
	if err := c.add(CatalogFile(domain), data, map[string]string{}, domain); err != nil {
		return nil, err
	}
	return c, nil
}

// add parses one file into c; where maps a domain to the file that
// defined it; want, when not empty, is the domain the file must define.
func (c *Config) add(file string, data []byte, where map[string]string, want string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return syntaxError(file, err)
	}
	if len(doc.Content) == 0 {
		return &ConfigError{File: file, Err: errors.New("empty file: want a mapping with domain and descriptors")}
	}
	p := parser{file: file}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return p.errorf(root, "", "want a mapping with domain and descriptors, got a %s", kindName(root))
	}
	var domain string
	var domainNode, descs *yaml.Node
	err := p.fields(root, "", func(name string, v *yaml.Node) error {
		switch name {
		case "domain":
			domainNode = v
			return p.str(v, "domain", &domain)
		case "descriptors":
			descs = v
			return nil
		}
		return p.errorf(v, name, "unknown field (want domain or descriptors)")
	})
	if err != nil {
		return err
	}
	switch {
	case domainNode == nil:
		return p.errorf(root, "domain", "missing")
	case domain == "":
		return p.errorf(domainNode, "domain", "must not be empty")
	case want != "" && domain != want:
		return p.errorf(domainNode, "domain", "is %q, but the rules are stored as domain %q", domain, want)
	case where[domain] != "":
		return p.errorf(domainNode, "domain", "%q is already defined in %s", domain, where[domain])
	}
	where[domain] = file
	c.Files = append(c.Files, file)
	root2 := &node{}
	if descs != nil {
		if err := p.descriptors(c, domain, "", descs, "descriptors", root2); err != nil {
			return err
		}
	}
	c.domains[domain] = root2
	return nil
}

// yamlLine is the line yaml's syntax errors start with.
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntaxError is a YAML syntax error of file, its line taken out of yaml's
// message into the ConfigError's Line.
func syntaxError(file string, err error) *ConfigError {
	m := yamlLine.FindStringSubmatch(err.Error())
	if m == nil {
		return &ConfigError{File: file, Err: err}
	}
	line, _ := strconv.Atoi(m[1])
	return &ConfigError{File: file, Line: line, Err: errors.New("yaml: " + strings.TrimPrefix(err.Error(), m[0]))}
}

type parser struct{ file string }

func (p parser) errorf(n *yaml.Node, field, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: n.Line, Field: field, Err: fmt.Errorf(format, args...)}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "scalar"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// fields calls f for each key of mapping n; a key given twice is an error.
func (p parser) fields(n *yaml.Node, at string, f func(name string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return p.errorf(n, at, "want a mapping, got a %s", kindName(n))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(at, k.Value)
		if seen[k.Value] {
			return p.errorf(k, name, "given twice")
		}
		seen[k.Value] = true
		if err := f(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func join(at, name string) string {
	if at == "" {
		return name
	}
	return at + "." + name
}

func (p parser) str(n *yaml.Node, field string, out *string) error {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" && n.Tag != "!!bool") {
		return p.errorf(n, field, "want a string, got a %s", kindName(n))
	}
	*out = n.Value
	return nil
}

func (p parser) boolean(n *yaml.Node, field string, out *bool) error {
	if err := n.Decode(out); err != nil || n.Kind != yaml.ScalarNode {
		return p.errorf(n, field, "want true or false, got %q", n.Value)
	}
	return nil
}

// descriptors parses a list of descriptors into parent's children.
func (p parser) descriptors(c *Config, domain, path string, n *yaml.Node, at string, parent *node) error {
	if n.Kind != yaml.SequenceNode {
		return p.errorf(n, at, "want a list of descriptors, got a %s", kindName(n))
	}
	for i, d := range n.Content {
		if err := p.descriptor(c, domain, path, d, fmt.Sprintf("%s[%d]", at, i), parent); err != nil {
			return err
		}
	}
	return nil
}

func (p parser) descriptor(c *Config, domain, path string, n *yaml.Node, at string, parent *node) error {
	var (
		key, value       string
		hasKey, hasValue bool
		shadow, detailed bool
		limitNode, kids  *yaml.Node
	)
	err := p.fields(n, at, func(name string, v *yaml.Node) error {
		field := join(at, name)
		switch name {
		case "key":
			hasKey = true
			return p.str(v, field, &key)
		case "value":
			hasValue = true
			return p.str(v, field, &value)
		case "rate_limit":
			limitNode = v
			return nil
		case "descriptors":
			kids = v
			return nil
		case "shadow_mode":
			return p.boolean(v, field, &shadow)
		case "detailed_metric":
			return p.boolean(v, field, &detailed)
		}
		return p.errorf(v, field, "unknown field (want key, value, rate_limit, descriptors, shadow_mode or detailed_metric)")
	})
	if err != nil {
		return err
	}
	if !hasKey || key == "" {
		return p.errorf(n, join(at, "key"), "missing or empty")
	}
	if strings.HasSuffix(value, "*") {
		// envoyproxy/ratelimit matches such a value as a prefix; refused
		// rather than silently matched as a literal.
		return p.errorf(n, join(at, "value"), "prefix wildcards (a value ending in *) are not supported, got %q", value)
	}
	step := key
	if hasValue {
		step = key + "_" + value
	}
	full := step
	if path != "" {
		full = path + "." + step
	}
	child := &node{}
	if hasValue {
		if parent.exact == nil {
			parent.exact = map[entry]*node{}
		}
		if parent.exact[entry{key, value}] != nil {
			return p.errorf(n, at, "duplicate descriptor %q", full)
		}
		parent.exact[entry{key, value}] = child
	} else {
		if parent.wild == nil {
			parent.wild = map[string]*node{}
		}
		if parent.wild[key] != nil {
			return p.errorf(n, at, "duplicate descriptor %q", full)
		}
		parent.wild[key] = child
	}
	if limitNode != nil {
		r, err := p.rateLimit(limitNode, join(at, "rate_limit"))
		if err != nil {
			return err
		}
		r.Domain, r.Path, r.ShadowMode, r.DetailedMetric = domain, full, shadow, detailed
		r.finish()
		if other := c.rules[r.id]; other != nil {
			return p.errorf(n, at, "descriptor %q collides with %q in domain %q", full, other.Path, other.Domain)
		}
		c.rules[r.id] = r
		child.rule = r
	}
	// shadow_mode and detailed_metric without a rate_limit have nothing to
	// act on; envoyproxy/ratelimit accepts them, and so does this.
	if kids != nil {
		return p.descriptors(c, domain, full, kids, join(at, "descriptors"), child)
	}
	return nil
}

func (p parser) rateLimit(n *yaml.Node, at string) (*Rule, error) {
	r := &Rule{}
	var unitNode, rpuNode *yaml.Node
	err := p.fields(n, at, func(name string, v *yaml.Node) error {
		field := join(at, name)
		switch name {
		case "unit":
			unitNode = v
			var s string
			if err := p.str(v, field, &s); err != nil {
				return err
			}
			u, ok := unitNames[strings.ToLower(s)]
			if !ok {
				return p.errorf(v, field, "must be second, minute, hour or day, got %q", s)
			}
			r.Unit = u
		case "requests_per_unit":
			rpuNode = v
			var x int64
			if err := v.Decode(&x); err != nil || v.Kind != yaml.ScalarNode || x < 0 || x > math.MaxUint32 {
				return p.errorf(v, field, "want a whole number from 0 to %d, got %q", uint32(math.MaxUint32), v.Value)
			}
			r.RequestsPerUnit = uint32(x)
		case "unlimited":
			return p.boolean(v, field, &r.Unlimited)
		case "name":
			return p.str(v, field, &r.Name)
		case "replaces":
			return p.replaces(v, field, r)
		default:
			return p.errorf(v, field, "unknown field (want unit, requests_per_unit, unlimited, name or replaces)")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case r.Unlimited && (unitNode != nil || rpuNode != nil):
		return nil, p.errorf(n, at, "unlimited takes no unit or requests_per_unit")
	case !r.Unlimited && unitNode == nil:
		return nil, p.errorf(n, join(at, "unit"), "missing (second, minute, hour or day)")
	case !r.Unlimited && rpuNode == nil:
		return nil, p.errorf(n, join(at, "requests_per_unit"), "missing")
	}
	return r, nil
}

func (p parser) replaces(n *yaml.Node, at string, r *Rule) error {
	if n.Kind != yaml.SequenceNode {
		return p.errorf(n, at, "want a list of {name: ...}, got a %s", kindName(n))
	}
	for i, item := range n.Content {
		field := fmt.Sprintf("%s[%d]", at, i)
		var name string
		err := p.fields(item, field, func(k string, v *yaml.Node) error {
			if k != "name" {
				return p.errorf(v, join(field, k), "unknown field (want name)")
			}
			return p.str(v, join(field, k), &name)
		})
		if err != nil {
			return err
		}
		if name == "" {
			return p.errorf(item, join(field, "name"), "missing or empty")
		}
		r.Replaces = append(r.Replaces, name)
	}
	return nil
}

// finish derives the rule's id, label and plan.
func (r *Rule) finish() {
	sum := sha256.Sum256([]byte(r.Domain + "\x00" + r.Path))
	r.id = hex.EncodeToString(sum[:8])
	r.label = r.Name
	if r.label == "" {
		r.label = r.Path
	}
	r.rpuInt = int64(r.RequestsPerUnit)
	r.plan = planOf(r.RequestsPerUnit, r.Unit, r.label)
}

// planOf is the token bucket of n per unit: rate n/unit per second, burst n.
func planOf(n uint32, u Unit, name string) region.Plan {
	if n == 0 || u.Seconds() == 0 {
		return region.Plan{}
	}
	return region.Plan{Name: name, Rate: float64(n) / u.Seconds(), Capacity: float64(n)}
}
