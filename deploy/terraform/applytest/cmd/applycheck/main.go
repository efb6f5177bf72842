// Command applycheck is the assertion half of the apply test (deploy/terraform/applytest,
// make tf-apply-test): apply-test.sh starts a control plane on loopback and runs Terraform; this
// program prepares the cluster (nodes in zones, volumes, their kubelets played) and asserts, through the API
// server, on what Terraform applied. Each subcommand exits non-zero, naming every failed
// assertion, when one fails.
//
//	applycheck freeport N                   print N free loopback TCP ports
//	applycheck kubelet                      play the nodes' kubelets until stopped (kubelet.go)
//	applycheck cluster                      create the nodes and the volumes, wait until Ready
//	applycheck rollout                      wait until every Deployment, StatefulSet, pod and PDB settled
//	applycheck state FILE                   every object in `terraform show -json` FILE exists, with its uid; no other
//	applycheck spread                       pods placed as their node affinity, spread and anti-affinity say
//	applycheck pdb NAMESPACE                each PDB's budget of evictions is granted, the next one refused
//	applycheck tokens VARS                  each region's Secrets hold its own check/read tokens of VARS, no other's
//	applycheck natscreds NS OTHER_NS DIR    write NS's NATS config, its servers' env and two limiter pods' credentials to DIR
//	applycheck snapshot FILE                record every object's identity (and Secrets' data hashes)
//	applycheck secret-roll BEFORE AFTER     exactly the pods of changed Secrets rolled
//	applycheck removed BEFORE AFTER NS      exactly namespace NS's objects are gone, nothing else replaced
//	applycheck unchanged BEFORE AFTER       no object and no pod was replaced, added or deleted
//	applycheck empty                        nothing of the deploy is left
//
// Flags (before the subcommand): -kubeconfig (the admin kubeconfig apply-test.sh writes),
// -timeout (the deadline of each wait).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The cluster apply-test.sh builds: two nodes in each of the zones the regions use, and two
// in a zone no region lists (node affinity must keep every pod out of it).
var (
	zones      = []string{"zone-a", "zone-b", "zone-c"}
	otherZone  = "zone-x"
	perZone    = 2
	volumes    = 60 // PersistentVolumes of 1Gi: every StatefulSet's claims bind to these
	zoneKey    = "topology.kubernetes.io/zone"
	partOf     = "app.kubernetes.io/part-of=quota"
	managedBy  = "app.kubernetes.io/managed-by=terraform"
	systemNSes = []string{"default", "kube-system", "kube-public", "kube-node-lease"}
)

type checker struct {
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	disco   discovery.DiscoveryInterface
	timeout time.Duration
	fails   []string
}

