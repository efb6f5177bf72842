package settings

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/quotaplatform/quota/internal/field"
)

// A Set is one command's settings, in declaration order.
type Set struct {
	fs     *flag.FlagSet
	prefix string
	list   []*Setting
}

// A Setting is one declared setting. Its methods refine the declaration
// and return it, so that a declaration reads as one statement.
type Setting struct {
	name       string
	field      string // the bound field's path in its owner's errors
	help       string
	doc        string
	docDefault string
	check      func() error
}

// New returns an empty Set for the command name (as its flag.FlagSet is
// named), whose environment variables start with envPrefix and "_".
func New(name, envPrefix string) *Set {
	return &Set{fs: flag.NewFlagSet(name, flag.ContinueOnError), prefix: envPrefix}
}

// FlagSet is the flags of every declared setting, to parse.
func (s *Set) FlagSet() *flag.FlagSet { return s.fs }

// Settings lists the declared settings in declaration order.
func (s *Set) Settings() []*Setting { return s.list }

// EnvVar is the environment variable of the setting name:
// report-interval is QUOTA_REPORT_INTERVAL with the prefix QUOTA, as ff
// derives it.
func (s *Set) EnvVar(name string) string {
	return s.prefix + "_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func (s *Set) add(name, help string) *Setting {
	st := &Setting{name: name, help: help}
	s.list = append(s.list, st)
	return st
}

// String declares a string setting stored in p.
func (s *Set) String(p *string, name, def, help string) *Setting {
	s.fs.StringVar(p, name, def, help)
	return s.add(name, help)
}

// Bool declares a boolean setting stored in p.
func (s *Set) Bool(p *bool, name string, def bool, help string) *Setting {
	s.fs.BoolVar(p, name, def, help)
	return s.add(name, help)
}

// Int declares an int setting stored in p.
func (s *Set) Int(p *int, name string, def int, help string) *Setting {
	s.fs.IntVar(p, name, def, help)
	return s.add(name, help)
}

// Int64 declares an int64 setting stored in p.
func (s *Set) Int64(p *int64, name string, def int64, help string) *Setting {
	s.fs.Int64Var(p, name, def, help)
	return s.add(name, help)
}

// Float64 declares a float64 setting stored in p.
func (s *Set) Float64(p *float64, name string, def float64, help string) *Setting {
	s.fs.Float64Var(p, name, def, help)
	return s.add(name, help)
}

// Duration declares a time.Duration setting stored in p.
func (s *Set) Duration(p *time.Duration, name string, def time.Duration, help string) *Setting {
	s.fs.DurationVar(p, name, def, help)
	return s.add(name, help)
}

// Var declares a setting of its own type; v holds the default.
func (s *Set) Var(v flag.Value, name, help string) *Setting {
	s.fs.Var(v, name, help)
	return s.add(name, help)
}

// Doc sets the Markdown of the setting's row in the docs' table, when the
// help line says too little.
func (st *Setting) Doc(markdown string) *Setting {
	st.doc = markdown
	return st
}

// DefaultDoc sets what the docs' table shows as the default, when the
// flag's default is not it (a default computed at start, or one that
// depends on other settings).
func (st *Setting) DefaultDoc(markdown string) *Setting {
	st.docDefault = markdown
	return st
}

// Check sets the check of the setting's value, run by Set.Check once the
// settings are parsed; its error is reported after "--name: ".
func (st *Setting) Check(f func() error) *Setting {
	st.check = f
	return st
}

// Field names the configuration field the setting is bound to, as the
// validation of the package that owns it names it (a *field.Error's Path,
// internal/field): Set.Explain reports that field's errors as the flag's.
func (st *Setting) Field(path string) *Setting {
	st.field = path
	return st
}

// Explain rewrites the field errors joined in err (internal/field) about
// a declared setting's field as "--name: cause", the cause without its
// owner's prefix and with the fields of declared settings it names (whole
// paths) named by their flags; it keeps the others as they are.
func (s *Set) Explain(err error) error {
	flags := map[string]string{}
	var paths []string
	for _, st := range s.list {
		if st.field != "" {
			flags[st.field] = "--" + st.name
			paths = append(paths, regexp.QuoteMeta(st.field))
		}
	}
	if len(paths) == 0 {
		return err
	}
	named := regexp.MustCompile(`\b(` + strings.Join(paths, "|") + `)\b`)
	var errs []error
	field.Each(err, func(e error) {
		var fe *field.Error
		if errors.As(e, &fe) {
			if name, ok := flags[fe.Path]; ok {
				e = fmt.Errorf("%s: %s", name, named.ReplaceAllStringFunc(fe.Err.Error(), func(p string) string { return flags[p] }))
			}
		}
		errs = append(errs, e)
	})
	return errors.Join(errs...)
}

// Check runs every setting's check and joins their errors, each naming
// its flag.
func (s *Set) Check() error {
	var errs []error
	for _, st := range s.list {
		if st.check == nil {
			continue
		}
		if err := st.check(); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", st.name, err))
		}
	}
	return errors.Join(errs...)
}

// WriteMarkdown writes the settings as a Markdown table: flag,
// environment variable, default and doc, one row each in declaration
// order.
func (s *Set) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| flag | environment | default | |\n|---|---|---|---|\n")
	for _, st := range s.list {
		def := st.docDefault
		if def == "" {
			def = "empty"
			if v := s.fs.Lookup(st.name).DefValue; v != "" {
				def = "`" + v + "`"
			}
		}
		doc := st.doc
		if doc == "" {
			doc = st.help
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", st.name, s.EnvVar(st.name), def, cell(doc))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell makes text one Markdown table cell: one line, pipes escaped.
func cell(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	var b strings.Builder
	for i, r := range text {
		if r == '|' && (i == 0 || text[i-1] != '\\') {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
