package gossip

import (
	"fmt"
	"strings"
)

// ParseRegions parses a region set written as "eu,us,ap" (the --regions
// flag): region names (NATS subject tokens), each once. Spaces around names
// are trimmed. Empty means none.
func ParseRegions(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name := strings.TrimSpace(part)
		if err := checkName("region", name); err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("gossip: region %q repeated", name)
		}
		seen[name] = true
		out = append(out, name)
	}
	return out, nil
}