func (c *checker) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.fails = append(c.fails, msg)
	fmt.Fprintln(os.Stderr, "FAIL:", msg)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig of the test control plane")
	timeout := flag.Duration("timeout", 5*time.Minute, "deadline of each wait")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: applycheck [-kubeconfig F] [-timeout D] SUBCOMMAND [ARGS]")
		os.Exit(2)
	}
	if args[0] == "freeport" {
		n := 1
		if len(args) > 1 {
			n, _ = strconv.Atoi(args[1])
		}
		if err := freePorts(n); err != nil {
			fmt.Fprintln(os.Stderr, "freeport:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(1)
	}
	cfg.QPS, cfg.Burst = 200, 400
	c := &checker{timeout: *timeout}
	c.kube = kubernetes.NewForConfigOrDie(cfg)
	c.dyn = dynamic.NewForConfigOrDie(cfg)
	c.disco = c.kube.Discovery()
	if args[0] == "kubelet" {
		// Runs until apply-test.sh stops it.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := kubelet(ctx, c.kube); err != nil {
			fmt.Fprintln(os.Stderr, "kubelet:", err)
			os.Exit(1)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2**timeout)
	defer cancel()

	need := func(n int) {
		if len(args) != n+1 {
			fmt.Fprintf(os.Stderr, "%s: %d arguments expected\n", args[0], n)
			os.Exit(2)
		}
	}
	switch args[0] {
	case "cluster":
		c.cluster(ctx)
	case "rollout":
		c.rollout(ctx)
	case "state":
		need(1)
		c.state(ctx, args[1])
	case "spread":
		c.spread(ctx)
	case "pdb":
		need(1)
		c.pdb(ctx, args[1])
	case "tokens":
		need(1)
		c.tokens(ctx, args[1])
	case "natscreds":
		need(3)
		c.natsCreds(ctx, args[1], args[2], args[3])
	case "snapshot":
		need(1)
		s := c.snapshot(ctx)
		if len(c.fails) == 0 {
			if err := writeJSON(args[1], s); err != nil {
				c.failf("snapshot: %v", err)
			}
		}
	case "secret-roll":
		need(2)
		c.secretRoll(readSnap(args[1]), readSnap(args[2]))
	case "removed":
		need(3)
		c.removed(ctx, readSnap(args[1]), readSnap(args[2]), args[3])
	case "unchanged":
		need(2)
		c.unchanged(readSnap(args[1]), readSnap(args[2]))
	case "empty":
		c.empty(ctx)
	default:
		fmt.Fprintln(os.Stderr, "unknown subcommand", args[0])
		os.Exit(2)
	}
	if len(c.fails) > 0 {
		fmt.Fprintf(os.Stderr, "applycheck %s: %d assertion(s) failed\n", args[0], len(c.fails))
		os.Exit(1)
	}
	fmt.Printf("applycheck %s: ok\n", args[0])
}

func freePorts(n int) error {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

// poll calls f every 500 ms until it returns true or the deadline passes; the last reason f gave
// is the failure.
func (c *checker) poll(ctx context.Context, what string, f func() (bool, string)) bool {
	deadline := time.Now().Add(c.timeout)
	reason := ""
	for {
		ok, why := f()
		if ok {
			return true
		}
		reason = why
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.failf("%s: not within %s: %s", what, c.timeout, reason)
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// cluster creates the nodes (applycheck kubelet, started before, makes them Ready and
// runs their pods) and static volumes for the StatefulSets' claims (no provisioner runs here).
func (c *checker) cluster(ctx context.Context) {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	var names []string
	for _, z := range append(slices.Clone(zones), otherZone) {
		for i := range perZone {
			name := fmt.Sprintf("node-%s-%d", z, i)
			names = append(names, name)
			node := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{
					Name: name,
					Labels: map[string]string{
						zoneKey:                  z,
						"kubernetes.io/hostname": name,
						"kubernetes.io/os":       "linux",
						"kubernetes.io/arch":     "amd64",
					},
				},
				Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc},
			}
			if _, err := c.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				c.failf("create node %s: %v", name, err)
			}
		}
	}
	for i := range volumes {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("applytest-%02d", i)},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: fmt.Sprintf("/nonexistent/applytest-%02d", i)},
				},
			},
		}
		if _, err := c.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			c.failf("create volume %s: %v", pv.Name, err)
		}
	}
	c.poll(ctx, "nodes Ready (applycheck kubelet reports them)", func() (bool, string) {
		for _, name := range names {
			n, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if !nodeReady(n) {
				return false, "node " + name + " not Ready"
			}
		}
		return true, ""
	})
	// The service account admission needs the default ServiceAccount of a namespace before its
	// pods can be created; the controller-manager makes it. Wait for default's as a sign.
	c.poll(ctx, "controller-manager creates ServiceAccounts", func() (bool, string) {
		_, err := c.kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// quotaNamespaces returns the namespaces the deploy created (label part-of=quota).
func (c *checker) quotaNamespaces(ctx context.Context) ([]string, error) {
	l, err := c.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: partOf})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var out []string
	for _, ns := range l.Items {
		if ns.DeletionTimestamp == nil {
			out = append(out, ns.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// rollout waits until no namespace is terminating and, in every namespace of the deploy, every
// Deployment and StatefulSet has rolled out its current template, every pod is Running and
// Ready, and every PDB's status is current; it fails when there is no workload at all.
func (c *checker) rollout(ctx context.Context) {
	var summary string
	c.poll(ctx, "rollout", func() (bool, string) {
		all, err := c.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, ns := range all.Items {
			if ns.DeletionTimestamp != nil {
				return false, "namespace " + ns.Name + " is terminating"
			}
		}
		nss, err := c.quotaNamespaces(ctx)
		if err != nil {
			return false, err.Error()
		}
		if len(nss) == 0 {
			return false, "no namespace labelled " + partOf
		}
		var deps, sets, pods, pdbs int
		for _, ns := range nss {
			dl, err := c.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, d := range dl.Items {
				if why := deploymentPending(&d); why != "" {
					return false, fmt.Sprintf("deployment %s/%s: %s", ns, d.Name, why)
				}
			}
			sl, err := c.kube.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, s := range sl.Items {
				if why := statefulSetPending(&s); why != "" {
					return false, fmt.Sprintf("statefulset %s/%s: %s", ns, s.Name, why)
				}
			}
			pl, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, p := range pl.Items {
				if !podReady(&p) {
					return false, fmt.Sprintf("pod %s/%s: %s, not Ready", ns, p.Name, p.Status.Phase)
				}
			}
			bl, err := c.kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, b := range bl.Items {
				if b.Status.ObservedGeneration != b.Generation || b.Status.CurrentHealthy != b.Status.ExpectedPods {
					return false, fmt.Sprintf("pdb %s/%s: status not current (healthy %d of %d)", ns, b.Name, b.Status.CurrentHealthy, b.Status.ExpectedPods)
				}
			}
			deps, sets, pods, pdbs = deps+len(dl.Items), sets+len(sl.Items), pods+len(pl.Items), pdbs+len(bl.Items)
		}
		summary = fmt.Sprintf("%d namespaces, %d deployments, %d statefulsets, %d pods Ready, %d PDBs current", len(nss), deps, sets, pods, pdbs)
		if deps == 0 || sets == 0 || pods == 0 {
			return false, summary
		}
		return true, ""
	})
	if summary != "" {
		fmt.Println(summary)
	}
}

func deploymentPending(d *appsv1.Deployment) string {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	switch {
	case st.ObservedGeneration < d.Generation:
		return "generation not observed"
	case st.UpdatedReplicas != want || st.Replicas != want:
		return fmt.Sprintf("%d of %d updated, %d in all", st.UpdatedReplicas, want, st.Replicas)
	case st.AvailableReplicas != want || st.ReadyReplicas != want:
		return fmt.Sprintf("%d of %d available", st.AvailableReplicas, want)
	}
	return ""
}

func statefulSetPending(s *appsv1.StatefulSet) string {
	want := int32(1)
	if s.Spec.Replicas != nil {
		want = *s.Spec.Replicas
	}
	st := s.Status
	switch {
	case st.ObservedGeneration < s.Generation:
		return "generation not observed"
	case st.UpdateRevision != st.CurrentRevision:
		return fmt.Sprintf("revision %s not rolled out (current %s)", st.UpdateRevision, st.CurrentRevision)
	case st.ReadyReplicas != want || st.UpdatedReplicas != want || st.Replicas != want:
		return fmt.Sprintf("%d of %d ready, %d updated", st.ReadyReplicas, want, st.UpdatedReplicas)
	}
	return ""
}

// gvrByType maps the Terraform resource types of the deploy to their API resources. A type not
// listed fails the state check, so that a new kind of object is noticed here.
var gvrByType = map[string]schema.GroupVersionResource{
	"kubernetes_namespace_v1":             {Version: "v1", Resource: "namespaces"},
	"kubernetes_secret_v1":                {Version: "v1", Resource: "secrets"},
	"kubernetes_config_map_v1":            {Version: "v1", Resource: "configmaps"},
	"kubernetes_service_v1":               {Version: "v1", Resource: "services"},
	"kubernetes_service_account_v1":       {Version: "v1", Resource: "serviceaccounts"},
	"kubernetes_stateful_set_v1":          {Group: "apps", Version: "v1", Resource: "statefulsets"},
	"kubernetes_deployment_v1":            {Group: "apps", Version: "v1", Resource: "deployments"},
	"kubernetes_network_policy_v1":        {Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	"kubernetes_pod_disruption_budget_v1": {Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
}

type tfModule struct {
	Resources []struct {
		Address string         `json:"address"`
		Mode    string         `json:"mode"`
		Type    string         `json:"type"`
		Values  map[string]any `json:"values"`
	} `json:"resources"`
	ChildModules []tfModule `json:"child_modules"`
}

// state checks that every kubernetes object in the Terraform state (terraform show -json) is on
// the API server with the uid the provider recorded, and that every object of those kinds
// labelled managed-by=terraform is in the state.
func (c *checker) state(ctx context.Context, file string) {
	var doc struct {
		Values struct {
			RootModule tfModule `json:"root_module"`
		} `json:"values"`
	}
	b, err := os.ReadFile(file)
	if err == nil {
		err = json.Unmarshal(b, &doc)
	}
	if err != nil {
		c.failf("read state %s: %v", file, err)
		return
	}
	inState := map[string]bool{}
	var walk func(m tfModule)
	n := 0
	walk = func(m tfModule) {
		for _, r := range m.Resources {
			if r.Mode != "managed" || !strings.HasPrefix(r.Type, "kubernetes_") {
				continue
			}
			gvr, ok := gvrByType[r.Type]
			if !ok {
				c.failf("%s: type %s unknown to applycheck (add it to gvrByType)", r.Address, r.Type)
				continue
			}
			md, _ := r.Values["metadata"].([]any)
			if len(md) != 1 {
				c.failf("%s: no metadata in the state", r.Address)
				continue
			}
			m := md[0].(map[string]any)
			name, _ := m["name"].(string)
			ns, _ := m["namespace"].(string)
			uid, _ := m["uid"].(string)
			n++
			var obj *unstructured.Unstructured
			if ns == "" {
				obj, err = c.dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
			} else {
				obj, err = c.dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			}
			if err != nil {
				c.failf("%s (%s %s/%s): %v", r.Address, gvr.Resource, ns, name, err)
				continue
			}
			if string(obj.GetUID()) != uid {
				c.failf("%s: uid %s on the server, %s in the state", r.Address, obj.GetUID(), uid)
			}
			inState[gvr.Resource+"/"+ns+"/"+name] = true
		}
		for _, child := range m.ChildModules {
			walk(child)
		}
	}
	walk(doc.Values.RootModule)
	if n == 0 {
		c.failf("state %s holds no kubernetes object", file)
	}
	extra := 0
	for _, gvr := range gvrByType {
		l, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: managedBy})
		if err != nil {
			c.failf("list %s: %v", gvr.Resource, err)
			continue
		}
		for _, o := range l.Items {
			if !inState[gvr.Resource+"/"+o.GetNamespace()+"/"+o.GetName()] {
				extra++
				c.failf("%s %s/%s is labelled %s but not in the state", gvr.Resource, o.GetNamespace(), o.GetName(), managedBy)
			}
		}
	}
	fmt.Printf("%d objects of the state found on the API server with their uids, %d unmanaged\n", n, extra)
}

// matches reports whether node labels satisfy a required node affinity (nil: any node).
func matchesNodeAffinity(p *corev1.Pod, nodeLabels map[string]string) bool {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		ok := true
		for _, e := range term.MatchExpressions {
			v, has := nodeLabels[e.Key]
			switch e.Operator {
			case corev1.NodeSelectorOpIn:
				ok = ok && has && slices.Contains(e.Values, v)
			case corev1.NodeSelectorOpNotIn:
				ok = ok && !(has && slices.Contains(e.Values, v))
			case corev1.NodeSelectorOpExists:
				ok = ok && has
			case corev1.NodeSelectorOpDoesNotExist:
				ok = ok && !has
			default:
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// spread checks every pod of the deploy against its own scheduling constraints, on the nodes
// it actually runs on: required node affinity, topology spread constraints that must hold
// (DoNotSchedule: the skew of matching pods over the eligible domains is at most maxSkew), and
// required pod anti-affinity (no two matching pods in one domain). It fails when the limiters
// (spread) or the NATS servers (anti-affinity) carry no such constraint, or when a workload of
// the region module (limiter, NATS, Redis, control plane) has no required node affinity; other
// workloads without one (the ledger module's) are listed, since two nodes of zone-x, a zone no
// region lists, show where they may land.
func (c *checker) spread(ctx context.Context) {
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		c.failf("list nodes: %v", err)
		return
	}
	nodeLabels := map[string]map[string]string{}
	for _, n := range nodes.Items {
		nodeLabels[n.Name] = n.Labels
	}
	nss, err := c.quotaNamespaces(ctx)
	if err != nil {
		c.failf("%v", err)
		return
	}
	var spreadChecked, antiChecked, affinityChecked int
	unconstrainedAll := map[string]map[string]bool{}
	for _, ns := range nss {
		pl, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.failf("list pods %s: %v", ns, err)
			continue
		}
		pods := pl.Items
		// Per owner, the zones the pods run in, for the log.
		byOwner := map[string]map[string]int{}
		unconstrained := map[string]bool{}
		for i := range pods {
			p := &pods[i]
			nl, ok := nodeLabels[p.Spec.NodeName]
			if !ok {
				c.failf("pod %s/%s: on unknown node %q", ns, p.Name, p.Spec.NodeName)
				continue
			}
			owner := ownerName(p)
			if byOwner[owner] == nil {
				byOwner[owner] = map[string]int{}
			}
			byOwner[owner][nl[zoneKey]]++
			if !matchesNodeAffinity(p, nl) {
				c.failf("pod %s/%s: node %s does not satisfy its required node affinity", ns, p.Name, p.Spec.NodeName)
			}
			if p.Spec.Affinity != nil && p.Spec.Affinity.NodeAffinity != nil && p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
				affinityChecked++
			} else if !unconstrained[owner] {
				// Not a failure: the deploy promises zones for the region module's workloads
				// only (deploy/README.md "Disruption budgets, zones and resources").
				unconstrained[owner] = true
				fmt.Printf("note: %s %s has no required node affinity (pod %s runs in %s)\n", ns, owner, p.Name, nl[zoneKey])
			}
			for _, tsc := range p.Spec.TopologySpreadConstraints {
				if tsc.WhenUnsatisfiable != corev1.DoNotSchedule {
					continue
				}
				sel, err := metav1.LabelSelectorAsSelector(tsc.LabelSelector)
				if err != nil {
					c.failf("pod %s/%s: selector: %v", ns, p.Name, err)
					continue
				}
				counts := map[string]int{}
				for _, n := range nodes.Items {
					if v, ok := n.Labels[tsc.TopologyKey]; ok && matchesNodeAffinity(p, n.Labels) {
						counts[v] += 0
					}
				}
				for j := range pods {
					q := &pods[j]
					if sel.Matches(labels.Set(q.Labels)) {
						if v, ok := nodeLabels[q.Spec.NodeName][tsc.TopologyKey]; ok {
							if _, eligible := counts[v]; eligible {
								counts[v]++
							}
						}
					}
				}
				lo, hi := -1, 0
				for _, k := range counts {
					if lo < 0 || k < lo {
						lo = k
					}
					hi = max(hi, k)
				}
				if hi-lo > int(tsc.MaxSkew) {
					c.failf("pod %s/%s: spread over %s is %v, skew %d > maxSkew %d", ns, p.Name, tsc.TopologyKey, counts, hi-lo, tsc.MaxSkew)
				}
				if strings.HasPrefix(owner, "StatefulSet/limiter-") && tsc.TopologyKey == zoneKey {
					spreadChecked++
				}
			}
			if p.Spec.Affinity != nil && p.Spec.Affinity.PodAntiAffinity != nil {
				for _, term := range p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
					sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
					if err != nil {
						c.failf("pod %s/%s: selector: %v", ns, p.Name, err)
						continue
					}
					mine := nl[term.TopologyKey]
					for j := range pods {
						q := &pods[j]
						if q.Name != p.Name && sel.Matches(labels.Set(q.Labels)) && nodeLabels[q.Spec.NodeName][term.TopologyKey] == mine {
							c.failf("pods %s/%s and %s share %s=%s against a required anti-affinity", ns, p.Name, q.Name, term.TopologyKey, mine)
						}
					}
					if strings.HasPrefix(owner, "StatefulSet/nats-") && term.TopologyKey == zoneKey {
						antiChecked++
					}
				}
			}
		}
		unconstrainedAll[ns] = unconstrained
		var owners []string
		for o := range byOwner {
			owners = append(owners, o)
		}
		sort.Strings(owners)
		for _, o := range owners {
			fmt.Printf("%s %s: pods per zone %v\n", ns, o, byOwner[o])
		}
	}
	if spreadChecked == 0 {
		c.failf("no limiter pod has a DoNotSchedule zone spread constraint")
	}
	if antiChecked == 0 {
		c.failf("no NATS pod has a required zone anti-affinity")
	}
	if affinityChecked == 0 {
		c.failf("no pod has a required node affinity (the regions list zones)")
	}
	for _, owner := range []string{"StatefulSet/limiter-", "StatefulSet/nats-", "StatefulSet/redis-", "Deployment/control-plane-"} {
		for ns, owners := range unconstrainedAll {
			for o := range owners {
				if strings.HasPrefix(o, owner) {
					c.failf("%s %s: no required node affinity, though its region lists zones", ns, o)
				}
			}
		}
	}
	fmt.Printf("checked: %d limiter zone spreads, %d NATS zone anti-affinities, %d node affinities\n", spreadChecked, antiChecked, affinityChecked)
}

// ownerName returns Kind/name of the workload that owns a pod (a ReplicaSet's Deployment by the
// ReplicaSet's name: the pod-template-hash suffix is cut).
func ownerName(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			if o.Kind == "ReplicaSet" {
				if h := p.Labels["pod-template-hash"]; h != "" {
					return "Deployment/" + strings.TrimSuffix(o.Name, "-"+h)
				}
			}
			return o.Kind + "/" + o.Name
		}
	}
	return "Pod/" + p.Name
}

// pdb evicts, for every PodDisruptionBudget of the namespace, as many of its pods as the budget
// allows (disruptionsAllowed, once the status is current and every pod healthy), each through the
// Eviction API, and then one more, which the API server must refuse (429). It fails unless at
// least one budget granted an eviction and refused the one after it.
//
// Every node is cordoned first, as a drain does, and uncordoned at the end. Without it the check
// races: the fake kubelet replaces an evicted pod by a Ready one within milliseconds (a real pod takes
// seconds to start), so by the next eviction the budget may rightly allow one more.
func (c *checker) pdb(ctx context.Context, ns string) {
	bl, err := c.kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.failf("list pdbs %s: %v", ns, err)
		return
	}
	if len(bl.Items) == 0 {
		c.failf("namespace %s has no PodDisruptionBudget", ns)
		return
	}
	uncordon, err := c.cordon(ctx)
	defer uncordon()
	if err != nil {
		c.failf("cordon: %v", err)
		return
	}
	second := 0
	for _, b := range bl.Items {
		var pdb *policyv1.PodDisruptionBudget
		if !c.poll(ctx, "pdb "+ns+"/"+b.Name+" current", func() (bool, string) {
			pdb, err = c.kube.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, b.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			st := pdb.Status
			if st.ObservedGeneration != pdb.Generation || st.ExpectedPods == 0 || st.CurrentHealthy != st.ExpectedPods {
				return false, fmt.Sprintf("healthy %d of %d", st.CurrentHealthy, st.ExpectedPods)
			}
			return true, ""
		}) {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			c.failf("pdb %s: selector: %v", b.Name, err)
			continue
		}
		pl, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
		if err != nil {
			c.failf("pdb %s: list pods: %v", b.Name, err)
			continue
		}
		allowed := int(pdb.Status.DisruptionsAllowed)
		if allowed >= len(pl.Items) {
			c.failf("pdb %s: allows %d disruptions of %d pods: nothing to refuse", b.Name, allowed, len(pl.Items))
			continue
		}
		for i := 0; i <= allowed; i++ {
			p := pl.Items[i]
			err := c.kube.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns},
			})
			switch {
			case i < allowed && err != nil:
				c.failf("pdb %s (allows %d): eviction %d of pod %s refused: %v", b.Name, allowed, i+1, p.Name, err)
			case i < allowed:
				fmt.Printf("pdb %s (%s): eviction %d of %s granted\n", b.Name, budget(pdb), i+1, p.Name)
			case err == nil:
				c.failf("pdb %s (allows %d): eviction %d of pod %s was granted", b.Name, allowed, i+1, p.Name)
			case !apierrors.IsTooManyRequests(err):
				c.failf("pdb %s: eviction %d of pod %s failed, but not as a budget refusal (429): %v", b.Name, i+1, p.Name, err)
			default:
				fmt.Printf("pdb %s (%s): eviction %d of %s refused: %v\n", b.Name, budget(pdb), i+1, p.Name, err)
				if i >= 1 {
					second++
				}
			}
		}
	}
	if second == 0 {
		c.failf("no PodDisruptionBudget in %s refused a second eviction", ns)
	}
}

