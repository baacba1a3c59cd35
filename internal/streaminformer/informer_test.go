package streaminformer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// fakeSource hands out one fake watch per WatchWithContext call, in turn,
// and records the options of each call.
type fakeSource struct {
	mu      sync.Mutex
	opts    []metav1.ListOptions
	watches chan *watch.FakeWatcher
}

func newFakeSource() *fakeSource { return &fakeSource{watches: make(chan *watch.FakeWatcher, 10)} }

func (s *fakeSource) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	s.opts = append(s.opts, opts)
	s.mu.Unlock()
	select {
	case w := <-s.watches:
		return w, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// next makes the watch the informer gets at its next call.
func (s *fakeSource) next() *watch.FakeWatcher {
	w := watch.NewFakeWithChanSize(100, false)
	s.watches <- w
	return w
}

func (s *fakeSource) options() []metav1.ListOptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.opts)
}

func svc(name, rv string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func endOfList(rv string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv,
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
}

// recorder logs what a handler is told, as text.
type recorder struct {
	mu  sync.Mutex
	log []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, s)
}

func (r *recorder) OnAdd(obj any, initial bool) {
	r.add(fmt.Sprintf("add %s initial=%v", describe(obj), initial))
}
func (r *recorder) OnUpdate(old, obj any) {
	r.add(fmt.Sprintf("update %s -> %s", describe(old), describe(obj)))
}
func (r *recorder) OnDelete(obj any) { r.add("delete " + describe(obj)) }

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func describe(obj any) string {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return "tombstone(" + describe(tomb.Obj) + ")"
	}
	s := obj.(*corev1.Service)
	return s.Name + "@" + s.ResourceVersion
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyShow(t, what, cond, func() any { return nil })
}

// eventuallyShow is eventually, showing what state says on a timeout.
func eventuallyShow(t *testing.T, what string, cond func() bool, state func() any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, state())
		}
		time.Sleep(time.Millisecond)
	}
}

func storeContents(inf *Informer) []string {
	var out []string
	for _, obj := range inf.GetStore().List() {
		out = append(out, describe(obj))
	}
	slices.Sort(out)
	return out
}

// recorded is a new informer on a new fake source, a recorder its one
// handler.
func recorded(t *testing.T) (*fakeSource, *Informer, *recorder, cache.ResourceEventHandlerRegistration) {
	t.Helper()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	rec := &recorder{}
	reg, err := inf.AddEventHandler(rec)
	if err != nil {
		t.Fatal(err)
	}
	return src, inf, rec, reg
}

func start(t *testing.T, inf *Informer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestListThenWatch: the first watch asks for initial events; the store
// fills as they come, HasSynced turns true at the list's end bookmark and a
// handler's once it has taken the list; later events reach store and
// handler in order.
func TestListThenWatch(t *testing.T) {
	t.Parallel()
	src, inf, rec, reg := recorded(t)
	w := src.next()
	start(t, inf)
	w.Add(svc("a", "5"))
	w.Add(svc("b", "7"))
	eventually(t, "the list's objects in the store", func() bool { return len(inf.GetStore().ListKeys()) == 2 })
	if inf.HasSynced() || reg.HasSynced() {
		t.Fatal("synced before the list's end")
	}
	w.Action(watch.Bookmark, endOfList("9"))
	eventually(t, "the handler synced", reg.HasSynced)
	if !inf.HasSynced() || inf.LastSyncResourceVersion() != "9" {
		t.Fatalf("informer synced %v at %q", inf.HasSynced(), inf.LastSyncResourceVersion())
	}
	w.Modify(svc("a", "10"))
	w.Delete(svc("b", "11"))
	w.Add(svc("c", "12"))
	w.Action(watch.Bookmark, svc("", "13"))
	eventually(t, "the watch's events handled", func() bool { return len(rec.events()) == 5 && inf.LastSyncResourceVersion() == "13" })
	want := []string{"add a@5 initial=true", "add b@7 initial=true", "update a@5 -> a@10", "delete b@11", "add c@12 initial=false"}
	if diff := cmp.Diff(want, rec.events()); diff != "" {
		t.Errorf("handler (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a@10", "c@12"}, storeContents(inf)); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
	opts := src.options()
	if len(opts) != 1 || opts[0].SendInitialEvents == nil || !*opts[0].SendInitialEvents || !opts[0].AllowWatchBookmarks ||
		opts[0].ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
		t.Errorf("watch options %+v, want one watch with initial events and bookmarks", opts)
	}
}

