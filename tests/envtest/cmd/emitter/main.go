// Command emitter emits Kubernetes events exactly as Kubernetes components do,
// through client-go's own recorders, and prints the ground truth of what it
// emitted and of what the API server ended up holding.
//
//   - --recorder=legacy: k8s.io/client-go/tools/record (core/v1 Events; the
//     default EventCorrelator aggregates, counts with patches and drops spam).
//   - --recorder=events: k8s.io/client-go/tools/events (events.k8s.io/v1 with
//     client-side series).
//
// Limitation of --recorder=events, by design of tools/events: after the first
// occurrence (create) and the second (a patch that sets series.count=2), further
// occurrences only bump the recorder's in-memory series; it writes them on its
// own timers only (refresh every 30 minutes, finish after 6 minutes without
// occurrences). A short run therefore leaves series.count <= 2 in the API; that
// is what api_count reports, unless --linger keeps the recorder alive for its
// final write. The emitter does not write events by hand.
//
// api_count can also be lower than emitted because the legacy spam filter drops
// occurrences, and because both broadcasters silently drop events when their
// queue (1000) is full, as in real components.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
)

// Ref is the part of an object reference that belongs to the isomorphic key.
type Ref struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	FieldPath  string `json:"fieldPath"`
}

// Key is the isomorphic key of an event (related is never set here).
type Key struct {
	Regarding           Ref    `json:"regarding"`
	Reason              string `json:"reason"`
	Action              string `json:"action"`
	Type                string `json:"type"`
	ReportingController string `json:"reportingController"`
	ReportingInstance   string `json:"reportingInstance"`
}

// Entry is one line of the ground truth.
type Entry struct {
	Key
	Recorder   string `json:"recorder"`
	Emitted    int    `json:"emitted"`     // calls to the recorder
	First      string `json:"first"`       // first call, RFC3339 with microseconds
	Last       string `json:"last"`        // last call
	APICount   int32  `json:"api_count"`   // occurrences the API server holds for the key
	APIObjects int    `json:"api_objects"` // core/v1 Event objects holding them
}

const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// source is one involved object and how its events look.
type source struct {
	ref        corev1.ObjectReference
	controller string // reporting component
	host       string // reporting instance (legacy recorder only)
	eventType  string
	reason     string
	action     string
	note       func(r *rand.Rand) string
}