// budget is a PDB's spec as its YAML says it: minAvailable N or maxUnavailable N.
func budget(pdb *policyv1.PodDisruptionBudget) string {
	if v := pdb.Spec.MinAvailable; v != nil {
		return "minAvailable " + v.String()
	}
	if v := pdb.Spec.MaxUnavailable; v != nil {
		return "maxUnavailable " + v.String()
	}
	return "no budget"
}

// cordon marks every node unschedulable and returns what marks them schedulable again (the
// nodes it cordoned, also when it failed half way).
func (c *checker) cordon(ctx context.Context) (func(), error) {
	nodes, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return func() {}, fmt.Errorf("list nodes: %w", err)
	}
	var cordoned []string
	undo := func() {
		for _, name := range cordoned {
			if err := c.setUnschedulable(ctx, name, false); err != nil {
				c.failf("uncordon node %s: %v", name, err)
			}
		}
	}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			continue
		}
		if err := c.setUnschedulable(ctx, n.Name, true); err != nil {
			return undo, fmt.Errorf("node %s: %w", n.Name, err)
		}
		cordoned = append(cordoned, n.Name)
	}
	fmt.Printf("cordoned %d nodes: an evicted pod's replacement stays Pending until the check ends\n", len(cordoned))
	return undo, nil
}