// TestStoreVersion: the store's version (LastStoreSyncResourceVersion, what
// pkg/repair's InformerServices watches etcd from) is the list's once the
// list has ended, though the list's objects come in key order, not in
// revision order; then each event's and each bookmark's.
func TestStoreVersion(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	w := src.next()
	start(t, inf)
	version := func(want string) {
		t.Helper()
		eventuallyShow(t, "the store at "+want, func() bool { return inf.GetStore().LastStoreSyncResourceVersion() == want },
			func() any { return inf.GetStore().LastStoreSyncResourceVersion() })
	}
	w.Add(svc("a", "7"))
	w.Add(svc("b", "5"))
	w.Action(watch.Bookmark, endOfList("9"))
	version("9")
	w.Add(svc("c", "12"))
	version("12")
	w.Action(watch.Bookmark, svc("", "13"))
	version("13")
}

// TestResumeAndRelist: a watch that ends resumes from the last resource
// version; one whose version was compacted lists again, and the new list
// updates what changed, adds what is new and deletes what it lacks, as
// tombstones; a list cut short is read again whole.
func TestResumeAndRelist(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	rec := &recorder{}
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	w := src.next()
	start(t, inf)
	w.Add(svc("a", "5"))
	w.Add(svc("b", "6"))
	w.Add(svc("c", "7"))
	w.Action(watch.Bookmark, endOfList("8"))
	w.Stop() // the watch ends: resumed from 8
	w = src.next()
	eventually(t, "a second watch", func() bool { return len(src.options()) == 2 })
	if o := src.options()[1]; o.ResourceVersion != "8" || o.SendInitialEvents != nil {
		t.Fatalf("second watch %+v, want one from 8 without initial events", o)
	}
	w.Modify(svc("a", "9"))
	w.Error(&apierrors.NewResourceExpired("too old").ErrStatus)
	w = src.next() // a list, cut short
	w.Add(svc("b", "6"))
	w.Stop()
	w = src.next() // the list again, whole
	w.Add(svc("a", "9"))
	w.Add(svc("c", "12"))
	w.Add(svc("d", "13"))
	w.Action(watch.Bookmark, endOfList("14"))
	eventuallyShow(t, "the relist applied", func() bool { return len(rec.events()) >= 9 }, func() any { return rec.events() })
	want := []string{
		"add a@5 initial=true", "add b@6 initial=true", "add c@7 initial=true",
		"update a@5 -> a@9",
		"update b@6 -> b@6", // the list cut short
		"update a@9 -> a@9", "update c@7 -> c@12", "add d@13 initial=false",
		"delete tombstone(b@6)", // at the list's end: the list lacks it
	}
	if diff := cmp.Diff(want, rec.events()); diff != "" {
		t.Errorf("handler (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a@9", "c@12", "d@13"}, storeContents(inf)); diff != "" {
		t.Errorf("store (-want +got):\n%s", diff)
	}
	if v := inf.GetStore().LastStoreSyncResourceVersion(); v != "14" {
		t.Errorf("the store at %q after the relist, want the list's 14 (not its tombstone's)", v)
	}
	opts := src.options()
	for i, o := range opts[2:] {
		if o.SendInitialEvents == nil || !*o.SendInitialEvents {
			t.Errorf("watch %d after the expiry %+v, want a list", i+3, o)
		}
	}
}

