// Command controller-runtime is the controller-runtime peer of the reconciled benchmarks. --mode
// picks one of three programs:
//
//   - failover (the default; this file), the peer of bench/src/bin/failover.rs: a manager with
//     Lease leader election running one reconciler that does what the stamp guest
//     (guests/stamp/src/lib.rs) does, so that its failover can be timed beside reconciled's
//     replicas.
//   - reconcile (bench.go): the same reconciler in a manager without leader election, restricted to
//     one namespace, so that a full stamping pass can be timed, and its heap read, beside
//     reconciled running the stamp guest.
//   - cache (bench.go): no controller at all, only a controller-runtime cache of ConfigMaps, to
//     measure what it costs in heap per object, how long it takes to sync and what a cached Get
//     costs.
//
// The stamp reconciler reconciles ConfigMaps labelled stamp.reconciled.dev/enabled=true and
// merge-patches the annotation stamp.reconciled.dev/seen to "cr:<data.v>", only when it differs.
// In failover mode it does so in every namespace.
//
// Milestones go to stdout as one JSON object per line, written at once (os.Stdout is not
// buffered), each with the wall clock in unix_ms so the bench can line them up with its own. In
// failover mode:
//
//	{"event":"started","id":"a","unix_ms":...}              before the manager starts
//	{"event":"leader","id":"a","unix_ms":...}               mgr.Elected() closed
//	{"event":"synced","id":"a","unix_ms":...}               the ConfigMap informer synced, after election
//	{"event":"reconciled","id":"a","key":"ns/name",...}     the first reconcile after election
//	{"event":"stamped","id":"a","key":"ns/name","value":"cr:7",...}  each patch written
//
// The lines of the other two modes are listed in bench.go. Logs go to stderr.
//
// Where it may surprise: controller-runtime starts a controller's informers only once the
// controller starts, which is after election, so a follower holds no ConfigMap cache and a new
// leader LISTs every labelled ConfigMap before its first reconcile. That is controller-runtime's
// default behaviour and exactly what the benchmark compares against; it is not a mistake here.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	// enabled selects the ConfigMaps to reconcile, as the stamp guest's label selector does.
	enabled = "stamp.reconciled.dev/enabled"
	// seen is the annotation stamped on each ConfigMap.
	seen = "stamp.reconciled.dev/seen"
	// version is what this peer stamps in place of the guest's "v1", so that a stamp tells
	// which of the two wrote it.
	version = "cr"
)

// milestones writes the JSON lines; one lock so that lines from the reconciler and the
// runnables never interleave.
type milestones struct {
	mu sync.Mutex
	id string
}

type milestone struct {
	Event  string `json:"event"`
	ID     string `json:"id"`
	UnixMs int64  `json:"unix_ms"`
	Key    string `json:"key,omitempty"`
	Value  string `json:"value,omitempty"`
	// HeapBytes is the Go heap in use right after a collection, on the milestones that measure
	// it (reconcile mode's synced and all); see emitHeap in bench.go.
	HeapBytes int64 `json:"heap_bytes,omitempty"`
}

func (m *milestones) emit(event, key, value string) {
	m.write(milestone{
		Event:  event,
		ID:     m.id,
		UnixMs: time.Now().UnixMilli(),
		Key:    key,
		Value:  value,
	})
}

