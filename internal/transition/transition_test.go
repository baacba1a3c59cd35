package transition

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

const prefix = "/registry"

func join(t *testing.T, ctx context.Context, client *clientv3.Client, m, id string) *Coordinator {
	t.Helper()
	c, err := Join(ctx, Config{Client: client, Prefix: prefix, Model: model.Name(m), ID: id, TTL: 2 * time.Second})
	if err != nil {
		t.Fatalf("join %s %s: %v", m, id, err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestInitialState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		bitmap   bool
		model    string
		wantDual bool
	}{
		{"fresh IPAddress cluster", false, string(model.IPAddress), false},
		{"IPAddress replica on a bitmap cluster", true, string(model.IPAddress), true},
		{"fresh bitmap cluster", false, string(model.Bitmap), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			client := etcdtest.New(t).Client()
			if tc.bitmap {
				if _, err := client.Put(ctx, etcdlayout.Layout{}.PrimaryServiceIPRange(), "x"); err != nil {
					t.Fatal(err)
				}
			}
			c := join(t, ctx, client, tc.model, "r1")
			if got := c.DualWrite(); got != tc.wantDual {
				t.Fatalf("DualWrite = %v, want %v", got, tc.wantDual)
			}
			// A second replica of the other model agrees: the state is stored once.
			other := model.IPAddress
			if tc.model == string(model.IPAddress) {
				other = model.Bitmap
			}
			c2, err := Join(ctx, Config{Client: client, Prefix: prefix, Model: other, ID: "r2", TTL: 2 * time.Second})
			switch {
			case other == model.Bitmap && !tc.wantDual:
				if !errors.Is(err, ErrRetired) {
					t.Fatalf("bitmap replica on a cluster without dual write: err = %v, want ErrRetired", err)
				}
				recs, err := ListRecords(ctx, client, prefix, model.Bitmap)
				if err != nil || len(recs) != 0 {
					t.Fatalf("refused bitmap replica left records %v (err %v)", recs, err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				defer c2.Close(ctx)
				if c2.DualWrite() != tc.wantDual {
					t.Fatalf("second replica DualWrite = %v, want %v", c2.DualWrite(), tc.wantDual)
				}
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFinishRefusesWhileBitmapReplicaLive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := etcdtest.New(t).Client()
	if _, err := client.Put(ctx, etcdlayout.Layout{}.PrimaryServiceIPRange(), "x"); err != nil {
		t.Fatal(err)
	}
	ipr := join(t, ctx, client, string(model.IPAddress), "ip-1")
	bm := join(t, ctx, client, string(model.Bitmap), "bm-1")
	waitFor(t, "the IPAddress replica to dual-write", ipr.DualWrite)

	if _, err := Finish(ctx, client, prefix, FinishOptions{By: "test"}); !errors.Is(err, ErrBitmapWritersLive) {
		t.Fatalf("Finish with a bitmap replica live: err = %v, want ErrBitmapWritersLive", err)
	}
	for _, force := range []bool{false, true} {
		if err := CheckNoBitmapWriters(ctx, client, prefix, force); !errors.Is(err, ErrBitmapWritersLive) || !strings.Contains(err.Error(), "bm-1") {
			t.Fatalf("CheckNoBitmapWriters(force %v) with bitmap replica bm-1 live: %v, want ErrBitmapWritersLive naming it", force, err)
		}
	}
	if err := bm.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := CheckNoBitmapWriters(ctx, client, prefix, false); err != nil {
		t.Fatalf("CheckNoBitmapWriters with no bitmap replica: %v", err)
	}
	st, err := Finish(ctx, client, prefix, FinishOptions{By: "test"})
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	waitFor(t, "the IPAddress replica to stop dual-writing", func() bool { return !ipr.DualWrite() })
	waitFor(t, "the acknowledgement", func() bool {
		recs, _ := ListRecords(ctx, client, prefix, model.IPAddress)
		return len(recs) == 1 && !recs[0].DualWrite && recs[0].StateRevision >= st.Revision
	})
	// A bitmap replica started now refuses, and leaves no record behind.
	if _, err := Join(ctx, Config{Client: client, Prefix: prefix, Model: model.Bitmap, ID: "bm-2", TTL: 2 * time.Second}); !errors.Is(err, ErrRetired) {
		t.Fatalf("bitmap replica after Finish: err = %v, want ErrRetired", err)
	}
	// Reversible: Resume, the IPAddress replica acknowledges, a bitmap replica may start.
	if _, err := Resume(ctx, client, prefix, "test"); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	if err := WaitForDualWriters(wctx, client, prefix, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !ipr.DualWrite() {
		t.Fatal("acknowledged dual write but does not dual-write")
	}
	join(t, ctx, client, string(model.Bitmap), "bm-3")
}

// A kill leaves the record until the lease expires; Finish succeeds after.
func TestKilledBitmapReplicaExpires(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	victimClient := e.NewClient(t)
	// The lease is granted after this, and etcd expires it no sooner than
	// its TTL after the grant (a keep-alive only moves that later).
	beforeJoin := time.Now()
	_, err := Join(ctx, Config{Client: victimClient, Prefix: prefix, Model: model.Bitmap, ID: "victim", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	victimClient.Close() // no Close of the coordinator: like SIGKILL, keep-alives stop
	client := e.Client()
	if _, err := Finish(ctx, client, prefix, FinishOptions{By: "test"}); !errors.Is(err, ErrBitmapWritersLive) {
		t.Fatalf("Finish right after the kill: err = %v, want ErrBitmapWritersLive", err)
	}
	waitFor(t, "the killed replica's record to expire", func() bool {
		_, err := Finish(ctx, client, prefix, FinishOptions{By: "test"})
		return err == nil
	})
	if since := time.Since(beforeJoin); since < 2*time.Second {
		t.Fatalf("Finish succeeded %v after the replica joined, before its 2 s lease could expire", since)
	}
}

// Begin holds off a switch until allocations in flight are done, and the
// acknowledgement is written only after them.
func TestSwitchWaitsForAllocationsInFlight(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := etcdtest.New(t).Client()
	ipr := join(t, ctx, client, string(model.IPAddress), "ip-1") // fresh cluster: dual write off
	dual, done, err := ipr.Begin(ctx)
	if err != nil || dual {
		t.Fatalf("Begin = %v, %v; want false, nil", dual, err)
	}
	st, err := Resume(ctx, client, prefix, "test")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the watch has delivered the change by now
	recs, err := ListRecords(ctx, client, prefix, model.IPAddress)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].StateRevision >= st.Revision {
		t.Fatalf("acknowledged %+v while an allocation begun under the old state is in flight", recs)
	}
	done()
	waitFor(t, "the acknowledgement", func() bool {
		recs, _ := ListRecords(ctx, client, prefix, model.IPAddress)
		return len(recs) == 1 && recs[0].DualWrite && recs[0].StateRevision >= st.Revision
	})
	dual, done, err = ipr.Begin(ctx)
	if err != nil || !dual {
		t.Fatalf("Begin after the switch = %v, %v; want true, nil", dual, err)
	}
	done()
}

// A replica frozen past its lease registers again before it allocates, and
// a bitmap replica that finds the transition finished meanwhile stops.
func TestStaleLeaseReRegisters(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := etcdtest.New(t).Client()
	bm := join(t, ctx, client, string(model.Bitmap), "bm-1")
	// Simulate a freeze: the lease is revoked behind the replica's back, as
	// the server would after the TTL, and its freshness has run out.
	bm.mu.Lock()
	lease := bm.leaseID
	bm.mu.Unlock()
	if _, err := client.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	// Its keep-alive learns the lease is gone: the replica knows it is stale.
	waitFor(t, "the keep-alive to report the lost lease", func() bool {
		bm.mu.Lock()
		defer bm.mu.Unlock()
		return bm.freshUntil.IsZero()
	})
	if _, err := Finish(ctx, client, prefix, FinishOptions{By: "test"}); err != nil {
		t.Fatalf("Finish once the frozen replica's record expired: %v", err)
	}
	if _, _, err := bm.Begin(ctx); !errors.Is(err, ErrRetired) {
		t.Fatalf("Begin of the thawed bitmap replica: err = %v, want ErrRetired", err)
	}
	// An IPAddress replica in the same situation re-registers and goes on.
	ipr := join(t, ctx, client, string(model.IPAddress), "ip-1")
	ipr.mu.Lock()
	ipr.freshUntil = time.Time{}
	ipr.mu.Unlock()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, done, err := ipr.Begin(ctx)
			if err != nil {
				t.Errorf("Begin: %v", err)
				return
			}
			done()
		}()
	}
	wg.Wait()
	recs, err := ListRecords(ctx, client, prefix, model.IPAddress)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records after re-registration: %v (err %v)", recs, err)
	}
}

// putIdentityLease writes a kube-apiserver identity lease the way
// kube-apiserver stores it (protobuf, <prefix>/leases/kube-system/<name>).
func putIdentityLease(t *testing.T, ctx context.Context, client *clientv3.Client, name string, labels map[string]string, renewed time.Time) {
	t.Helper()
	holder := name + "_uid"
	dur := int32(3600)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: labels},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur,
			RenewTime: &metav1.MicroTime{Time: renewed}},
	}
	value, err := etcdlayout.Encode(lease)
	if err != nil {
		t.Fatal(err)
	}
	key := etcdlayout.Layout{Prefix: prefix}.LeasesInNamespacePrefix("kube-system") + name
	if _, err := client.Put(ctx, key, string(value)); err != nil {
		t.Fatal(err)
	}
}

// Finish refuses while a kube-apiserver identity lease is live (a
// kube-apiserver ≤ 1.33 beside us writes the bitmap and keeps no replica
// record), unless forced; expired leases, other components' leases and
// other Leases do not count; an unreadable identity lease does.
func TestFinishRefusesWhileKubeAPIServerLive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := etcdtest.New(t).Client()
	if _, err := client.Put(ctx, etcdlayout.Layout{Prefix: prefix}.PrimaryServiceIPRange(), "x"); err != nil {
		t.Fatal(err)
	}
	identity := map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver"}
	now := time.Now()
	putIdentityLease(t, ctx, client, "apiserver-expired", identity, now.Add(-2*time.Hour))
	putIdentityLease(t, ctx, client, "apiserver-kcm", map[string]string{"apiserver.kubernetes.io/identity": "kube-controller-manager"}, now)
	putIdentityLease(t, ctx, client, "kube-scheduler", nil, now)

	servers, err := LiveAPIServers(ctx, client, prefix, now)
	if err != nil || len(servers) != 0 {
		t.Fatalf("LiveAPIServers with only an expired and foreign leases: %v, %v", servers, err)
	}

	putIdentityLease(t, ctx, client, "apiserver-live", identity, now)
	_, err = Finish(ctx, client, prefix, FinishOptions{By: "test"})
	if !errors.Is(err, ErrBitmapWritersLive) || !strings.Contains(err.Error(), "apiserver-live") || strings.Contains(err.Error(), "apiserver-expired") {
		t.Fatalf("Finish with a live kube-apiserver: err = %v, want ErrBitmapWritersLive naming apiserver-live only", err)
	}
	if st, ok, err := ReadState(ctx, client, prefix); err != nil || (ok && !st.DualWrite) {
		t.Fatalf("refused Finish changed the state: %+v %v %v", st, ok, err)
	}
	if err := CheckNoBitmapWriters(ctx, client, prefix, false); !errors.Is(err, ErrBitmapWritersLive) || !strings.Contains(err.Error(), "apiserver-live") {
		t.Fatalf("CheckNoBitmapWriters with a live kube-apiserver: %v, want ErrBitmapWritersLive naming apiserver-live", err)
	}
	if err := CheckNoBitmapWriters(ctx, client, prefix, true); err != nil {
		t.Fatalf("CheckNoBitmapWriters(force) with only a kube-apiserver live: %v", err)
	}

	// An unreadable identity lease is not proof of absence.
	key := etcdlayout.Layout{Prefix: prefix}.LeasesInNamespacePrefix("kube-system") + "apiserver-live"
	if _, err := client.Put(ctx, key, "k8s:enc:aescbc:v1:key1:opaque"); err != nil {
		t.Fatal(err)
	}
	if _, err := Finish(ctx, client, prefix, FinishOptions{By: "test"}); !errors.Is(err, ErrBitmapWritersLive) {
		t.Fatalf("Finish with an unreadable identity lease: err = %v, want ErrBitmapWritersLive", err)
	}

	st, err := Finish(ctx, client, prefix, FinishOptions{By: "test", Force: true})
	if err != nil || st.DualWrite {
		t.Fatalf("forced Finish: %+v %v", st, err)
	}
}

// WritersIgnoringScopes names live bitmap-model replicas and kube-apiservers,
// not IPAddress-model replicas; it answers an empty list, not nil, when it
// looked and found none.
func TestWritersIgnoringScopes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := etcdtest.New(t).Client()
	bm := join(t, ctx, client, "bitmap", "bm-1")
	join(t, ctx, client, "ipaddress", "ip-1")
	got, err := WritersIgnoringScopes(ctx, client, prefix, time.Now())
	if want := []string{"bitmap-model replica bm-1"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q %v, want %q", got, err, want)
	}
	if err := bm.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = WritersIgnoringScopes(ctx, client, prefix, time.Now())
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("only an IPAddress-model replica: %q %v, want an empty list", got, err)
	}
	join(t, ctx, client, "bitmap", "bm-2")
	putIdentityLease(t, ctx, client, "apiserver-live", map[string]string{"apiserver.kubernetes.io/identity": "kube-apiserver"}, time.Now())
	got, err = WritersIgnoringScopes(ctx, client, prefix, time.Now())
	if want := []string{"bitmap-model replica bm-2", "kube-apiserver apiserver-live"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q %v, want %q", got, err, want)
	}
}
