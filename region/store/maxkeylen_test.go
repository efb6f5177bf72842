package store_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/store"
)

// TestOneMaxKeyLen: the longest key is declared once, here, and every
// part that takes a key (the limiter, gossip, usage reports, billing
// queries and tokens) takes one of MaxKeyLen bytes and refuses one byte
// more. 512 keeps every key the ledger and billing took before.
func TestOneMaxKeyLen(t *testing.T) {
	if store.MaxKeyLen < 512 {
		t.Fatalf("MaxKeyLen %d: the ledger and billing took keys of up to 512 bytes", store.MaxKeyLen)
	}
	start := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	parts := []struct {
		name string
		take func(key string) error
	}{
		{"region.CheckKey", region.CheckKey},
		{"gossip digest", func(key string) error {
			d := gossip.Digest{Region: "eu", Process: "p1", Keys: []gossip.KeyDemand{{Key: key, Demand: 1}}}
			b, err := d.MarshalBinary()
			if err != nil {
				return err
			}
			got, err := gossip.DecodeDigest(b)
			if err == nil && len(got.Keys) != 1 {
				return errDropped
			}
			return err
		}},
		{"ledger report", func(key string) error {
			r := ledger.Report{Key: key, WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: "p1",
				Region: "eu", Spent: 1, Seq: 1, SentAt: start}
			return r.Validate()
		}},
		{"billing query", func(key string) error {
			q := map[string]string{"key": key, "from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"}
			_, err := billing.ParseQuery(func(f string) string { return q[f] })
			return err
		}},
		{"billing token prefix", func(key string) error {
			_, err := billing.ParseTokens("prefix:" + key + "=aaaaaaaaaaaaaaaa")
			return err
		}},
	}
	longest := strings.Repeat("k", store.MaxKeyLen)
	for _, p := range parts {
		t.Run(p.name, func(t *testing.T) {
			if err := p.take(longest); err != nil {
				t.Errorf("a key of MaxKeyLen (%d) bytes: %v", store.MaxKeyLen, err)
			}
			if err := p.take(longest + "k"); err == nil {
				t.Errorf("a key of MaxKeyLen+1 bytes taken")
			}
		})
	}

	// The declaration: no other constant or variable names a key length.
	declared := regexp.MustCompile(`(?i)^max\w*keylen$`)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var places []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || (g.Tok != token.CONST && g.Tok != token.VAR) {
				continue
			}
			for _, spec := range g.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if declared.MatchString(name.Name) {
						rel, _ := filepath.Rel(root, path)
						places = append(places, rel+": "+name.Name)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(places) != 1 || places[0] != filepath.Join("region", "store", "names.go")+": MaxKeyLen" {
		t.Fatalf("key lengths declared at %q, want only region/store/names.go: MaxKeyLen", places)
	}
}

var errDropped = errors.New("the digest left the key out")
