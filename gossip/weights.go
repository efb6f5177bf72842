package gossip

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParseWeights parses historical region weights written as
// "eu=0.5,us=0.3,ap=0.2" (the --region-weights flag). Empty means none.
func ParseWeights(s string) (map[string]float64, error) {
	out := map[string]float64{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("gossip: region weight %q: want region=weight", part)
		}
		if err := checkName("region", name); err != nil {
			return nil, fmt.Errorf("gossip: region weight %q: %w", part, err)
		}
		w, err := strconv.ParseFloat(val, 64)
		if err != nil || math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
			return nil, fmt.Errorf("gossip: region weight %q: weight must be a finite number ≥ 0", part)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("gossip: region weight %q: region repeated", part)
		}
		out[name] = w
	}
	return out, nil
}