func (c *checker) setUnschedulable(ctx context.Context, node string, on bool) error {
	patch := fmt.Appendf(nil, `{"spec":{"unschedulable":%t}}`, on)
	_, err := c.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// snapshot is what the identity checks compare: every object's uid (pods with the Secrets they
// use, and their controller), and each Secret's data hash.
type snapshot struct {
	// Objects: kind/namespace/name => uid, for every listable object in the namespaces of the
	// deploy and default, and the namespaces themselves; derived objects (pods, ReplicaSets,
	// ControllerRevisions, events, endpoints) are in Derived instead.
	Objects map[string]string `json:"objects"`
	Derived map[string]string `json:"derived"`
	// Pods: namespace/name => pod.
	Pods map[string]pod `json:"pods"`
	// SecretHashes: namespace/name => SHA-256 of the Secret's data.
	SecretHashes map[string]string `json:"secret_hashes"`
	// Revisions: Deployment or StatefulSet (kind/namespace/name) => its current ReplicaSet uid or
	// update revision.
	Revisions map[string]string `json:"revisions"`
}

type pod struct {
	UID     string   `json:"uid"`
	Owner   string   `json:"owner"`
	Secrets []string `json:"secrets"`
}

var derivedResources = map[string]bool{
	"pods": true, "replicasets": true, "controllerrevisions": true, "events": true,
	"endpoints": true, "endpointslices": true, "leases": true,
}

func (c *checker) snapshot(ctx context.Context) *snapshot {
	s := &snapshot{
		Objects: map[string]string{}, Derived: map[string]string{}, Pods: map[string]pod{},
		SecretHashes: map[string]string{}, Revisions: map[string]string{},
	}
	nsl, err := c.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		c.failf("list namespaces: %v", err)
		return s
	}
	var nss []string
	for _, ns := range nsl.Items {
		s.Objects["namespaces//"+ns.Name] = string(ns.UID)
		if !slices.Contains(systemNSes, ns.Name) || ns.Name == "default" {
			nss = append(nss, ns.Name)
		}
	}
	gvrs, err := c.namespacedResources()
	if err != nil {
		c.failf("%v", err)
		return s
	}
	for _, gvr := range gvrs {
		l, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.failf("list %s: %v", gvr.Resource, err)
			continue
		}
		for _, o := range l.Items {
			if !slices.Contains(nss, o.GetNamespace()) {
				continue
			}
			key := gvr.Resource + "/" + o.GetNamespace() + "/" + o.GetName()
			if derivedResources[gvr.Resource] {
				s.Derived[key] = string(o.GetUID())
			} else {
				s.Objects[key] = string(o.GetUID())
			}
		}
	}
	for _, ns := range nss {
		pl, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.failf("list pods: %v", err)
			continue
		}
		for _, p := range pl.Items {
			s.Pods[ns+"/"+p.Name] = pod{UID: string(p.UID), Owner: ownerName(&p), Secrets: podSecrets(&p)}
		}
		sl, err := c.kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.failf("list secrets: %v", err)
			continue
		}
		for _, sec := range sl.Items {
			h := sha256.New()
			keys := make([]string, 0, len(sec.Data))
			for k := range sec.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(h, "%s=%x;", k, sec.Data[k])
			}
			s.SecretHashes[ns+"/"+sec.Name] = hex.EncodeToString(h.Sum(nil))
		}
		rsl, err := c.kube.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.failf("list replicasets: %v", err)
			continue
		}
		for _, rs := range rsl.Items {
			ref := metav1.GetControllerOf(&rs)
			if ref != nil && ref.Kind == "Deployment" && rs.Spec.Replicas != nil && *rs.Spec.Replicas > 0 {
				s.Revisions["Deployment/"+ns+"/"+ref.Name] = string(rs.UID)
			}
		}
		stl, err := c.kube.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.failf("list statefulsets: %v", err)
			continue
		}
		for _, st := range stl.Items {
			s.Revisions["StatefulSet/"+ns+"/"+st.Name] = st.Status.UpdateRevision
		}
	}
	return s
}

