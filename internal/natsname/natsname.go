// Package natsname checks names that NATS places things by, for the
// packages that take them from configuration (the usage stream's and the
// catalogue bucket's cluster).
package natsname

import "fmt"

// CheckCluster returns an error when name, not empty, cannot be a NATS
// cluster name (what a JetStream placement names): no spaces or control
// characters, dots or wildcards. Empty is valid: no placement.
func CheckCluster(name string) error {
	for _, r := range name {
		switch {
		case r <= ' ' || r == 0x7f:
			return fmt.Errorf("%q is not a NATS cluster name: no spaces or control characters", name)
		case r == '.':
			return fmt.Errorf("%q is not a NATS cluster name: no dots", name)
		case r == '*' || r == '>':
			return fmt.Errorf("%q is not a NATS cluster name: no wildcards ('*', '>')", name)
		}
	}
	return nil
}