func main() {
	var (
		kubeconfig = flag.String("kubeconfig", "", "kubeconfig file (default: KUBECONFIG, ~/.kube/config, in-cluster)")
		recorder   = flag.String("recorder", "legacy", "legacy (tools/record) or events (tools/events)")
		scenario   = flag.String("scenario", "crashloop", "crashloop, varying, spam or mixed")
		namespace  = flag.String("namespace", "default", "namespace of the involved objects")
		namespaces = flag.String("namespaces", "", "comma-separated namespaces (overrides --namespace; mixed defaults to mixed-a,mixed-b,mixed-c)")
		objects    = flag.Int("pods", 0, "involved objects per namespace (default: 3 for crashloop and mixed, 1 for varying and spam)")
		rate       = flag.Float64("rate", 0, "occurrences per second per object (default: 2, spam: 50)")
		duration   = flag.Duration("duration", 10*time.Second, "how long to emit (ignored when --count is set)")
		count      = flag.Int("count", 0, "occurrences per object, then stop (alternative to --duration)")
		qps        = flag.Float64("qps", 50, "client QPS")
		burst      = flag.Int("burst", 100, "client burst")
		seed       = flag.Int64("seed", 1, "random seed (names, UIDs, messages, jitter)")
		output     = flag.String("output", "", "write the ground truth JSON here instead of stdout")
		flushMax   = flag.Duration("flush-timeout", 90*time.Second, "longest wait for the recorder to deliver everything")
		linger     = flag.Duration("linger", 0, "keep the recorder running this long after the last occurrence, before the flush: tools/events writes a series' final count 6-12 minutes after its last occurrence, as a long-lived component does")
	)
	flag.Parse()
	log.SetPrefix("emitter: ")
	log.SetFlags(log.Ltime | log.Lmicroseconds)

	nss := splitList(*namespaces)
	if len(nss) == 0 {
		nss = []string{*namespace}
		if *scenario == "mixed" && !flagSet("namespace") {
			nss = []string{"mixed-a", "mixed-b", "mixed-c"}
		}
	}
	if *objects == 0 {
		*objects = 3
		if *scenario == "varying" || *scenario == "spam" {
			*objects = 1
		}
	}
	if *rate == 0 {
		*rate = 2
		if *scenario == "spam" {
			*rate = 50
		}
	}
	rnd := rand.New(rand.NewSource(*seed))
	sources, err := buildSources(*scenario, nss, *objects, *seed, rnd)
	if err != nil {
		log.Fatal(err)
	}

	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	loading.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, nil).ClientConfig()
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range nss {
		_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			log.Fatalf("creating namespace %s: %v", ns, err)
		}
	}
	// Events created before this instant are not ours (creationTimestamp has
	// second precision).
	start := time.Now().Truncate(time.Second)

	// emit records one occurrence through the real recorder; keyOf gives the
	// isomorphic key that recorder will report for a source.
	var emit func(s *source, note string)
	var keyOf func(s *source) Key
	var stop func()
	recCtx, cancelRec := context.WithCancel(ctx)
	tr := &tracker{}
	hostname, _ := os.Hostname()

	switch *recorder {
	case "legacy":
		b := record.NewBroadcaster(record.WithContext(recCtx))
		b.StartRecordingToSink(legacySink{tr, &typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}})
		recs := map[corev1.EventSource]record.EventRecorder{}
		for _, s := range sources {
			es := corev1.EventSource{Component: s.controller, Host: s.host}
			if recs[es] == nil {
				recs[es] = b.NewRecorder(scheme.Scheme, es)
			}
		}
		emit = func(s *source, note string) {
			recs[corev1.EventSource{Component: s.controller, Host: s.host}].Event(&s.ref, s.eventType, s.reason, note)
		}
		keyOf = func(s *source) Key { return makeKey(&s.ref, s.reason, "", s.eventType, s.controller, s.host) }
		stop = b.Shutdown
	case "events":
		b := events.NewBroadcaster(eventsSink{tr, &events.EventSinkImpl{Interface: client.EventsV1()}})
		if err := b.StartRecordingToSinkWithContext(recCtx); err != nil {
			log.Fatal(err)
		}
		recs := map[string]events.EventRecorder{}
		for _, s := range sources {
			if recs[s.controller] == nil {
				recs[s.controller] = b.NewRecorder(scheme.Scheme, s.controller)
			}
		}
		emit = func(s *source, note string) {
			recs[s.controller].Eventf(&s.ref, nil, s.eventType, s.reason, s.action, "%s", note)
		}
		// tools/events reports instance "<controller>-<hostname>".
		keyOf = func(s *source) Key {
			return makeKey(&s.ref, s.reason, s.action, s.eventType, s.controller, s.controller+"-"+hostname)
		}
		stop = b.Shutdown
	default:
		log.Fatalf("unknown --recorder %q (legacy or events)", *recorder)
	}

	// Emit: one goroutine per object, ticking at --rate, with a random phase.
	truth := map[Key]*Entry{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	period := time.Duration(float64(time.Second) / *rate)
	deadline := time.Now().Add(*duration)
	for i := range sources {
		s := &sources[i]
		phase := time.Duration(rnd.Int63n(int64(period)))
		noteRnd := rand.New(rand.NewSource(*seed + int64(i) + 1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(phase)
			tick := time.NewTicker(period)
			defer tick.Stop()
			for n := 0; ; n++ {
				if (*count > 0 && n >= *count) || (*count == 0 && time.Now().After(deadline)) {
					return
				}
				note := s.note(noteRnd)
				now := time.Now()
				emit(s, note)
				mu.Lock()
				k := keyOf(s)
				e := truth[k]
				if e == nil {
					e = &Entry{Key: k, Recorder: *recorder, First: now.UTC().Format(timeFormat)}
					truth[k] = e
				}
				e.Emitted++
				e.Last = now.UTC().Format(timeFormat)
				mu.Unlock()
				<-tick.C
			}
		}()
	}
	wg.Wait()
	if *linger > 0 {
		log.Printf("lingering %s for the recorder's own timers", *linger)
		time.Sleep(*linger)
	}

	// Flush: the recorders are asynchronous and have no flush call. Wait until
	// their sink has been idle for a while (longer after a failed write: both
	// recorders retry after ~10s), then shut the broadcaster down.
	flushStart := time.Now()
	tr.touch()
	for !tr.idle() && time.Since(flushStart) < *flushMax {
		time.Sleep(200 * time.Millisecond)
	}
	if !tr.idle() {
		log.Printf("recorder still busy after %s; reporting what the API holds now", *flushMax)
	}
	stop()
	cancelRec()
	ok, failed := tr.counts()
	log.Printf("emitted to %d keys; API writes by the recorder: %d ok, %d failed; flushed in %s",
		len(truth), ok, failed, time.Since(flushStart).Round(time.Millisecond))

	// Ground truth from the API server: every core/v1 Event of ours (not the
	// operator's series objects) created during this run.
	for _, ns := range nss {
		opts := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by!=event-series", Limit: 500}
		for {
			list, err := client.CoreV1().Events(ns).List(ctx, opts)
			if err != nil {
				log.Fatalf("listing events in %s: %v", ns, err)
			}
			for i := range list.Items {
				ev := &list.Items[i]
				if ev.CreationTimestamp.Time.Before(start) {
					continue
				}
				if e := truth[apiKey(ev)]; e != nil {
					e.APICount += occurrences(ev)
					e.APIObjects++
				}
			}
			if list.Continue == "" {
				break
			}
			opts.Continue = list.Continue
		}
	}

	out := make([]*Entry, 0, len(truth))
	for _, e := range truth {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Regarding, out[j].Regarding
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return out[i].Reason < out[j].Reason
	})
	var w io.Writer = os.Stdout
	if *output != "" {
		f, err := os.Create(*output)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		w = f
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		log.Fatal(err)
	}
}