// namespacedResources lists every namespaced resource the API server serves that can be listed.
func (c *checker) namespacedResources() ([]schema.GroupVersionResource, error) {
	lists, err := c.disco.ServerPreferredNamespacedResources()
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	var out []schema.GroupVersionResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			if r.Name == "events" && gv.Group == "events.k8s.io" {
				continue // the same objects as core events
			}
			out = append(out, gv.WithResource(r.Name))
		}
	}
	return out, nil
}

// podSecrets returns the Secrets a pod reads: volumes (also projected), env and envFrom.
func podSecrets(p *corev1.Pod) []string {
	set := map[string]bool{}
	for _, v := range p.Spec.Volumes {
		if v.Secret != nil {
			set[v.Secret.SecretName] = true
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					set[src.Secret.Name] = true
				}
			}
		}
	}
	for _, ctr := range slices.Concat(p.Spec.InitContainers, p.Spec.Containers) {
		for _, e := range ctr.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				set[e.ValueFrom.SecretKeyRef.Name] = true
			}
		}
		for _, e := range ctr.EnvFrom {
			if e.SecretRef != nil {
				set[e.SecretRef.Name] = true
			}
		}
	}
	var out []string
	for s := range set {
		out = append(out, p.Namespace+"/"+s)
	}
	sort.Strings(out)
	return out
}