// TestLateHandler: a handler added to a running, synced informer gets the
// store's objects as initial adds and syncs once it has taken them.
func TestLateHandler(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	w := src.next()
	start(t, inf)
	w.Add(svc("a", "5"))
	w.Action(watch.Bookmark, endOfList("6"))
	eventually(t, "synced", inf.HasSynced)
	rec := &recorder{}
	reg, err := inf.AddEventHandler(rec)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the late handler synced", reg.HasSynced)
	w.Add(svc("b", "7"))
	eventually(t, "b's add", func() bool { return len(rec.events()) == 2 })
	if diff := cmp.Diff([]string{"add a@5 initial=true", "add b@7 initial=false"}, rec.events()); diff != "" {
		t.Errorf("late handler (-want +got):\n%s", diff)
	}
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Fatal(err)
	}
	w.Add(svc("c", "8"))
	eventually(t, "c stored", func() bool { return len(inf.GetStore().ListKeys()) == 3 })
	if n := len(rec.events()); n != 2 {
		t.Errorf("a removed handler got %d events, want 2", n)
	}
}

// TestTransformAndIndexes: objects are stored as the transform returns
// them, and indexes, added before or after the list, cover every object.
func TestTransformAndIndexes(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	byName := func(obj any) ([]string, error) { return []string{obj.(*corev1.Service).Name}, nil }
	inf := New(src, "Service", cache.Indexers{"name": byName})
	if err := inf.SetTransform(func(obj any) (any, error) {
		s := obj.(*corev1.Service).DeepCopy()
		s.ManagedFields = nil
		return s, nil
	}); err != nil {
		t.Fatal(err)
	}
	w := src.next()
	start(t, inf)
	withFields := svc("a", "5")
	withFields.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "test"}}
	w.Add(withFields)
	w.Action(watch.Bookmark, endOfList("6"))
	eventually(t, "synced", inf.HasSynced)
	if err := inf.AddIndexers(cache.Indexers{"rv": func(obj any) ([]string, error) {
		return []string{obj.(*corev1.Service).ResourceVersion}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	for index, value := range map[string]string{"name": "a", "rv": "5"} {
		objs, err := inf.GetIndexer().ByIndex(index, value)
		if err != nil || len(objs) != 1 {
			t.Fatalf("ByIndex(%s, %s) = %d objects, %v", index, value, len(objs), err)
		}
		if fields := objs[0].(*corev1.Service).ManagedFields; fields != nil {
			t.Errorf("stored object kept managedFields %v", fields)
		}
	}
	if err := inf.SetTransform(nil); err == nil {
		t.Error("SetTransform after Run succeeded")
	}
	if err := inf.SetWatchErrorHandler(nil); err == nil {
		t.Error("SetWatchErrorHandler succeeded")
	}
}

// TestErrorEventBacksOff: a watch error other than an expiry resumes from
// the last version seen; the informer stops when its context ends.
func TestErrorEventBacksOff(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	w := src.next()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	w.Add(svc("a", "5"))
	w.Action(watch.Bookmark, endOfList("6"))
	w.Error(&apierrors.NewInternalError(fmt.Errorf("boom")).ErrStatus)
	src.next()
	eventually(t, "a second watch", func() bool { return len(src.options()) == 2 })
	if o := src.options()[1]; o.ResourceVersion != "6" || o.SendInitialEvents != nil {
		t.Errorf("watch after an error %+v, want one from 6", o)
	}
	cancel()
	<-done
	if !inf.IsStopped() {
		t.Error("not stopped after its context ended")
	}
	if _, err := inf.AddEventHandler(&recorder{}); err == nil {
		t.Error("a handler added to a stopped informer")
	}
}

// mirror rebuilds the store from what a handler is told.
type mirror struct {
	mu    sync.Mutex
	state map[string]string
}

func (m *mirror) set(obj any, del bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	s := obj.(*corev1.Service)
	m.mu.Lock()
	defer m.mu.Unlock()
	if del {
		delete(m.state, s.Name)
	} else {
		m.state[s.Name] = s.ResourceVersion
	}
}

func (m *mirror) OnAdd(obj any, _ bool) { m.set(obj, false) }
func (m *mirror) OnUpdate(_, obj any)   { m.set(obj, false) }
func (m *mirror) OnDelete(obj any)      { m.set(obj, true) }
func (m *mirror) snapshot() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.state)
}

