package iprepair

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// BitmapStore is what the bitmap repair needs of one family's stored map;
// *clusterip.EtcdAllocator implements it.
type BitmapStore interface {
	Range() subrange.Range
	repair.Store
}

var _ BitmapStore = (*clusterip.EtcdAllocator)(nil)

// BitmapConfig configures a BitmapRepair: repair.Options (Interval,
// LeakGrace, DryRun, ...) and the maps.
type BitmapConfig struct {
	repair.Options
	// Stores are the cluster's families, primary first.
	Stores []BitmapStore
	// Companion says the maps are dual-written beside the IPAddress model
	// (pkg/ipaddress/dualwrite), whose repair reports on the Services: addresses
	// outside a map belong to other ServiceCIDRs, and duplicates and missing
	// bits are that repair's to report. The pass still sets missing bits
	// and frees leaks; it reports only what is the map's own.
	Companion bool
}

// BitmapRepair rebuilds the bitmap model's RangeAllocations from the Services,
// one repair.Repairer per family. See the package doc for its rules.
type BitmapRepair struct {
	cfg BitmapConfig
	// families are the repair cores of cfg.Stores, in order; they carry the
	// leak counts from pass to pass, so RunOnce must not be called
	// concurrently.
	families []*repair.Repairer[netip.Addr]
}

// NewBitmapRepair checks cfg and returns a repair controller.
func NewBitmapRepair(cfg BitmapConfig) (*BitmapRepair, error) {
	if cfg.Client == nil || len(cfg.Stores) == 0 {
		return nil, errors.New("bitmap repair: a client and at least one store are required")
	}
	cfg.Options = cfg.Options.WithDefaults()
	r := &BitmapRepair{cfg: cfg}
	for _, store := range cfg.Stores {
		family, err := repair.New(repair.Config[netip.Addr]{Options: cfg.Options, Store: store, Space: repair.AddrSpace{Range: store.Range()}})
		if err != nil {
			return nil, fmt.Errorf("bitmap repair: %w", err)
		}
		r.families = append(r.families, family)
	}
	return r, nil
}

// Run repairs every Interval until ctx ends. A failed pass is retried with
// backoff; the loop never stops by itself. firstPass, if not nil, is closed
// after the first successful pass (the server's readiness waits for it).
func (r *BitmapRepair) Run(ctx context.Context, firstPass chan<- struct{}) error {
	report.RunPasses(ctx, r.cfg.Interval, "Bitmap repair", r.RunOnce, r.cfg.Metrics.ReconcileError, firstPass)
	return nil
}