func writeJSON(file string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o600)
}

func readSnap(file string) *snapshot {
	var s snapshot
	b, err := os.ReadFile(file)
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "read snapshot %s: %v\n", file, err)
		os.Exit(1)
	}
	return &s
}

// secretRoll checks the roll that changing Secrets caused between two snapshots: the pods
// replaced (a pod's uid changed or the pod is gone) are exactly the pods that read a changed
// Secret; the Deployments and StatefulSets of those pods have a new ReplicaSet / revision, all
// others the same; and no Secret other than the changed ones was replaced.
func (c *checker) secretRoll(before, after *snapshot) {
	var changed []string
	for k, h := range before.SecretHashes {
		if a, ok := after.SecretHashes[k]; ok && a != h {
			changed = append(changed, k)
		}
	}
	sort.Strings(changed)
	if len(changed) == 0 {
		c.failf("no Secret changed between the snapshots")
		return
	}
	fmt.Printf("changed Secrets: %v\n", changed)
	usesChanged := func(p pod) bool {
		for _, s := range p.Secrets {
			if slices.Contains(changed, s) {
				return true
			}
		}
		return false
	}
	rolledOwners := map[string]bool{}
	var rolled, expected []string
	for name, p := range before.Pods {
		if usesChanged(p) {
			expected = append(expected, name)
			rolledOwners[p.Owner] = true
		}
		if a, ok := after.Pods[name]; !ok || a.UID != p.UID {
			rolled = append(rolled, name)
		}
	}
	sort.Strings(rolled)
	sort.Strings(expected)
	fmt.Printf("pods that read them: %v\npods replaced: %v\n", expected, rolled)
	if len(expected) == 0 {
		c.failf("no pod reads the changed Secrets %v", changed)
	}
	if !slices.Equal(rolled, expected) {
		c.failf("pods replaced %v, want exactly the pods that read a changed Secret %v", rolled, expected)
	}
	for name, p := range after.Pods {
		b, ok := before.Pods[name]
		if ok && b.UID == p.UID && usesChanged(p) {
			c.failf("pod %s reads a changed Secret and was not replaced", name)
		}
	}
	for w, rev := range before.Revisions {
		ns := strings.SplitN(w, "/", 3)[1]
		owner := strings.SplitN(w, "/", 3)[0] + "/" + strings.SplitN(w, "/", 3)[2]
		uses := false
		for name, p := range before.Pods {
			uses = uses || (strings.HasPrefix(name, ns+"/") && p.Owner == owner && usesChanged(p))
		}
		switch a := after.Revisions[w]; {
		case a == "":
			c.failf("%s: gone after the Secret change", w)
		case uses && a == rev:
			c.failf("%s reads a changed Secret, but its ReplicaSet/revision is still %s", w, rev)
		case !uses && a != rev:
			c.failf("%s reads no changed Secret, but its ReplicaSet/revision changed %s -> %s", w, rev, a)
		}
	}
	c.sameObjects(before, after, "", "the Secret change")
}