// buildSources returns the involved objects of a scenario, with stable fake
// UIDs derived from the seed, kind, namespace and name.
func buildSources(scenario string, nss []string, n int, seed int64, rnd *rand.Rand) ([]source, error) {
	var out []source
	ref := func(apiVersion, kind, ns, name, fieldPath string) corev1.ObjectReference {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%d/%s/%s/%s", seed, kind, ns, name)))
		sum[6], sum[8] = sum[6]&0x0f|0x40, sum[8]&0x3f|0x80 // shaped like a random (v4) UUID
		u := fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
		return corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: ns, Name: name, UID: types.UID(u), FieldPath: fieldPath}
	}
	crashloop := func(ns string, nodes int) {
		for i := 0; i < n; i++ {
			r := ref("v1", "Pod", ns, fmt.Sprintf("app-%s-%s", suffix(rnd, 10), suffix(rnd, 5)), "spec.containers{app}")
			pod := fmt.Sprintf("%s_%s(%s)", r.Name, r.Namespace, r.UID) // kubelet's format.Pod
			out = append(out, source{
				ref: r, controller: "kubelet", host: fmt.Sprintf("node-%d", i%nodes+1),
				eventType: corev1.EventTypeWarning, reason: "BackOff", action: "StartContainer",
				note: func(*rand.Rand) string { return "Back-off restarting failed container app in pod " + pod },
			})
		}
	}
	switch scenario {
	case "crashloop":
		for _, ns := range nss {
			crashloop(ns, 1)
		}
	case "mixed":
		for _, ns := range nss {
			crashloop(ns, 3)
		}
	case "varying":
		for _, ns := range nss {
			for i := 0; i < n; i++ {
				r := ref("apps/v1", "ReplicaSet", ns, fmt.Sprintf("web-%s", suffix(rnd, 10)), "")
				name := r.Name
				out = append(out, source{
					ref: r, controller: "replicaset-controller",
					eventType: corev1.EventTypeNormal, reason: "SuccessfulCreate", action: "Create",
					note: func(r *rand.Rand) string { return "Created pod: " + name + "-" + suffix(r, 5) },
				})
			}
		}
	case "spam":
		for _, ns := range nss {
			for i := 0; i < n; i++ {
				r := ref("v1", "Pod", ns, fmt.Sprintf("config-%s-%s", suffix(rnd, 10), suffix(rnd, 5)), "")
				out = append(out, source{
					ref: r, controller: "kubelet", host: "node-1",
					eventType: corev1.EventTypeWarning, reason: "FailedMount", action: "MountVolume",
					note: func(*rand.Rand) string {
						return `MountVolume.SetUp failed for volume "config" : configmap "app-config" not found`
					},
				})
			}
		}
	default:
		return nil, fmt.Errorf("unknown --scenario %q (crashloop, varying, spam or mixed)", scenario)
	}
	return out, nil
}

