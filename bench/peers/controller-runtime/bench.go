// The two benchmark modes of the peer, beside main.go's failover mode.
//
// --mode reconcile runs the stamp reconciler of main.go in a manager without leader election,
// over the labelled ConfigMaps of one namespace, until it is signalled. Its milestones, in
// main.go's format (id is always empty here, there being no election to tell replicas apart):
//
//	{"event":"started","id":"","unix_ms":...}                        before the manager starts
//	{"event":"synced","id":"","unix_ms":...}                         the ConfigMap informer synced
//	{"event":"reconciled","id":"","key":"ns/name",...}               the first reconcile
//	{"event":"stamped","id":"","key":"ns/name","value":"cr:7",...}   each patch written
//	{"event":"all","id":"","unix_ms":...,"heap_bytes":...}           --expect distinct keys reconciled
//
// heap_bytes is the Go heap in use right after a collection; unix_ms is taken before that
// collection, so that a large heap does not make the event look later than it was.
//
// --mode cache runs no controller: it builds a controller-runtime cache of ConfigMaps, waits for
// it to sync and prints one line, then exits:
//
//	{"event":"cache","objects":N,"heap_before":B,"heap_after":A,"heap_per_object":(A-B)/N,
//	 "sync_ms":S,"get_ns":G,"rss_bytes":R}
//
// heap_before and heap_after are the Go heap in use before the cache is built and once it has
// synced; sync_ms runs from starting the cache to the ConfigMap informer's sync (see
// syncInformer); get_ns is what one cached Get of a ConfigMap costs (controller-runtime's
// default Get, which deep-copies the object), the median of --get-rounds rounds over every
// object; rss_bytes is VmRSS at the end.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	modeFailover  = "failover"
	modeReconcile = "reconcile"
	modeCache     = "cache"
)

// modeOf finds --mode (or -mode, with the value after = or as the next argument) in the
// arguments, before any FlagSet parses them: which flags are valid depends on it. It stops at
// "--", as the flag package does. Without --mode the peer is the failover peer it always was.
// A --mode without a value yields the default, and the mode's own FlagSet then reports it.
func modeOf(args []string) string {
	for i, arg := range args {
		if arg == "--" {
			break
		}
		name, ok := strings.CutPrefix(arg, "-")
		if !ok {
			continue
		}
		name = strings.TrimPrefix(name, "-")
		if value, ok := strings.CutPrefix(name, "mode="); ok {
			return value
		}
		if name == "mode" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return modeFailover
}

// modeFlag declares --mode on a mode's FlagSet, so that it parses there and shows in -help. Its
// value is already known: modeOf picked the FlagSet by it.
func modeFlag(fs *flag.FlagSet, mode string) {
	fs.String("mode", mode, "what to run: "+modeFailover+" (leader election, the failover bench), "+
		modeReconcile+" (the stamp controller in one namespace) or "+modeCache+" (a ConfigMap cache alone)")
}

// restConfig loads the kubeconfig as the failover mode does, and picks the wire format.
//
// What controller-runtime v0.25.2 asks for by default is protobuf, for every built-in kind such
// as ConfigMap: createRestConfig in pkg/client/apiutil/apimachinery.go (reached through
// apiutil.RESTClientForGVK) sets ContentType to application/vnd.kubernetes.protobuf when the
// rest.Config leaves ContentType empty and the kind is in its protobufScheme, which holds
// client-go's scheme, so every built-in kind. CRDs, Unstructured and apply configurations get
// JSON. Both paths this peer uses go through it: the cache's list and watch
// (Informers.makeListWatcher in pkg/cache/internal/informers.go, the structured case) and the
// client's Get and Patch (clientRestResources.getResource and newResource in
// pkg/client/client_rest_resources.go). manager.New's doc comment says as much.
//
// --json sets ContentType to application/json on the rest.Config, which createRestConfig then
// leaves alone, for the cache and the client alike since both are built from this config. It
// sets AcceptContentTypes too: without it client-go derives the Accept header from ContentType
// as "application/json, */*" (Request.setAcceptHeader in k8s.io/client-go/rest/request.go); with
// it the request accepts JSON and nothing else.
func restConfig(kubeconfig string, jsonWire bool) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cannot load kubeconfig %s: %w", kubeconfig, err)
	}
	// No client-side rate limit, as in failover mode; see there.
	cfg.QPS = -1
	if jsonWire {
		cfg.ContentType = kruntime.ContentTypeJSON
		cfg.AcceptContentTypes = kruntime.ContentTypeJSON
	}
	return cfg, nil
}