// sameObjects fails for every object (not derived) of before that is gone or has another uid in
// after, unless it is in namespace skipNS, and for every object of after that before lacks
// (outside skipNS).
func (c *checker) sameObjects(before, after *snapshot, skipNS, what string) {
	inNS := func(key string) bool {
		if skipNS == "" {
			return false
		}
		parts := strings.SplitN(key, "/", 3)
		return parts[1] == skipNS || (parts[0] == "namespaces" && parts[2] == skipNS)
	}
	for k, uid := range before.Objects {
		if inNS(k) {
			continue
		}
		switch a, ok := after.Objects[k]; {
		case !ok:
			c.failf("%s: %s was deleted", what, k)
		case a != uid:
			c.failf("%s: %s was replaced (uid %s -> %s)", what, k, uid, a)
		}
	}
	for k := range after.Objects {
		if _, ok := before.Objects[k]; !ok && !inNS(k) {
			c.failf("%s: %s appeared", what, k)
		}
	}
}

// removed checks step 1 of removing a region: the region's namespace and everything in it are
// gone (waiting for the namespace to finish terminating), no object of the deploy elsewhere is
// labelled with it, and no other object was deleted, replaced or added.
func (c *checker) removed(ctx context.Context, before, after *snapshot, ns string) {
	n := 0
	for k := range before.Objects {
		if strings.SplitN(k, "/", 3)[1] == ns {
			n++
		}
	}
	if n == 0 {
		c.failf("the snapshot before holds no object of namespace %s", ns)
	}
	if _, ok := after.Objects["namespaces//"+ns]; ok {
		c.failf("namespace %s still exists after the decommission apply", ns)
	}
	for k := range after.Objects {
		if strings.SplitN(k, "/", 3)[1] == ns {
			c.failf("%s still exists", k)
		}
	}
	for k := range after.Derived {
		if strings.SplitN(k, "/", 3)[1] == ns {
			c.failf("%s still exists", k)
		}
	}
	region := strings.TrimPrefix(ns, "quota-")
	gvrs, err := c.namespacedResources()
	if err != nil {
		c.failf("%v", err)
	}
	for _, gvr := range gvrs {
		l, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "quota.dev/region=" + region})
		if err != nil {
			c.failf("list %s: %v", gvr.Resource, err)
			continue
		}
		for _, o := range l.Items {
			c.failf("%s %s/%s is still labelled quota.dev/region=%s", gvr.Resource, o.GetNamespace(), o.GetName(), region)
		}
	}
	c.sameObjects(before, after, ns, "decommissioning "+ns)
	fmt.Printf("%d objects of %s gone; the other %d objects kept their uids\n", n, ns, len(before.Objects)-n)
}

