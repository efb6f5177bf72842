package participant_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/participant"
)

// TestRegionSet: the one region-set rule, with its errors naming the
// inputs as the caller names them (a daemon's flags here).
func TestRegionSet(t *testing.T) {
	flags := participant.RegionSetNames{Region: "--region", Regions: "--regions", RegionWeights: "--region-weights", NATS: "--nats"}
	w := func(rs ...string) map[string]float64 {
		m := map[string]float64{}
		for _, r := range rs {
			m[r] = 1
		}
		return m
	}
	tests := []struct {
		name     string
		regions  []string
		weights  map[string]float64
		embedded bool
		want     []string // nil: an error equal to err
		err      string
	}{
		{"embedded, none given", nil, nil, true, []string{"eu"}, ""},
		{"given", []string{"us", "eu"}, nil, false, []string{"us", "eu"}, ""},
		{"from weights, sorted", nil, w("us", "eu", "ap"), false, []string{"ap", "eu", "us"}, ""},
		{"both agreeing", []string{"us", "eu"}, w("eu", "us"), false, []string{"us", "eu"}, ""},
		{"both disagreeing", []string{"eu", "us", "ap"}, w("eu", "us"), true, nil,
			"--regions and --region-weights disagree: --regions names ap,eu,us, --region-weights eu,us; weigh every region of --regions, or give only one of them"},
		{"none with NATS", nil, nil, false, nil,
			"--regions: required with --nats (its servers may be joined to other regions'): name every region sharing limits, this one included, or give --region-weights; a single-region deployment gives --regions eu"},
		{"own missing", []string{"us", "ap"}, nil, true, nil, `--regions: must include --region "eu", got us,ap`},
		{"own not weighed", nil, w("us"), false, nil, `--regions: must include --region "eu", got us`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := participant.RegionSet("eu", tt.regions, tt.weights, tt.embedded, flags)
			if tt.want == nil {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("err = %v\nwant  %s", err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("RegionSet = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestRegionSetNamesFields: Options.RegionSet names the Options' fields,
// once prefixed by the package.
func TestRegionSetNamesFields(t *testing.T) {
	o := participant.DefaultOptions()
	o.Region, o.Regions = "eu", []string{"us"}
	_, err := o.RegionSet()
	if err == nil || err.Error() != `participant: Regions: must include Region "eu", got us` {
		t.Fatalf("err = %v", err)
	}
	if _, err := participant.New(o); err == nil || strings.Count(err.Error(), "participant: participant:") > 0 {
		t.Fatalf("New: err = %v, want one package prefix", err)
	}
}