// liveHeap collects garbage and returns the Go heap still in use. It collects twice: memory
// held only by objects with finalizers is freed by the collection after the one that finds them.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return int64(stats.HeapAlloc)
}

// emitHeap writes a milestone that carries the live heap. The time is taken before the
// collection, which can take a while on a large heap and is not part of the event.
func (m *milestones) emitHeap(event string) {
	at := time.Now().UnixMilli()
	heap := liveHeap()
	m.write(milestone{Event: event, ID: m.id, UnixMs: at, HeapBytes: heap})
}

// counting wraps the stamp reconciler to tell when every object has been reconciled once, which
// is when a stamping pass over --expect objects is over.
type counting struct {
	stamp  *stamp
	expect int

	mu sync.Mutex
	// done holds each key reconciled without error; nil once "all" is out, so that its memory
	// is not in the heap reading that comes with "all" and nothing more is counted.
	done map[types.NamespacedName]struct{}
}

func (c *counting) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	result, err := c.stamp.Reconcile(ctx, req)
	// A failed reconcile is retried by the controller; the key counts once it succeeds.
	if err != nil || c.expect == 0 {
		return result, err
	}
	c.mu.Lock()
	all := false
	if c.done != nil {
		c.done[req.NamespacedName] = struct{}{}
		if len(c.done) >= c.expect {
			c.done = nil
			all = true
		}
	}
	c.mu.Unlock()
	if all {
		c.stamp.out.emitHeap("all")
	}
	return result, nil
}

// syncInformer gets the ConfigMap informer of c, creating it if need be, and waits until it has
// synced. It waits on the informer's done channel, not as controller-runtime's own waits do
// (GetInformer's blocking and WaitForCacheSync both go through client-go's
// cache.WaitForCacheSync, which polls every 100 ms), so that a sync is timed to the moment it
// happens rather than rounded up to the next 100 ms. The stamp controller itself still waits the
// polling way before its workers start: that delay is controller-runtime's, and stays in the
// time to the first reconcile.
func syncInformer(ctx context.Context, c cache.Cache) error {
	informer, err := c.GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("cannot get the ConfigMap informer: %w", err)
	}
	select {
	case <-informer.HasSyncedChecker().Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the ConfigMap informer did not sync: %w", ctx.Err())
	}
}

