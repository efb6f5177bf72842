package settings_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/field"
	"github.com/quotaplatform/quota/internal/settings"
)

func Example() {
	var window time.Duration
	var region string
	s := settings.New("limiter", "QUOTA")
	s.String(&region, "region", "local", "region name")
	s.Duration(&window, "window", time.Minute, "accounting window").
		Doc("the accounting window; reports | buckets follow it").
		Check(func() error {
			if window <= 0 {
				return fmt.Errorf("must be positive, got %v", window)
			}
			return nil
		})
	if err := s.FlagSet().Parse([]string{"--window", "0s"}); err != nil {
		panic(err)
	}
	fmt.Println(s.Check())
	_ = s.WriteMarkdown(os.Stdout)
	// Output:
	// --window: must be positive, got 0s
	// | flag | environment | default | |
	// |---|---|---|---|
	// | `--region` | `QUOTA_REGION` | `local` | region name |
	// | `--window` | `QUOTA_WINDOW` | `1m0s` | the accounting window; reports \| buckets follow it |
}

// TestDeclaration: each typed declaration sets its flag's default, and the
// docs' default, doc and environment variable come from the declaration.
func TestDeclaration(t *testing.T) {
	var (
		str  string
		b    bool
		i    int
		i64  int64
		f    float64
		d    time.Duration
		flag = stringValue("x")
	)
	s := settings.New("cmd", "QUOTA")
	s.String(&str, "a-string", "", "empty default")
	s.Bool(&b, "a-bool", true, "a bool")
	s.Int(&i, "an-int", 3, "an int")
	s.Int64(&i64, "an-int64", 1<<30, "an int64").DefaultDoc("`1 GiB`")
	s.Float64(&f, "a-float", 0.05, "a float").Doc("with\n  a longer doc")
	s.Duration(&d, "a-duration", 5*time.Millisecond, "a duration")
	s.Var(&flag, "a-var", "a value")
	if str != "" || !b || i != 3 || i64 != 1<<30 || f != 0.05 || d != 5*time.Millisecond {
		t.Fatalf("defaults not set: %q %v %d %d %v %v", str, b, i, i64, f, d)
	}
	var md strings.Builder
	if err := s.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `--a-string` | `QUOTA_A_STRING` | empty | empty default |\n",
		"| `--a-bool` | `QUOTA_A_BOOL` | `true` | a bool |\n",
		"| `--an-int64` | `QUOTA_AN_INT64` | `1 GiB` | an int64 |\n",
		"| `--a-float` | `QUOTA_A_FLOAT` | `0.05` | with a longer doc |\n",
		"| `--a-duration` | `QUOTA_A_DURATION` | `5ms` | a duration |\n",
		"| `--a-var` | `QUOTA_A_VAR` | `x` | a value |\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, md.String())
		}
	}
	if n := len(s.Settings()); n != 7 {
		t.Errorf("%d settings, want 7", n)
	}
}

// TestCheckJoinsEveryError: Check reports every failing setting, each
// naming its flag, and nothing when all pass.
func TestCheckJoinsEveryError(t *testing.T) {
	var a, b int
	s := settings.New("cmd", "QUOTA")
	bad := errors.New("bad")
	s.Int(&a, "a", 0, "").Check(func() error {
		if a < 1 {
			return bad
		}
		return nil
	})
	s.Int(&b, "b", 0, "").Check(func() error {
		if b < 1 {
			return fmt.Errorf("must be at least 1, got %d", b)
		}
		return nil
	})
	s.Int(new(int), "c", 0, "")
	err := s.Check()
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "--a: bad") || !strings.Contains(err.Error(), "--b: must be at least 1, got 0") {
		t.Fatalf("Check = %v", err)
	}
	a, b = 1, 1
	if err := s.Check(); err != nil {
		t.Fatalf("Check = %v, want nil", err)
	}
}

type stringValue string

func (v *stringValue) String() string     { return string(*v) }
func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }

// TestExplain: an owner's field error about a bound field names the flag,
// and so do the fields of other flags that its cause names; errors about
// unbound fields, and errors about no field, are kept as they are.
func TestExplain(t *testing.T) {
	var window, ttl time.Duration
	var bind, join string
	s := settings.New("limiter", "QUOTA")
	s.Duration(&window, "window", time.Minute, "").Field("Limiter.Window")
	s.String(&bind, "memberlist-bind", "", "").Field("MemberlistBind")
	s.String(&join, "memberlist-join", "", "").Field("MemberlistJoin")
	s.Duration(&ttl, "slot-ttl", time.Minute, "")
	owner := field.Check{Prefix: "region: config "}
	owner.That(false, "Window", "must be positive, got 0s")
	owner.That(false, "SlotTTL", "must be at least 1ms")
	rooted := field.Map("participant: ", owner.Err(), func(p string) string { return "Limiter." + p })
	other := field.Check{Prefix: "participant: "}
	other.That(false, "MemberlistJoin", "needs MemberlistBind")
	other.Add(errors.New("participant: no field"))
	got := s.Explain(errors.Join(rooted, other.Err())).Error()
	want := strings.Join([]string{
		"--window: must be positive, got 0s",
		"participant: Limiter.SlotTTL: must be at least 1ms",
		"--memberlist-join: needs --memberlist-bind",
		"participant: no field",
	}, "\n")
	if got != want {
		t.Errorf("Explain:\n%s\nwant\n%s", got, want)
	}
	if s.Explain(nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}
