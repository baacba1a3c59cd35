package repair

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// TestStoredServices: the Services a pass reads from etcd are every stored
// Service, oldest first, each with its ModRevision as resourceVersion, in
// pages (more than the first page of report.ListPageSize); Services
// encrypted at rest are listed through the API server instead; a value
// that does not decode fails the read, naming its key.
func TestStoredServices(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	layout := etcdlayout.Layout{Prefix: "/registry"}
	epoch := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const n = 5200
	var want, keys, values []string
	for i := range n {
		// Names in key order, ages in the reverse: the oldest is stored last.
		name := "s-" + strconv.Itoa(10000+i)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name,
			CreationTimestamp: metav1.NewTime(epoch.Add(-time.Duration(i) * time.Second))}}
		data, err := etcdlayout.Encode(svc)
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{name}, want...)
		keys, values = append(keys, layout.Service("default", name)), append(values, string(data))
	}
	revs := map[string]int64{}
	for i, rev := range putInBatches(t, ctx, e.Client(), keys, values) {
		revs[want[n-1-i]] = rev
	}
	services, err := StoredServices{Stored: e.Stored(layout)}.Services(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, svc := range services {
		got = append(got, svc.Name)
		if rv := strconv.FormatInt(revs[svc.Name], 10); svc.ResourceVersion != rv {
			t.Errorf("%s: resourceVersion %q, want its ModRevision %s", svc.Name, svc.ResourceVersion, rv)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Services, oldest first (-want +got):\n%s", diff)
	}

	// Encrypted at rest: listed through the API server instead.
	encrypted := layout.Service("other", "secret")
	if _, err := e.Client().Put(ctx, encrypted, "k8s:enc:aescbc:v1:key1:..."); err != nil {
		t.Fatal(err)
	}
	fromAPI := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "secret"}}
	listed, err := StoredServices{Stored: e.Stored(layout), Client: fake.NewClientset(fromAPI)}.Services(ctx)
	if err != nil || len(listed) != 1 || listed[0].Name != "secret" {
		t.Errorf("with a Service encrypted at rest: %d Services (%v), want the API server's one", len(listed), err)
	}
	if _, err := e.Client().Delete(ctx, encrypted); err != nil {
		t.Fatal(err)
	}

	bad := layout.Service("other", "bad")
	if _, err := e.Client().Put(ctx, bad, "not an object"); err != nil {
		t.Fatal(err)
	}
	var keyErr *etcdlayout.KeyError
	if _, err := (StoredServices{Stored: e.Stored(layout)}).Services(ctx); !errors.As(err, &keyErr) || keyErr.Key != bad {
		t.Errorf("a value that does not decode: %v, want an error naming %s", err, bad)
	}
}