// TestHandlersMirrorTheStore: handlers registered before the list, during
// it and after it, each rebuild exactly the store from what they are told
// once they have synced, through a list, changes and a relist (run under
// -race: the store is read while it fills).
func TestHandlersMirrorTheStore(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	var mirrors []*mirror
	var regs []cache.ResourceEventHandlerRegistration
	join := func() {
		m := &mirror{state: map[string]string{}}
		reg, err := inf.AddEventHandler(m)
		if err != nil {
			t.Fatal(err)
		}
		mirrors, regs = append(mirrors, m), append(regs, reg)
	}
	join()
	w := watch.NewFakeWithChanSize(0, false) // each send waits for the informer
	src.watches <- w
	start(t, inf)
	const n = 2000
	for i := range n {
		if i == n/2 {
			join()
		}
		w.Add(svc(fmt.Sprintf("s%04d", i), fmt.Sprint(10+i)))
		_ = inf.GetStore().ListKeys() // a reader beside the fill
	}
	w.Action(watch.Bookmark, endOfList(fmt.Sprint(10+n)))
	join()
	for i := 0; i < n; i += 3 {
		w.Delete(svc(fmt.Sprintf("s%04d", i), fmt.Sprint(20+n+i)))
	}
	w.Error(&apierrors.NewResourceExpired("compacted").ErrStatus)
	w2 := src.next()
	for i := 1; i < n; i += 2 { // half of what is left, changed
		w2.Add(svc(fmt.Sprintf("s%04d", i), fmt.Sprint(30+2*n+i)))
	}
	w2.Action(watch.Bookmark, endOfList(fmt.Sprint(40+3*n)))
	want := func() map[string]string {
		out := map[string]string{}
		for _, obj := range inf.GetStore().List() {
			s := obj.(*corev1.Service)
			out[s.Name] = s.ResourceVersion
		}
		return out
	}
	eventually(t, "the relist in the store", func() bool { return len(inf.GetStore().ListKeys()) == n/2 })
	for i, m := range mirrors {
		eventually(t, fmt.Sprintf("handler %d synced", i), regs[i].HasSynced)
		eventuallyShow(t, fmt.Sprintf("handler %d mirroring the store", i), func() bool { return maps.Equal(m.snapshot(), want()) },
			func() any { return fmt.Sprintf("%d objects against %d", len(m.snapshot()), len(want())) })
	}
}

// gate is a handler whose adds wait for release, one each.
type gate struct {
	recorder
	release chan struct{}
}

func (g *gate) OnAdd(obj any, initial bool) {
	<-g.release
	g.recorder.OnAdd(obj, initial)
}

// TestHandlerSyncWaitsForItsAdds: a handler's registration has synced only
// once the handler has taken every add of the list, however long after the
// informer synced.
func TestHandlerSyncWaitsForItsAdds(t *testing.T) {
	t.Parallel()
	src := newFakeSource()
	inf := New(src, "Service", cache.Indexers{})
	slow := &gate{release: make(chan struct{})}
	reg, err := inf.AddEventHandler(slow)
	if err != nil {
		t.Fatal(err)
	}
	w := src.next()
	start(t, inf)
	w.Add(svc("a", "5"))
	w.Add(svc("b", "6"))
	w.Action(watch.Bookmark, endOfList("7"))
	eventually(t, "the informer synced", inf.HasSynced)
	for i := range 2 {
		time.Sleep(20 * time.Millisecond) // time to sync too early, were it wrong
		if reg.HasSynced() {
			t.Fatalf("the registration synced with %d of its 2 adds taken", i)
		}
		slow.release <- struct{}{}
	}
	eventually(t, "the registration synced", reg.HasSynced)
	if n := len(slow.events()); n != 2 {
		t.Errorf("synced after %d adds, want 2", n)
	}
}
