package edge_test

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/internal/edge"
)

func TestSecretNeverPrints(t *testing.T) {
	const value = "hunter2-hunter2-hunter2"
	var s edge.Secret
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(&s, "token", "a secret")
	if err := fs.Parse([]string{"--token", value}); err != nil {
		t.Fatal(err)
	}
	if string(s) != value {
		t.Fatalf("Set stored %q", string(s))
	}
	opts := struct{ Token edge.Secret }{s}
	for _, out := range []string{s.String(), fmt.Sprint(s), fmt.Sprintf("%v %+v %#v", opts, opts, opts)} {
		if strings.Contains(out, value) {
			t.Fatalf("the secret printed: %s", out)
		}
	}
	if got := edge.Secret("").String(); got != "" {
		t.Fatalf("an unset secret prints %q, want empty", got)
	}
}
