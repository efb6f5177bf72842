package main

import (
	"testing"
)

// TestSecretRoll checks the Secret-roll assertion on hand-made snapshots: it must pass for
// exactly the readers of the changed Secret replaced, and fail for a reader left running, a
// bystander replaced, a Deployment whose ReplicaSet did not change, and no change at all.
func TestSecretRoll(t *testing.T) {
	before := func() *snapshot {
		return &snapshot{
			Objects: map[string]string{"secrets/ns/s1": "u-s1", "secrets/ns/s2": "u-s2"},
			Pods: map[string]pod{
				"ns/reader-0":   {UID: "r0", Owner: "StatefulSet/reader", Secrets: []string{"ns/s1"}},
				"ns/dep-abc-x":  {UID: "d0", Owner: "Deployment/dep", Secrets: []string{"ns/s1", "ns/s2"}},
				"ns/bystander0": {UID: "b0", Owner: "StatefulSet/bystander", Secrets: []string{"ns/s2"}},
			},
			SecretHashes: map[string]string{"ns/s1": "h1", "ns/s2": "h2"},
			Revisions: map[string]string{
				"StatefulSet/ns/reader": "rev1", "Deployment/ns/dep": "rs1", "StatefulSet/ns/bystander": "revb",
			},
		}
	}
	rolled := func() *snapshot {
		s := before()
		s.SecretHashes["ns/s1"] = "h1-new"
		s.Pods["ns/reader-0"] = pod{UID: "r1", Owner: "StatefulSet/reader", Secrets: []string{"ns/s1"}}
		delete(s.Pods, "ns/dep-abc-x")
		s.Pods["ns/dep-def-y"] = pod{UID: "d1", Owner: "Deployment/dep", Secrets: []string{"ns/s1", "ns/s2"}}
		s.Revisions["StatefulSet/ns/reader"] = "rev2"
		s.Revisions["Deployment/ns/dep"] = "rs2"
		return s
	}
	tests := []struct {
		name   string
		after  func() *snapshot
		passes bool
	}{
		{"exactly the readers rolled", rolled, true},
		{"a reader not replaced", func() *snapshot {
			s := rolled()
			s.Pods["ns/reader-0"] = before().Pods["ns/reader-0"]
			return s
		}, false},
		{"a bystander replaced", func() *snapshot {
			s := rolled()
			s.Pods["ns/bystander0"] = pod{UID: "b1", Owner: "StatefulSet/bystander", Secrets: []string{"ns/s2"}}
			return s
		}, false},
		{"the Deployment kept its ReplicaSet", func() *snapshot {
			s := rolled()
			s.Revisions["Deployment/ns/dep"] = "rs1"
			return s
		}, false},
		{"a bystander's revision changed", func() *snapshot {
			s := rolled()
			s.Revisions["StatefulSet/ns/bystander"] = "revb2"
			return s
		}, false},
		{"a Secret replaced", func() *snapshot {
			s := rolled()
			s.Objects["secrets/ns/s1"] = "u-s1-new"
			return s
		}, false},
		{"no Secret changed", before, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &checker{}
			c.secretRoll(before(), tt.after())
			if got := len(c.fails) == 0; got != tt.passes {
				t.Errorf("passes = %v, want %v (failures: %q)", got, tt.passes, c.fails)
			}
		})
	}
}

// TestUnchangedAndRemoved checks the identity comparisons of the region-removal steps.
func TestUnchangedAndRemoved(t *testing.T) {
	base := func() *snapshot {
		return &snapshot{
			Objects: map[string]string{
				"namespaces//quota-ap": "n-ap", "namespaces//quota-eu": "n-eu",
				"services/quota-ap/x": "s-ap", "services/quota-eu/x": "s-eu",
			},
			Pods: map[string]pod{"quota-eu/p": {UID: "p"}},
		}
	}
	c := &checker{}
	c.unchanged(base(), base())
	if len(c.fails) != 0 {
		t.Errorf("identical snapshots: %q", c.fails)
	}
	replaced := base()
	replaced.Objects["services/quota-eu/x"] = "s-eu-2"
	c = &checker{}
	c.unchanged(base(), replaced)
	if len(c.fails) == 0 {
		t.Error("a replaced Service passed unchanged")
	}
	repod := base()
	repod.Pods["quota-eu/p"] = pod{UID: "p2"}
	c = &checker{}
	c.unchanged(base(), repod)
	if len(c.fails) == 0 {
		t.Error("a replaced pod passed unchanged")
	}

	gone := base()
	delete(gone.Objects, "namespaces//quota-ap")
	delete(gone.Objects, "services/quota-ap/x")
	c = &checker{}
	c.sameObjects(base(), gone, "quota-ap", "removal")
	if len(c.fails) != 0 {
		t.Errorf("removing quota-ap's objects: %q", c.fails)
	}
	alsoEU := base()
	delete(alsoEU.Objects, "namespaces//quota-ap")
	delete(alsoEU.Objects, "services/quota-ap/x")
	delete(alsoEU.Objects, "services/quota-eu/x")
	c = &checker{}
	c.sameObjects(base(), alsoEU, "quota-ap", "removal")
	if len(c.fails) == 0 {
		t.Error("deleting an object of quota-eu passed the removal of quota-ap")
	}
}