// TestReadStored: a read streams the range at one revision when etcd
// streams it, and reads pages when etcd answers that it does not (an etcd
// before 3.7); both give every key under the prefix, in key order, as etcd
// held them at the revision asked for; a compacted revision, and an error
// of each, stop the read with that error.
func TestReadStored(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	const n = 12000 // more than a page and than a stream's first chunks
	var want, values []string
	for i := range n {
		want, values = append(want, "/p/"+strconv.Itoa(100000+i)), append(values, strconv.Itoa(i))
	}
	putInBatches(t, ctx, e.Client(), want, values)
	at, err := e.Client().Get(ctx, "/p/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	rev := at.Header.Revision
	conn := e.Client().ActiveConnection()
	reads := map[string]clientv3.KV{"stream": e.Client().KV,
		"pages": clientv3.NewKVFromKVClient(olderEtcd{etcdserverpb.NewKVClient(conn), conn}, e.Client())}
	if _, err := e.Client().Put(ctx, "/p/later", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client().Put(ctx, "/q", "outside"); err != nil {
		t.Fatal(err)
	}
	for name, kv := range reads {
		var got []string
		read, err := ReadStored(ctx, kv, "/p/", rev, func(kv *mvccpb.KeyValue) error {
			got = append(got, string(kv.Key))
			return nil
		})
		if err != nil || read != rev {
			t.Fatalf("%s: read at %d (%v), want %d", name, read, err, rev)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: keys at revision %d (-want +got):\n%s", name, rev, diff)
		}
		now, err := ReadStored(ctx, kv, "/p/", 0, func(*mvccpb.KeyValue) error { return nil })
		if err != nil || now <= rev {
			t.Errorf("%s: read now at %d (%v), want after %d", name, now, err, rev)
		}
		stop := errors.New("stop")
		calls := 0
		_, err = ReadStored(ctx, kv, "/p/", rev, func(*mvccpb.KeyValue) error {
			if calls++; calls == 7000 {
				return stop
			}
			return nil
		})
		var keyErr *etcdlayout.KeyError
		if !errors.Is(err, stop) || !errors.As(err, &keyErr) || keyErr.Key != want[6999] || calls != 7000 {
			t.Errorf("%s: each failing at the 7,000th key: %v after %d calls, want its error with key %s", name, err, calls, want[6999])
		}
	}
	if _, err := e.Client().Compact(ctx, rev+1); err != nil {
		t.Fatal(err)
	}
	for name, kv := range reads {
		if _, err := ReadStored(ctx, kv, "/p/", rev, func(*mvccpb.KeyValue) error { return nil }); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("%s: a read at a compacted revision: %v, want %v", name, err, rpctypes.ErrCompacted)
		}
	}
}

// TestReadStoredCut: a read whose etcd connection is cut mid-stream, after
// some keys were handed to each, fails: it never returns the keys before
// the cut as the whole range (the client retries a stream only before its
// first answer).
func TestReadStoredCut(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := etcdtest.New(t)
	// 24 MB: more than a gRPC stream's receive window can ever hold, so
	// the cut comes while most of the range is still in etcd.
	const n = 12000
	var keys, values []string
	for i := range n {
		keys, values = append(keys, "/p/"+strconv.Itoa(100000+i)), append(values, strings.Repeat("v", 2048))
	}
	putInBatches(t, ctx, e.Client(), keys, values)
	proxy, client := e.Proxied(t)
	seen := 0
	_, err := ReadStored(ctx, client.KV, "/p/", 0, func(*mvccpb.KeyValue) error {
		if seen++; seen == 2000 {
			proxy.Cut()
		}
		return nil
	})
	if err == nil {
		t.Fatalf("a read cut after 2,000 of %d keys succeeded, with %d keys", n, seen)
	}
	if seen >= n {
		t.Fatalf("the cut came after the whole range was read (%d keys): the test cut nothing", seen)
	}
	t.Logf("cut after %d keys: %v", seen, err)
}

// putInBatches stores values[i] at keys[i], 100 keys to a transaction,
// and returns the revision each key was stored at.
func putInBatches(t *testing.T, ctx context.Context, c *clientv3.Client, keys, values []string) []int64 {
	t.Helper()
	revs := make([]int64, 0, len(keys))
	for from := 0; from < len(keys); from += 100 {
		to := min(from+100, len(keys))
		var puts []clientv3.Op
		for i := from; i < to; i++ {
			puts = append(puts, clientv3.OpPut(keys[i], values[i]))
		}
		resp, err := c.Txn(ctx).Then(puts...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		for range puts {
			revs = append(revs, resp.Header.Revision)
		}
	}
	return revs
}

// olderEtcd is the KV API of an etcd before 3.7, whose KV service has no
// RangeStream: the server answers the call Unimplemented.
type olderEtcd struct {
	etcdserverpb.KVClient
	conn *grpc.ClientConn
}

func (o olderEtcd) RangeStream(ctx context.Context, in *etcdserverpb.RangeRequest, opts ...grpc.CallOption) (etcdserverpb.KV_RangeStreamClient, error) {
	s, err := o.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/etcdserverpb.KV/NotRangeStream", opts...)
	if err != nil {
		return nil, err
	}
	stream := &grpc.GenericClientStream[etcdserverpb.RangeRequest, etcdserverpb.RangeStreamResponse]{ClientStream: s}
	if err := stream.SendMsg(in); err != nil {
		return nil, err
	}
	return stream, stream.CloseSend()
}