// RunOnce makes one repair pass over every family. It reads every map, then
// the Services once (repair.Options.ListServices), and for each family reports what each Service holds
// and what no Service holds, and commits (repair.Pass.Finish: events and
// metrics follow only a successful commit); a family whose write lost to
// concurrent allocations is passed over again from a fresh read and list
// (repair.Rounds).
func (r *BitmapRepair) RunOnce(ctx context.Context) (*report.Report, error) {
	start := time.Now()
	rep := &report.Report{Model: model.Bitmap, DryRun: r.cfg.DryRun}
	// companion drops what the IPAddress repair reports when it runs beside.
	companion := func(p report.Problem) bool {
		return r.cfg.Companion && (p.Type == report.TypeOutOfRange || p.Type == report.TypeDuplicate || p.Reason == report.ReasonNotAllocated)
	}
	rounds := repair.NewRounds(len(r.families))
	for rounds.Next() {
		// The maps are read before the Services are listed (pkg/repair).
		passes := map[int]*repair.Pass[netip.Addr]{}
		for _, i := range rounds.Pending() {
			pass, err := r.families[i].Begin(ctx)
			if err != nil {
				return nil, fmt.Errorf("bitmap repair: %w", err)
			}
			passes[i] = pass
		}
		services, err := r.cfg.ListServices(ctx)
		if err != nil {
			return nil, fmt.Errorf("bitmap repair: %w", err)
		}
		rep.Services = len(services)

		for _, i := range rounds.Pending() {
			pass, rng := passes[i], r.cfg.Stores[i].Range()
			primary := i == 0 // reports what concerns no family once
			family := subrange.FamilyName(rng.IPv6())

			// What each Service holds, oldest first.
			var found repair.Findings[netip.Addr]
			for j := range services {
				svc := services[j]
				ips, invalid := holding.ClusterIPs(svc)
				for _, ip := range ips {
					p := report.Problem{IP: ip.String(), Service: report.ServiceKey(svc)}
					if ip.Is6() != rng.IPv6() {
						if !r.servesFamily(ip.Is6()) && primary {
							p.Type, p.Reason = report.TypeInvalid, report.ReasonNotValid
							p.Message = fmt.Sprintf("Cluster IP %s(%s) is of ip family that is no longer configured on cluster; please recreate service", ip, subrange.FamilyName(ip.Is6()))
							found.Add(svc, p)
						}
						continue
					}
					switch pass.Hold(svc, ip) {
					case repair.Held:
						continue
					case repair.Missing:
						p.Type, p.Reason, p.Fixed = report.TypeRepair, report.ReasonNotAllocated, !r.cfg.DryRun
						p.Message = fmt.Sprintf("Cluster IP [%s]:%s is not allocated; repairing", family, ip)
						if !companion(p) {
							found.AddMissing(svc, ip, p) // dropped if the commit finds it was not missing
						}
						continue
					case repair.Duplicate:
						p.Type, p.Reason = report.TypeDuplicate, report.ReasonAlreadyAllocated
						p.Message = fmt.Sprintf("Cluster IP [%s]:%s was assigned to multiple services; please recreate service", family, ip)
					case repair.OutOfRange:
						p.Type, p.Reason = report.TypeOutOfRange, report.ReasonOutOfRange
						p.Message = fmt.Sprintf("Cluster IP [%s]:%s is not within the service CIDR %s; please recreate service", family, ip, rng.Prefix())
					}
					if !companion(p) {
						found.Add(svc, p)
					}
				}
				for _, text := range invalid {
					if primary {
						found.Add(svc, report.Problem{Type: report.TypeInvalid, Reason: report.ReasonNotValid, IP: text, Service: report.ServiceKey(svc),
							Message: fmt.Sprintf("Cluster IP %s is not a valid IP; please recreate service", text)})
					}
				}
			}

			// What no Service holds is leaked: kept and counted, or freed.
			r.addLeaks(&found, pass.Leaks(), family)

			// Commit, then count and record what is left.
			done, err := pass.Finish(ctx, &found, repair.Reporting{DryRun: r.cfg.DryRun, Metrics: r.cfg.Metrics, Recorder: r.cfg.Recorder})
			if rounds.Lost(i, err) {
				continue // in the next round, from a fresh read and list
			}
			if err != nil {
				return nil, fmt.Errorf("bitmap repair: %w", err)
			}
			rep.Problems = append(rep.Problems, done.Problems...)
			rep.Allocated += done.Allocated
			if done.Wrote {
				rep.Writes++
			}
		}
	}
	if err := rounds.Err(); err != nil {
		return nil, fmt.Errorf("bitmap repair: %w", err)
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// addLeaks words the pass's leaks: an address no Service holds, kept and
// counted until its LeakPasses-th pass, or freed on it.
func (r *BitmapRepair) addLeaks(found *repair.Findings[netip.Addr], leaks []repair.Leak[netip.Addr], family string) {
	for _, leak := range leaks {
		p := report.Problem{Type: report.TypeLeak, IP: leak.Key.String(),
			Message: fmt.Sprintf("Cluster IP [%s]:%s is allocated but no Service uses it; it is freed on the %s pass that sees it", family, leak.Key, report.Ordinal(repair.LeakPasses))}
		switch {
		case leak.Freed:
			p.Fixed = !r.cfg.DryRun
			p.Message = fmt.Sprintf("Cluster IP [%s]:%s appears to have leaked: cleaning up", family, leak.Key)
		case leak.InFlight:
			p.InFlight = true
			p.Message = fmt.Sprintf("Cluster IP [%s]:%s is allocated but no Service uses it; it is freed once the Service writes in flight, "+
				"which may still store its Service, can no longer land", family, leak.Key)
		}
		found.Add(nil, p)
	}
}

func (r *BitmapRepair) servesFamily(ipv6 bool) bool {
	return slices.ContainsFunc(r.cfg.Stores, func(s BitmapStore) bool { return s.Range().IPv6() == ipv6 })
}