// suffix returns n characters of the alphabet Kubernetes uses for generated names.
func suffix(r *rand.Rand, n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.Intn(len(alphabet))]
	}
	return string(b)
}

func makeKey(r *corev1.ObjectReference, reason, action, typ, controller, instance string) Key {
	return Key{
		Regarding: Ref{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: string(r.UID), FieldPath: r.FieldPath},
		Reason:    reason, Action: action, Type: typ, ReportingController: controller, ReportingInstance: instance,
	}
}

// apiKey is the isomorphic key of a core/v1 Event, legacy or new-style.
func apiKey(ev *corev1.Event) Key {
	controller, instance := ev.ReportingController, ev.ReportingInstance
	if controller == "" {
		controller = ev.Source.Component
	}
	if instance == "" {
		instance = ev.Source.Host
	}
	return makeKey(&ev.InvolvedObject, ev.Reason, ev.Action, ev.Type, controller, instance)
}

// occurrences is what one stored event counts: series.count for a new-style
// series, 1 for a new-style singleton, count (at least 1) for a legacy event.
func occurrences(ev *corev1.Event) int32 {
	switch {
	case ev.Series != nil:
		return ev.Series.Count
	case !ev.EventTime.IsZero():
		return 1
	case ev.Count > 1:
		return ev.Count
	default:
		return 1
	}
}

// tracker watches the writes of a recorder's sink, so that the emitter can
// tell when the asynchronous recorder has delivered everything.
type tracker struct {
	mu       sync.Mutex
	inflight int
	last     time.Time
	lastErr  bool
	ok       int
	failed   int
}

func (t *tracker) begin() {
	t.mu.Lock()
	t.inflight++
	t.mu.Unlock()
}

// touch starts a quiet period now, as if a write had just succeeded.
func (t *tracker) touch() {
	t.mu.Lock()
	t.last = time.Now()
	t.mu.Unlock()
}

func (t *tracker) end(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inflight--
	t.last = time.Now()
	// A 404 on a patch is followed by a create at once; other failures are
	// retried by the recorders after up to ~12s.
	t.lastErr = err != nil && !apierrors.IsNotFound(err)
	if err != nil {
		t.failed++
	} else {
		t.ok++
	}
}

// idle reports whether no write is under way and none happened recently.
func (t *tracker) idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	quiet := 2 * time.Second
	if t.lastErr {
		quiet = 13 * time.Second
	}
	return t.inflight == 0 && time.Since(t.last) > quiet
}

func (t *tracker) counts() (ok, failed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ok, t.failed
}

// legacySink is the client-go core/v1 sink with its writes tracked.
type legacySink struct {
	*tracker
	inner record.EventSink
}

func (s legacySink) Create(ev *corev1.Event) (*corev1.Event, error) {
	s.begin()
	r, err := s.inner.Create(ev)
	s.end(err)
	return r, err
}

func (s legacySink) Update(ev *corev1.Event) (*corev1.Event, error) {
	s.begin()
	r, err := s.inner.Update(ev)
	s.end(err)
	return r, err
}

func (s legacySink) Patch(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	s.begin()
	r, err := s.inner.Patch(ev, data)
	s.end(err)
	return r, err
}

// eventsSink is the client-go events.k8s.io/v1 sink with its writes tracked.
type eventsSink struct {
	*tracker
	inner events.EventSink
}

func (s eventsSink) Create(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	s.begin()
	r, err := s.inner.Create(ctx, ev)
	s.end(err)
	return r, err
}

func (s eventsSink) Update(ctx context.Context, ev *eventsv1.Event) (*eventsv1.Event, error) {
	s.begin()
	r, err := s.inner.Update(ctx, ev)
	s.end(err)
	return r, err
}

func (s eventsSink) Patch(ctx context.Context, ev *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	s.begin()
	r, err := s.inner.Patch(ctx, ev, data)
	s.end(err)
	return r, err
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
