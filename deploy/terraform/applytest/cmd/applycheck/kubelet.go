package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// fakeKubelet plays the kubelets of the cluster's nodes as far as the API server can tell, which
// is all the apply test asserts on: it reports every node Ready, reports every pod bound to a
// node Running and Ready with its containers started, and removes a pod once it is being deleted
// (no container runs, so there is nothing to stop first). Readiness is reported at once, not
// after probes: the test is about what Terraform applied and how the controllers, the scheduler
// and the Eviction API treat it, not about the limiter's start.
//
// It replaces kwok, which did the same from stage rules but had to be built from its own module:
// kwok v0.7.0 needs k8s.io 0.33 and the control plane is 1.37, so a new machine compiled a second
// copy of Kubernetes' client libraries for it (529 s of the tools' build, against 1,708 s for the
// whole control plane). This program shares the control plane's build.
type fakeKubelet struct {
	kube  kubernetes.Interface
	pods  corelisters.PodLister
	nodes corelisters.NodeLister
	podQ  workqueue.TypedRateLimitingInterface[string]
	nodeQ workqueue.TypedRateLimitingInterface[string]

	mu     sync.Mutex
	podIPs map[types.UID]string
	nodeIP map[string]string
	next   int
}

// heartbeat is how often a node's Ready condition is reported again. The controller-manager of
// apply-test.sh allows an hour (--node-monitor-grace-period): this only keeps the times honest.
const heartbeat = 20 * time.Second

// kubelet runs the fake kubelets until ctx ends.
func kubelet(ctx context.Context, kube kubernetes.Interface) error {
	f := informers.NewSharedInformerFactory(kube, 0)
	k := &fakeKubelet{
		kube:   kube,
		pods:   f.Core().V1().Pods().Lister(),
		nodes:  f.Core().V1().Nodes().Lister(),
		podQ:   workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		nodeQ:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		podIPs: map[types.UID]string{},
		nodeIP: map[string]string{},
	}
	enqueue := func(q workqueue.TypedRateLimitingInterface[string]) cache.ResourceEventHandlerFuncs {
		add := func(obj any) {
			if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }}
	}
	if _, err := f.Core().V1().Pods().Informer().AddEventHandler(enqueue(k.podQ)); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	if _, err := f.Core().V1().Nodes().Informer().AddEventHandler(enqueue(k.nodeQ)); err != nil {
		return fmt.Errorf("node informer: %w", err)
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer of %v did not sync", typ)
		}
	}
	defer k.podQ.ShutDown()
	defer k.nodeQ.ShutDown()
	go k.work(ctx, k.podQ, k.syncPod)
	go k.work(ctx, k.podQ, k.syncPod)
	go k.work(ctx, k.nodeQ, k.syncNode)
	t := time.NewTicker(heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			nodes, err := k.nodes.List(labels.Everything())
			if err != nil {
				return fmt.Errorf("list nodes: %w", err)
			}
			for _, n := range nodes {
				k.nodeQ.Add(n.Name)
			}
		}
	}
}

func (k *fakeKubelet) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], sync func(context.Context, string) error) {
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		if err := sync(ctx, key); err != nil {
			if !apierrors.IsConflict(err) && ctx.Err() == nil {
				log.Printf("fake kubelet: %s: %v (retrying)", key, err)
			}
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

// syncNode reports node name Ready, with an address, now.
func (k *fakeKubelet) syncNode(ctx context.Context, name string) error {
	n, err := k.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	n = n.DeepCopy()
	ip := k.addressOf(name)
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v0.0.0-applytest", OperatingSystem: "linux", Architecture: "amd64",
		ContainerRuntimeVersion: "none://applytest"}
	n.Status.Phase = corev1.NodeRunning
	for _, c := range []struct {
		typ    corev1.NodeConditionType
		status corev1.ConditionStatus
	}{
		{corev1.NodeReady, corev1.ConditionTrue},
		{corev1.NodeMemoryPressure, corev1.ConditionFalse},
		{corev1.NodeDiskPressure, corev1.ConditionFalse},
		{corev1.NodePIDPressure, corev1.ConditionFalse},
		{corev1.NodeNetworkUnavailable, corev1.ConditionFalse},
	} {
		n.Status.Conditions = setNodeCondition(n.Status.Conditions, c.typ, c.status, now)
	}
	_, err = k.kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

func setNodeCondition(cs []corev1.NodeCondition, typ corev1.NodeConditionType, status corev1.ConditionStatus, now metav1.Time) []corev1.NodeCondition {
	for i := range cs {
		if cs[i].Type == typ {
			if cs[i].Status != status {
				cs[i].Status, cs[i].LastTransitionTime = status, now
			}
			cs[i].LastHeartbeatTime, cs[i].Reason = now, "ApplyTest"
			return cs
		}
	}
	return append(cs, corev1.NodeCondition{Type: typ, Status: status, LastHeartbeatTime: now, LastTransitionTime: now, Reason: "ApplyTest"})
}

// syncPod removes a pod that is being deleted, and reports a pod bound to a node Running and
// Ready unless it already is.
func (k *fakeKubelet) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	p, err := k.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if p.Spec.NodeName == "" {
		return nil
	}
	if p.DeletionTimestamp != nil {
		k.mu.Lock()
		delete(k.podIPs, p.UID)
		k.mu.Unlock()
		zero := int64(0)
		err := k.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) { // gone, or a new pod of that name
			return nil
		}
		return err
	}
	if running(p) {
		return nil
	}
	now := metav1.Now()
	p = p.DeepCopy()
	hostIP := k.addressOf(p.Spec.NodeName)
	podIP := hostIP
	if !p.Spec.HostNetwork {
		podIP = k.podIP(p.UID)
	}
	st := &p.Status
	st.Phase = corev1.PodRunning
	st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	st.PodIP, st.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	for _, typ := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = setPodCondition(st.Conditions, typ, now)
	}
	st.InitContainerStatuses = nil
	for _, c := range p.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(p, c.Name), Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}},
		})
	}
	st.ContainerStatuses = nil
	started := true
	for _, c := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: containerID(p, c.Name), Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	_, err = k.kube.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// running: the pod's status is what syncPod reports.
func running(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return podReady(p)
}

func setPodCondition(cs []corev1.PodCondition, typ corev1.PodConditionType, now metav1.Time) []corev1.PodCondition {
	for i := range cs {
		if cs[i].Type == typ {
			if cs[i].Status != corev1.ConditionTrue {
				cs[i].Status, cs[i].LastTransitionTime, cs[i].Reason, cs[i].Message = corev1.ConditionTrue, now, "", ""
			}
			return cs
		}
	}
	return append(cs, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: now})
}

func containerID(p *corev1.Pod, name string) string {
	return fmt.Sprintf("none://%s-%s", p.UID, name)
}

// addressOf gives each node an address in 10.1.0.0/16, in the order they are first seen.
func (k *fakeKubelet) addressOf(node string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ip, ok := k.nodeIP[node]; ok {
		return ip
	}
	ip := fmt.Sprintf("10.1.%d.%d", len(k.nodeIP)/250, len(k.nodeIP)%250+1)
	k.nodeIP[node] = ip
	return ip
}

// podIP gives each pod an address of its own in 10.244.0.0/16 while it exists.
func (k *fakeKubelet) podIP(uid types.UID) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ip, ok := k.podIPs[uid]; ok {
		return ip
	}
	k.next++
	ip := fmt.Sprintf("10.244.%d.%d", k.next/250%256, k.next%250+1)
	k.podIPs[uid] = ip
	return ip
}