// unchanged checks that nothing was replaced, added or deleted, pods included.
func (c *checker) unchanged(before, after *snapshot) {
	c.sameObjects(before, after, "", "unchanged")
	for name, p := range before.Pods {
		if a, ok := after.Pods[name]; !ok || a.UID != p.UID {
			c.failf("pod %s was replaced or deleted", name)
		}
	}
	for name := range after.Pods {
		if _, ok := before.Pods[name]; !ok {
			c.failf("pod %s appeared", name)
		}
	}
	fmt.Printf("%d objects and %d pods unchanged\n", len(before.Objects), len(before.Pods))
}

// empty checks that nothing of the deploy is left: no namespace but the system ones, and no
// object anywhere labelled part-of=quota or managed-by=terraform (waiting for namespaces that
// are still terminating).
func (c *checker) empty(ctx context.Context) {
	gvrs, err := c.namespacedResources()
	if err != nil {
		c.failf("%v", err)
		return
	}
	c.poll(ctx, "nothing left", func() (bool, string) {
		nsl, err := c.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, ns := range nsl.Items {
			if !slices.Contains(systemNSes, ns.Name) {
				return false, "namespace " + ns.Name + " is left (" + string(ns.Status.Phase) + ")"
			}
		}
		for _, gvr := range gvrs {
			for _, sel := range []string{partOf, managedBy} {
				l, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: sel})
				if err != nil {
					return false, err.Error()
				}
				if len(l.Items) > 0 {
					o := l.Items[0]
					return false, fmt.Sprintf("%s %s/%s (%s) is left", gvr.Resource, o.GetNamespace(), o.GetName(), sel)
				}
			}
		}
		return true, ""
	})
}