func (m *milestones) write(ms milestone) {
	line, err := json.Marshal(ms)
	if err != nil {
		// A struct of strings and integers always marshals; reaching this is a bug in this file.
		panic(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// The bench reads these lines to time the failover: a line it never sees is a failed run,
	// and there is no one else to tell, so a failed write ends the process.
	if _, err := os.Stdout.Write(append(line, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "cannot write milestone to stdout: %v\n", err)
		os.Exit(1)
	}
}

// stamp is the reconciler: the stamp guest's contract, in controller-runtime.
type stamp struct {
	client.Client
	out *milestones
	// first is set by the first reconcile, which in failover mode the manager runs only after
	// election.
	first atomic.Bool
}

func (s *stamp) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.String()
	if !s.first.Swap(true) {
		s.out.emit("reconciled", key, "")
	}
	var cm corev1.ConfigMap
	if err := s.Get(ctx, req.NamespacedName, &cm); err != nil {
		// Reconciles also run after a deletion: not found means nothing to do.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	desired := version + ":" + cm.Data["v"]
	if cm.Annotations[seen] == desired {
		return ctrl.Result{}, nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{seen: desired}},
	})
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := s.Patch(ctx, &cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return ctrl.Result{}, fmt.Errorf("patching %s to %s: %w", key, desired, err)
	}
	s.out.emit("stamped", key, desired)
	return ctrl.Result{}, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "controller-runtime peer: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	// Each mode has flags of its own, so the mode is picked before any flag is parsed; the two
	// benchmark modes live in bench.go.
	switch mode := modeOf(os.Args[1:]); mode {
	case modeFailover:
	case modeReconcile:
		return runReconcile(os.Args[1:])
	case modeCache:
		return runCache(os.Args[1:])
	default:
		return fmt.Errorf("--mode must be %s, %s or %s (got %q)", modeFailover, modeReconcile, modeCache, mode)
	}

	// A FlagSet of our own: controller-runtime registers its own --kubeconfig on the global one.
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	modeFlag(fs, modeFailover)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	id := fs.String("id", "", "leader election identity; unique per process (required)")
	leaseNamespace := fs.String("lease-namespace", "", "namespace of the Lease (required)")
	leaseName := fs.String("lease-name", "controller-runtime-peer", "name of the Lease (LeaderElectionID)")
	leaseMs := fs.Int("lease-duration-ms", 15000, "how long a follower waits after the last renewal before taking the Lease")
	renewMs := fs.Int("renew-deadline-ms", 10000, "how long the leader keeps retrying a renewal before it gives up leading")
	retryMs := fs.Int("retry-period-ms", 2000, "how often every candidate tries to acquire or renew the Lease")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *kubeconfig == "" || *id == "" || *leaseNamespace == "" {
		return fmt.Errorf("--kubeconfig, --id and --lease-namespace are required (got %q, %q, %q)", *kubeconfig, *id, *leaseNamespace)
	}
	leaseDuration := time.Duration(*leaseMs) * time.Millisecond
	renewDeadline := time.Duration(*renewMs) * time.Millisecond
	retryPeriod := time.Duration(*retryMs) * time.Millisecond

	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	out := &milestones{id: *id}

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("cannot load kubeconfig %s: %w", *kubeconfig, err)
	}
	// What ctrl.GetConfig does: no client-side rate limit, leaving it to API priority and
	// fairness. Without it client-go allows 5 requests a second, and the initial stamping of
	// 10 000 objects alone would take half an hour.
	cfg.QPS = -1

	// The lock is built here only so that its identity is --id, which the bench matches against
	// the Lease's holderIdentity; controller-runtime would use hostname_uuid. Everything else
	// is what controller-runtime builds for LeaderElectionResourceLock "leases".
	lock, err := resourcelock.NewFromKubeconfig(
		resourcelock.LeasesResourceLock,
		*leaseNamespace,
		*leaseName,
		resourcelock.ResourceLockConfig{Identity: *id},
		cfg,
		renewDeadline,
	)
	if err != nil {
		return fmt.Errorf("cannot build the Lease lock %s/%s: %w", *leaseNamespace, *leaseName, err)
	}

	selector := labels.SelectorFromSet(labels.Set{enabled: "true"})
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		LeaderElection:                      true,
		LeaderElectionID:                    *leaseName,
		LeaderElectionNamespace:             *leaseNamespace,
		LeaderElectionResourceLockInterface: lock,
		LeaseDuration:                       &leaseDuration,
		RenewDeadline:                       &renewDeadline,
		RetryPeriod:                         &retryPeriod,
		LeaderElectionReleaseOnCancel:       true,
		Metrics:                             metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:              "0",
		Cache: cache.Options{
			ByObject: map[client.Object]cache.ByObject{
				&corev1.ConfigMap{}: {Label: selector},
			},
		},
	})
	if err != nil {
		return fmt.Errorf("cannot create the manager: %w", err)
	}

	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		Named("stamp").
		Complete(&stamp{Client: mgr.GetClient(), out: out})
	if err != nil {
		return fmt.Errorf("cannot create the stamp controller: %w", err)
	}

	// A runnable needs leader election unless it says otherwise, so this runs only once
	// elected. GetInformer blocks until the informer has synced, creating it if the controller
	// has not yet: the same informer either way.
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if _, err := mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
			return fmt.Errorf("the ConfigMap informer did not sync: %w", err)
		}
		out.emit("synced", "", "")
		<-ctx.Done()
		return nil
	}))
	if err != nil {
		return fmt.Errorf("cannot add the sync reporter: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	go func() {
		select {
		case <-mgr.Elected():
			out.emit("leader", "", "")
		case <-ctx.Done():
		}
	}()

	out.emit("started", "", "")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("the manager stopped: %w", err)
	}
	return nil
}