// runReconcile is --mode reconcile: main.go's stamp reconciler, timed beside reconciled running
// the stamp guest over the same objects.
func runReconcile(args []string) error {
	fs := flag.NewFlagSet(os.Args[0]+" --mode "+modeReconcile, flag.ExitOnError)
	modeFlag(fs, modeReconcile)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	namespace := fs.String("namespace", "", "namespace whose labelled ConfigMaps are reconciled; the only one cached (required)")
	workers := fs.Int("workers", 1, "MaxConcurrentReconciles of the stamp controller")
	expect := fs.Int("expect", 0, `how many labelled ConfigMaps there are: "all" is written once this many distinct ones were reconciled (0: never)`)
	jsonWire := fs.Bool("json", false, "ask the API server for JSON, in the cache and the client, instead of controller-runtime's default protobuf")
	strip := fs.Bool("strip-managed-fields", false, "drop managedFields before objects enter the cache (cache.TransformStripManagedFields)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" || *namespace == "" {
		return fmt.Errorf("--kubeconfig and --namespace are required (got %q, %q)", *kubeconfig, *namespace)
	}
	if *workers < 1 || *expect < 0 {
		return fmt.Errorf("--workers must be at least 1 and --expect at least 0 (got %d, %d)", *workers, *expect)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	out := &milestones{}

	cfg, err := restConfig(*kubeconfig, *jsonWire)
	if err != nil {
		return err
	}

	// The ConfigMap informer watches only the labelled ConfigMaps of --namespace: ByObject has
	// no namespaces of its own, so it takes DefaultNamespaces.
	cacheOpts := cache.Options{
		DefaultNamespaces: map[string]cache.Config{*namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{enabled: "true"})},
		},
	}
	if *strip {
		cacheOpts.DefaultTransform = cache.TransformStripManagedFields()
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cacheOpts,
	})
	if err != nil {
		return fmt.Errorf("cannot create the manager: %w", err)
	}

	reconciler := &counting{
		stamp:  &stamp{Client: mgr.GetClient(), out: out},
		expect: *expect,
		done:   make(map[types.NamespacedName]struct{}, *expect),
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		Named("stamp").
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(reconciler)
	if err != nil {
		return fmt.Errorf("cannot create the stamp controller: %w", err)
	}

	// Without leader election every runnable starts at once. GetInformer creates the informer if
	// the controller has not yet: the same informer either way. WaitForCacheSync then covers any
	// other informer the cache holds (none today); it returns at once, the informer having synced.
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if err := syncInformer(ctx, mgr.GetCache()); err != nil {
			return err
		}
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("the cache did not sync")
		}
		// No heap reading here: its forced collections would run just as the workers start and
		// delay the first reconcile, which the bench times. The heap is read at "all".
		out.emit("synced", "", "")
		<-ctx.Done()
		return nil
	}))
	if err != nil {
		return fmt.Errorf("cannot add the sync reporter: %w", err)
	}

	ctx := ctrl.SetupSignalHandler()
	out.emit("started", "", "")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("the manager stopped: %w", err)
	}
	return nil
}

// cacheReport is the one line --mode cache prints.
type cacheReport struct {
	Event         string `json:"event"`
	Objects       int    `json:"objects"`
	HeapBefore    int64  `json:"heap_before"`
	HeapAfter     int64  `json:"heap_after"`
	HeapPerObject int64  `json:"heap_per_object"`
	SyncMs        int64  `json:"sync_ms"`
	GetNs         int64  `json:"get_ns"`
	RSSBytes      int64  `json:"rss_bytes"`
}

