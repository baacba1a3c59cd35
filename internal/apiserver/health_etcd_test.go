package apiserver

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2/ktesting"

	"github.com/allocator/allocator/internal/etcdtest"
)

// fakeAlarms answers AlarmList with fixed alarms or an error and counts the
// calls.
type fakeAlarms struct {
	alarms []*etcdserverpb.AlarmMember
	err    error
	calls  atomic.Int32
}

func (f *fakeAlarms) AlarmList(context.Context) (*clientv3.AlarmResponse, error) {
	f.calls.Add(1)
	if f.err != nil {
		return nil, f.err
	}
	return &clientv3.AlarmResponse{Alarms: f.alarms}, nil
}

func TestEtcdAlarmCheck(t *testing.T) {
	t.Parallel()
	nospace := &etcdserverpb.AlarmMember{MemberID: 0xabc, Alarm: etcdserverpb.AlarmType_NOSPACE}
	corrupt := &etcdserverpb.AlarmMember{MemberID: 0xdef, Alarm: etcdserverpb.AlarmType_CORRUPT}
	for _, tc := range []struct {
		name   string
		alarms []*etcdserverpb.AlarmMember
		err    error
		want   []string // substrings of the error; nil: ready
	}{
		{name: "no alarm"},
		{name: "NOSPACE", alarms: []*etcdserverpb.AlarmMember{nospace},
			want: []string{"NOSPACE", "member abc", "database space exceeded", "compact", "defragment", "disarm"}},
		{name: "two alarms", alarms: []*etcdserverpb.AlarmMember{nospace, corrupt},
			want: []string{"NOSPACE raised by member abc", "; etcd alarm CORRUPT raised by member def"}},
		{name: "permission denied", err: rpctypes.ErrPermissionDenied},
		{name: "etcd unreachable", err: context.DeadlineExceeded, want: []string{"list etcd alarms", "deadline exceeded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newEtcdAlarmCheck(&fakeAlarms{alarms: tc.alarms, err: tc.err}, ktesting.NewLogger(t, ktesting.NewConfig()))
			err := c.Check(nil)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Check = %v, want ready", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check = ready, want an error with %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestEtcdAlarmCheckRate: at most one AlarmList per interval; calls in
// between answer the last result, and a cleared alarm is seen after it.
func TestEtcdAlarmCheckRate(t *testing.T) {
	t.Parallel()
	fake := &fakeAlarms{alarms: []*etcdserverpb.AlarmMember{{MemberID: 1, Alarm: etcdserverpb.AlarmType_NOSPACE}}}
	c := newEtcdAlarmCheck(fake, ktesting.NewLogger(t, ktesting.NewConfig()))
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	for range 5 {
		if err := c.Check(nil); err == nil {
			t.Fatal("ready with NOSPACE raised")
		}
	}
	if n := fake.calls.Load(); n != 1 {
		t.Fatalf("%d AlarmList calls within one interval, want 1", n)
	}
	fake.alarms = nil
	now = now.Add(alarmCheckInterval)
	if err := c.Check(nil); err != nil {
		t.Fatalf("not ready after the alarm was disarmed: %v", err)
	}
	if n := fake.calls.Load(); n != 2 {
		t.Fatalf("%d AlarmList calls after one interval, want 2", n)
	}
}

// TestEtcdAlarmCheckRealEtcd fills a real etcd with a small quota until it
// raises NOSPACE, then recovers it as an operator does (compact,
// defragment, disarm): the check fails naming the alarm, then passes.
func TestEtcdAlarmCheckRealEtcd(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.NewWithQuota(t, 1<<20)
	client := etcd.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := newEtcdAlarmCheck(client, ktesting.NewLogger(t, ktesting.NewConfig()))
	c.interval = 0
	c.timeout = 30 * time.Second // the verdicts are tested here, not the bound: a loaded machine can take longer than 2 s
	if err := c.Check(nil); err != nil {
		t.Fatalf("ready check on a healthy etcd: %v", err)
	}
	putErr := etcdtest.FillUntilNoSpace(ctx, client, "/ballast")
	if !errors.Is(putErr, rpctypes.ErrNoSpace) {
		t.Fatalf("500 puts of 128 KiB into a 1 MiB quota: %v, want %v", putErr, rpctypes.ErrNoSpace)
	}
	err := c.Check(nil)
	if err == nil || !strings.Contains(err.Error(), "NOSPACE") {
		t.Fatalf("Check with NOSPACE raised = %v, want an error naming NOSPACE", err)
	}

	resp, err := client.Delete(ctx, "/ballast")
	if err != nil {
		t.Fatalf("delete with NOSPACE raised: %v", err)
	}
	if _, err := client.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Defragment(ctx, etcd.Endpoints()[0]); err != nil {
		t.Fatal(err)
	}
	alarms, err := client.AlarmList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alarms.Alarms {
		if _, err := client.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Check(nil); err != nil {
		t.Fatalf("Check after compact, defragment and disarm: %v", err)
	}
}
