package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	etcdserverpb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// The etcd-alarms readyz check. An etcd whose database reached its quota
// (--quota-backend-bytes) raises the NOSPACE alarm and refuses every write
// that adds data until an operator compacts, defragments and disarms it;
// reads keep working, so the etcd and etcd-readiness checks (a read) stay
// green while every create fails. This check makes /readyz say so:
// "[-]etcd-alarms failed" in /readyz, the alarm and what to do in
// /readyz/etcd-alarms and in the server's log.
//
// It costs one AlarmList (a small request through etcd's raft log, no data
// read) per alarmCheckInterval at most, bounded by alarmCheckTimeout; calls
// in between answer the last result, as k8s.io/apiserver's etcd checks do.
const (
	alarmCheckName     = "etcd-alarms"
	alarmCheckTimeout  = 2 * time.Second
	alarmCheckInterval = time.Second
)

// alarmLister is the part of etcd's maintenance API the check uses;
// *clientv3.Client implements it.
type alarmLister interface {
	AlarmList(ctx context.Context) (*clientv3.AlarmResponse, error)
}

// etcdAlarmCheck is a healthz.HealthChecker failing while etcd has an alarm
// raised.
type etcdAlarmCheck struct {
	etcd     alarmLister
	log      klog.Logger
	timeout  time.Duration
	interval time.Duration
	now      func() time.Time

	mu       sync.Mutex
	last     error     // the last AlarmList's verdict; guarded by mu
	lastAt   time.Time // when the last AlarmList started; guarded by mu
	reported string    // the alarms last logged ("" = none); guarded by mu
	unlisted bool      // alarms could not be listed (permission), logged; guarded by mu
}

func newEtcdAlarmCheck(etcd alarmLister, log klog.Logger) *etcdAlarmCheck {
	return &etcdAlarmCheck{
		etcd: etcd, log: log, timeout: alarmCheckTimeout, interval: alarmCheckInterval, now: time.Now,
		last: errors.New("etcd alarms not listed yet"),
	}
}

func (c *etcdAlarmCheck) Name() string { return alarmCheckName }

// Check lists etcd's alarms, at most once per interval; the lock is not
// held across the request.
func (c *etcdAlarmCheck) Check(*http.Request) error {
	c.mu.Lock()
	if now := c.now(); c.lastAt.IsZero() || now.Sub(c.lastAt) >= c.interval {
		c.lastAt = now
	} else {
		err := c.last
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	resp, err := c.etcd.AlarmList(ctx)
	verdict := c.verdict(resp, err)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = verdict
	c.logChange(verdict, err)
	return verdict
}

// verdict turns AlarmList's answer into the check's result.
func (c *etcdAlarmCheck) verdict(resp *clientv3.AlarmResponse, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrPermissionDenied), errors.Is(err, rpctypes.ErrUserEmpty):
		// An etcd with authentication may not show alarms to our user: the
		// check cannot tell, and must not keep a working server unready.
		return nil
	case err != nil:
		return fmt.Errorf("list etcd alarms: %w", err)
	}
	var raised []string
	for _, a := range resp.Alarms {
		if a.Alarm != etcdserverpb.AlarmType_NONE {
			raised = append(raised, describeAlarm(a))
		}
	}
	if len(raised) == 0 {
		return nil
	}
	return errors.New(strings.Join(raised, "; "))
}

// describeAlarm says what an alarm means for this server and what ends it.
func describeAlarm(a *etcdserverpb.AlarmMember) string {
	switch a.Alarm {
	case etcdserverpb.AlarmType_NOSPACE:
		return fmt.Sprintf("etcd alarm NOSPACE raised by member %x: etcd's database reached its quota (--quota-backend-bytes) "+
			"and etcd refuses writes (mvcc: database space exceeded), so Services cannot be created; "+
			"compact and defragment etcd, then disarm the alarm (etcdctl alarm disarm)", a.MemberID)
	case etcdserverpb.AlarmType_CORRUPT:
		return fmt.Sprintf("etcd alarm CORRUPT raised by member %x: etcd found its data inconsistent between members "+
			"and refuses writes until the member is restored", a.MemberID)
	default:
		return fmt.Sprintf("etcd alarm %s raised by member %x", a.Alarm, a.MemberID)
	}
}

// logChange logs when an alarm is raised or cleared, and when alarms cannot
// be listed for lack of permission, once per change; mu is held.
func (c *etcdAlarmCheck) logChange(verdict, listErr error) {
	switch {
	case listErr != nil && verdict == nil: // not permitted: passes unseen
		if !c.unlisted {
			c.log.Info("Cannot list etcd alarms; the etcd-alarms readyz check passes without them", "err", listErr)
			c.unlisted = true
		}
		return
	case listErr != nil:
		return // etcd unreachable: the etcd checks say so; the alarm state is unknown
	}
	c.unlisted = false
	now := ""
	if verdict != nil {
		now = verdict.Error()
	}
	switch {
	case now == c.reported:
	case now != "":
		c.log.Error(nil, "etcd has an alarm raised; not ready", "alarms", now)
	default:
		c.log.Info("etcd alarms cleared; ready again")
	}
	c.reported = now
}