// runCache is --mode cache: what a controller-runtime cache of ConfigMaps costs, with no
// controller around it.
//
// A Get into an unstructured.Unstructured is not measured: the cache would serve it from a
// second, unstructured informer with its own list and its own copy of every object, which is
// neither cheap to add here nor the cache whose heap is measured.
func runCache(args []string) error {
	fs := flag.NewFlagSet(os.Args[0]+" --mode "+modeCache, flag.ExitOnError)
	modeFlag(fs, modeCache)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the cluster (required)")
	namespace := fs.String("namespace", "", "namespace to cache; empty caches every namespace")
	labelSelector := fs.String("label", "", "label selector of the ConfigMaps to cache; empty caches them all")
	jsonWire := fs.Bool("json", false, "ask the API server for JSON instead of controller-runtime's default protobuf")
	strip := fs.Bool("strip-managed-fields", false, "drop managedFields before objects enter the cache (cache.TransformStripManagedFields)")
	rounds := fs.Int("get-rounds", 3, "rounds of a Get of every cached ConfigMap; get_ns is the median round's")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kubeconfig == "" {
		return errors.New("--kubeconfig is required")
	}
	if *rounds < 1 {
		return fmt.Errorf("--get-rounds must be at least 1 (got %d)", *rounds)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	selector, err := labels.Parse(*labelSelector)
	if err != nil {
		return fmt.Errorf("invalid --label %q: %w", *labelSelector, err)
	}

	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	cfg, err := restConfig(*kubeconfig, *jsonWire)
	if err != nil {
		return err
	}

	// The HTTP client and the REST mapper are built, and the mapper has discovered ConfigMap,
	// before the first heap reading: cache.New would otherwise build them, and their memory
	// would count as the cache's.
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("cannot build the HTTP client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return fmt.Errorf("cannot build the REST mapper: %w", err)
	}
	if _, err := mapper.RESTMapping(corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind(), "v1"); err != nil {
		return fmt.Errorf("cannot discover ConfigMaps: %w", err)
	}
	opts := cache.Options{HTTPClient: httpClient, Mapper: mapper}
	if *namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{*namespace: {}}
	}
	if !selector.Empty() {
		opts.DefaultLabelSelector = selector
	}
	if *strip {
		opts.DefaultTransform = cache.TransformStripManagedFields()
	}

	ctx, cancel := context.WithCancel(ctrl.SetupSignalHandler())
	defer cancel()

	heapBefore := liveHeap()
	c, err := cache.New(cfg, opts)
	if err != nil {
		return fmt.Errorf("cannot create the cache: %w", err)
	}
	started := time.Now()
	// Start returns only when ctx ends or the cache fails; a failure ends the wait below.
	startErr := make(chan error, 1)
	go func() {
		startErr <- c.Start(ctx)
		cancel()
	}()
	if err := syncInformer(ctx, c); err != nil {
		return cacheFailed(err, startErr)
	}
	syncMs := time.Since(started).Milliseconds()
	if !c.WaitForCacheSync(ctx) {
		return cacheFailed(errors.New("the cache did not sync"), startErr)
	}
	heapAfter := liveHeap()

	// The keys come after the heap reading, so that the list is not in it.
	keys, err := cachedKeys(ctx, c)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return errors.New("the cache holds no ConfigMap: nothing to measure per object")
	}
	runtime.GC()

	// Each round Gets every key into a fresh ConfigMap, as a reconciler does; what the copies
	// cost the collector is part of what a Get costs.
	perRound := make([]time.Duration, *rounds)
	for r := range perRound {
		start := time.Now()
		for _, key := range keys {
			var cm corev1.ConfigMap
			if err := c.Get(ctx, key, &cm); err != nil {
				return fmt.Errorf("cannot get %s from the cache: %w", key, err)
			}
		}
		perRound[r] = time.Since(start)
	}
	// The median round (the lower of the two middle ones for an even count).
	slices.Sort(perRound)
	median := perRound[(len(perRound)-1)/2]

	rss, err := vmRSS()
	if err != nil {
		return err
	}
	line, err := json.Marshal(cacheReport{
		Event:         "cache",
		Objects:       len(keys),
		HeapBefore:    heapBefore,
		HeapAfter:     heapAfter,
		HeapPerObject: (heapAfter - heapBefore) / int64(len(keys)),
		SyncMs:        syncMs,
		GetNs:         median.Nanoseconds() / int64(len(keys)),
		RSSBytes:      rss,
	})
	if err != nil {
		// A struct of integers and a string always marshals; reaching this is a bug in this file.
		panic(err)
	}
	if _, err := os.Stdout.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("cannot write the report to stdout: %w", err)
	}
	return nil
}

// cachedKeys lists the keys of every cached ConfigMap. UnsafeDisableDeepCopy lists the cached
// objects themselves rather than copies of them, and only the keys outlive the list.
func cachedKeys(ctx context.Context, c cache.Cache) ([]client.ObjectKey, error) {
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("cannot list the cached ConfigMaps: %w", err)
	}
	keys := make([]client.ObjectKey, len(list.Items))
	for i := range list.Items {
		keys[i] = client.ObjectKeyFromObject(&list.Items[i])
	}
	return keys, nil
}

// cacheFailed explains why the cache did not sync: with the cache's own error if Start has
// already returned one, which says more than the cancelled context that followed it.
func cacheFailed(err error, startErr <-chan error) error {
	select {
	case failed := <-startErr:
		if failed != nil {
			return fmt.Errorf("%w: the cache failed: %w", err, failed)
		}
	default:
	}
	return err
}

// vmRSS reads the resident set size of this process from /proc/self/status, in bytes.
func vmRSS() (int64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("cannot read the resident set size: %w", err)
	}
	for line := range strings.Lines(string(status)) {
		value, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		// "VmRSS:	   12345 kB"
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cannot parse VmRSS in /proc/self/status (%q): %w", strings.TrimSpace(line), err)
		}
		return kb * 1024, nil
	}
	return 0, errors.New("no VmRSS in /proc/self/status")
}
