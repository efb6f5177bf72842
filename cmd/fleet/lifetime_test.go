package main

import (
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestLifetimeDefinesEveryMethod calls every exported method of testing.TB
// on a lifetime: none may reach the embedded nil TB (which would panic), so
// a method a new Go release adds to testing.TB fails here, not in a fleet.
func TestLifetimeDefinesEveryMethod(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	args := map[string][]any{
		"Cleanup": {func() {}},
		"Setenv":  {"QUOTA_FLEET_LIFETIME_TEST", "1"},
		"Chdir":   {wd},
	}
	tb := reflect.TypeFor[testing.TB]()
	for i := range tb.NumMethod() {
		m := tb.Method(i)
		if !m.IsExported() {
			continue
		}
		t.Run(m.Name, func(t *testing.T) {
			l, err := newLifetime(io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			defer l.close()
			in := make([]reflect.Value, m.Type.NumIn())
			for j := range in {
				if a := args[m.Name]; j < len(a) {
					in[j] = reflect.ValueOf(a[j])
				} else {
					in[j] = reflect.Zero(m.Type.In(j))
				}
			}
			var panicked any
			l.runGuarded(func() {
				defer func() { panicked = recover() }()
				reflect.ValueOf(l).MethodByName(m.Name).Call(in)
			})
			if panicked != nil {
				t.Errorf("%s panicked: %v", m.Name, panicked)
			}
		})
	}
}

// TestLifetime checks what the harness relies on: cleanups run last in
// first out, all of them even when one panics; Fatal ends the calling
// goroutine and marks the lifetime failed; TempDirs are under Root, and
// close removes Root.
func TestLifetime(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(l *lifetime, order *[]string)
		// wantOK is runGuarded's answer: false once Fatal or Errorf
		// was called (a cleanup's panic comes later, at close).
		wantOK     bool
		wantFailed bool
		wantOrder  []string
	}{
		{
			name: "cleanups last in first out",
			run: func(l *lifetime, order *[]string) {
				for _, s := range []string{"first", "second", "third"} {
					l.Cleanup(func() { *order = append(*order, s) })
				}
			},
			wantOK:    true,
			wantOrder: []string{"third", "second", "first"},
		},
		{
			name: "a panicking cleanup fails and the others run",
			run: func(l *lifetime, order *[]string) {
				l.Cleanup(func() { *order = append(*order, "first") })
				l.Cleanup(func() { panic("boom") })
				l.Cleanup(func() { *order = append(*order, "third") })
			},
			wantOK:     true,
			wantFailed: true,
			wantOrder:  []string{"third", "first"},
		},
		{
			name: "Fatal ends the goroutine; cleanups registered before it run",
			run: func(l *lifetime, order *[]string) {
				l.Cleanup(func() { *order = append(*order, "before") })
				l.Fatalf("cannot start %s", "redis-server")
				l.Cleanup(func() { *order = append(*order, "after Fatal") })
			},
			wantFailed: true,
			wantOrder:  []string{"before"},
		},
		{
			name: "Errorf fails and goes on",
			run: func(l *lifetime, order *[]string) {
				l.Errorf("a check failed")
				l.Cleanup(func() { *order = append(*order, "after Errorf") })
			},
			wantFailed: true,
			wantOrder:  []string{"after Errorf"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			l, err := newLifetime(&out)
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			ok := l.runGuarded(func() { tc.run(l, &order) })
			l.close()
			if ok != tc.wantOK {
				t.Errorf("runGuarded = %v, want %v", ok, tc.wantOK)
			}
			if l.Failed() != tc.wantFailed {
				t.Errorf("Failed() = %v, want %v (output %q)", l.Failed(), tc.wantFailed, out.String())
			}
			if !slices.Equal(order, tc.wantOrder) {
				t.Errorf("cleanups ran %v, want %v", order, tc.wantOrder)
			}
		})
	}
}

func TestLifetimeTempDir(t *testing.T) {
	l, err := newLifetime(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	a, b := l.TempDir(), l.TempDir()
	if a == b || !strings.HasPrefix(a, l.Root()+string(os.PathSeparator)) || !strings.HasPrefix(b, l.Root()+string(os.PathSeparator)) {
		t.Fatalf("TempDir gave %s and %s, want two directories under %s", a, b, l.Root())
	}
	if err := os.WriteFile(a+"/log", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.close()
	if _, err := os.Stat(l.Root()); !os.IsNotExist(err) {
		t.Errorf("Root %s after close: %v, want it removed", l.Root(), err)
	}
}
