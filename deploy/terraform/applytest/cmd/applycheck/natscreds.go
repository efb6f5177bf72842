package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// natsProcess is one limiter pod's NATS identity as the API server holds it: what its pod spec
// says it connects as, and the password its Secret gives it.
type natsProcess struct {
	Pod      string `json:"pod"`
	Region   string `json:"region"`
	Process  string `json:"process"`
	User     string `json:"user"`
	Secret   string `json:"secret,omitempty"`
	Password string `json:"password,omitempty"`
}

// natsCreds writes into dir what deploy/terraform/natsprobe needs to run region ns's NATS
// configuration on loopback, all read from the API server: nats.conf (ConfigMap nats-<r>),
// server-env.json (the NATS container's environment, each password from Secret nats-<r> as the
// pod gets it) and processes.json (the first two limiter pods of ns with their passwords, from
// each pod's own Secret, then the first limiter process of otherNS, without a password). It
// fails when the two pods share a Secret or a password, or a pod's NATS user is not its
// process's.
func (c *checker) natsCreds(ctx context.Context, ns, otherNS, dir string) {
	region := strings.TrimPrefix(ns, "quota-")
	name := "nats-" + region
	cm, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.failf("natscreds: configmap %s/%s: %v", ns, name, err)
		return
	}
	conf, ok := cm.Data["nats.conf"]
	if !ok {
		c.failf("natscreds: configmap %s/%s has no nats.conf", ns, name)
		return
	}
	sts, err := c.kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		c.failf("natscreds: statefulset %s/%s: %v", ns, name, err)
		return
	}
	env := map[string]string{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v, err := c.secretValue(ctx, ns, e.ValueFrom.SecretKeyRef)
			if err != nil {
				c.failf("natscreds: %s env %s: %v", name, e.Name, err)
				return
			}
			env[e.Name] = v
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = name + "-0"
		default:
			env[e.Name] = e.Value
		}
	}

	mine, err := c.limiterProcesses(ctx, ns, true)
	if err != nil {
		c.failf("natscreds: %v", err)
		return
	}
	other, err := c.limiterProcesses(ctx, otherNS, false)
	if err != nil {
		c.failf("natscreds: %v", err)
		return
	}
	if len(mine) < 2 || len(other) < 1 {
		c.failf("natscreds: %d limiter pods in %s and %d in %s: need two and one", len(mine), ns, len(other), otherNS)
		return
	}
	a, b := mine[0], mine[1]
	if a.Secret == b.Secret || a.Password == b.Password {
		c.failf("natscreds: pods %s and %s share their NATS credential (Secret %s / %s)", a.Pod, b.Pod, a.Secret, b.Secret)
	}
	for _, p := range []natsProcess{a, b, other[0]} {
		if want := "limiter-" + p.Region + "." + p.Process; p.User != want {
			c.failf("natscreds: pod %s connects as %q, not its process's user %q", p.Pod, p.User, want)
		}
	}
	if len(c.fails) > 0 {
		return
	}
	fmt.Printf("pod %s: process %s, user %s, password from Secret %s\n", a.Pod, a.Process, a.User, a.Secret)
	fmt.Printf("pod %s: process %s, user %s, password from Secret %s\n", b.Pod, b.Process, b.User, b.Secret)
	other[0].Password, other[0].Secret = "", ""
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.failf("natscreds: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), []byte(conf), 0o600); err != nil {
		c.failf("natscreds: %v", err)
		return
	}
	if err := writeJSON(filepath.Join(dir, "server-env.json"), env); err != nil {
		c.failf("natscreds: %v", err)
		return
	}
	if err := writeJSON(filepath.Join(dir, "processes.json"), []natsProcess{a, b, other[0]}); err != nil {
		c.failf("natscreds: %v", err)
	}
}

// limiterProcesses returns ns's limiter pods, by name, with their process (QUOTA_PROCESS_ID),
// NATS user (--nats-user) and, with passwords, the QUOTA_NATS_PASSWORD of their Secret.
func (c *checker) limiterProcesses(ctx context.Context, ns string, passwords bool) ([]natsProcess, error) {
	pl, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=regional-limiter"})
	if err != nil {
		return nil, fmt.Errorf("list limiter pods of %s: %w", ns, err)
	}
	sort.Slice(pl.Items, func(i, j int) bool { return pl.Items[i].Name < pl.Items[j].Name })
	var out []natsProcess
	for _, p := range pl.Items {
		ctr := p.Spec.Containers[0]
		np := natsProcess{Pod: p.Name, Region: p.Labels["quota.dev/region"]}
		for _, a := range ctr.Args {
			if v, ok := strings.CutPrefix(a, "--nats-user="); ok {
				np.User = v
			}
		}
		for _, e := range ctr.Env {
			switch {
			case e.Name == "QUOTA_PROCESS_ID":
				np.Process = e.Value
			case e.Name == "QUOTA_NATS_PASSWORD" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
				np.Secret = e.ValueFrom.SecretKeyRef.Name
				if passwords {
					v, err := c.secretValue(ctx, ns, e.ValueFrom.SecretKeyRef)
					if err != nil {
						return nil, fmt.Errorf("pod %s/%s: %w", ns, p.Name, err)
					}
					np.Password = v
				}
			}
		}
		if np.Process == "" || np.User == "" || (passwords && np.Password == "") {
			return nil, fmt.Errorf("pod %s/%s: no QUOTA_PROCESS_ID value, --nats-user or QUOTA_NATS_PASSWORD from a Secret", ns, p.Name)
		}
		out = append(out, np)
	}
	return out, nil
}

func (c *checker) secretValue(ctx context.Context, ns string, ref *corev1.SecretKeySelector) (string, error) {
	s, err := c.kube.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("secret %s/%s: %w", ns, ref.Name, err)
	}
	v, ok := s.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("secret %s/%s has no key %s", ns, ref.Name, ref.Key)
	}
	return string(v), nil
}
