package apiserver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/allocator/allocator/internal/fence"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// startRepairController runs the repair controller of the server's model
// until the server stops: the bitmap repair over the RangeAllocations, or the
// IPAddress repair over IPAddresses and ServiceCIDRs. /readyz waits for its
// first successful pass (it retries failures with backoff and never stops).
// Allocators that keep no stored state (Config.InMemory) have nothing to
// repair; the check then passes at once.
func (s *Server) startRepairController(hc genericapiserver.PostStartHookContext) error {
	ctx := hc.Context
	if s.cfg.ManualRepair {
		close(s.repairFirstPass)
		return nil
	}
	client, err := controllerClient(hc.LoopbackClientConfig)
	if err != nil {
		return fmt.Errorf("repair controller client: %w", err)
	}
	runner, err := s.backend.Repair(ipallocator.RepairConfig{Options: s.repairOptions(ctx, client), Informers: s.informers,
		FirstPassCarriesOver: s.backend.CarriesOverInRepair(), Start: s.repairStart})
	if err != nil {
		return fmt.Errorf("repair controller: %w", err)
	}
	if err := s.startNodePortRepair(ctx, client); err != nil {
		return err
	}
	if runner == nil {
		logger(ctx).Info("The allocators keep no stored map; the ClusterIP repair controller does not run")
		close(s.repairFirstPass)
		return nil
	}
	s.controllers.run(ctx, func(ctx context.Context) {
		if err := runner.Run(ctx, s.repairFirstPass); err != nil && ctx.Err() == nil {
			logger(ctx).Error(err, "ClusterIP repair controller stopped")
		}
	})
	return s.startTransitionRepair(ctx, client)
}

// repairOptions are the settings of the server's repairs: each has its own
// event recorder; the map-based repairs read the Services from the Service
// informer when the server runs one (repairServices); the graces are
// Config.RepairGrace; the writes in flight are read from the write leases
// every server registers in etcd.
func (s *Server) repairOptions(ctx context.Context, client kubernetes.Interface) repair.Options {
	return repair.Options{Client: client, Recorder: report.NewEventRecorder(ctx, client), Metrics: s.repairMetrics, Interval: s.cfg.RepairInterval,
		Services: s.repairServices(client), LeakGrace: s.cfg.RepairGrace, OrphanGrace: s.cfg.RepairGrace,
		InFlight: fence.InFlight{KV: s.etcd.KV, Layout: etcdlayout.Layout{Prefix: s.cfg.EtcdPrefix}}}
}

// startTransitionRepair runs, while dual write is on, the repair of the
// other model's records too (ipallocator.Backend.TransitionRepair). It does
// not gate readiness.
func (s *Server) startTransitionRepair(ctx context.Context, client kubernetes.Interface) error {
	runner, err := s.backend.TransitionRepair(ipallocator.RepairConfig{Options: s.repairOptions(ctx, client), Informers: s.informers})
	if err != nil || runner == nil {
		return err
	}
	s.controllers.run(ctx, func(ctx context.Context) {
		s.whileDualWrite(ctx, func(ctx context.Context) {
			if err := runner.Run(ctx, nil); err != nil && ctx.Err() == nil {
				logger(ctx).Error(err, "Transition repair controller stopped")
			}
		})
	})
	return nil
}

// whileDualWrite runs fn whenever dual write is on, cancelling it when dual
// write turns off, until ctx ends.
func (s *Server) whileDualWrite(ctx context.Context, fn func(context.Context)) {
	const poll = time.Second
	for ctx.Err() == nil {
		if !s.backend.DualWrite() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(poll):
				continue
			}
		}
		runCtx, cancel := context.WithCancel(ctx)
		go func() {
			defer cancel()
			for runCtx.Err() == nil && s.backend.DualWrite() {
				select {
				case <-runCtx.Done():
				case <-time.After(poll):
				}
			}
		}()
		fn(runCtx)
		cancel()
	}
}

// migrateFromOtherModel carries allocations made under the other model over
// before this server opens its allocators (ipallocator.Backend.CarryOver).
// Addresses the target cannot hold are logged (repair reports them as
// events); they do not keep the server from starting.
func (s *Server) migrateFromOtherModel(ctx context.Context) error {
	log := logger(ctx)
	rep, err := s.backend.CarryOver(ctx)
	if err != nil || rep == nil {
		return err
	}
	if rep.Created > 0 || len(rep.Problems) > 0 {
		log.Info("Carried allocations over from the other model", "report", rep.String())
	}
	for _, p := range rep.Problems {
		log.Info("Allocation not carried over", "type", p.Type, "ip", p.IP, "service", p.Service, "message", p.Message)
	}
	return nil
}

// awaitCarryOverPass waits, when the model's repair carries the other
// model's allocations over in its first pass (the IPAddress model, see
// ipallocator.Backend.CarriesOverInRepair), for that pass: the allocators
// open after it, so they never hand out an address a stored Service holds
// without an IPAddress. The pass is held (repairStart) until the
// ServiceCIDR informer holds the default ServiceCIDR at cidrVersion or
// later, the version bootstrap wrote or read: a pass that missed a range
// bootstrap just created or grew would find that range's Services out of
// range and create nothing for them.
func (s *Server) awaitCarryOverPass(ctx context.Context, cidrVersion string) error {
	if s.backend == nil || !s.backend.CarriesOverInRepair() || s.cfg.ManualRepair {
		return nil
	}
	if s.informers != nil {
		seen := s.informers.Networking().V1().ServiceCIDRs().Informer().GetStore()
		if err := awaitVersion(ctx, seen, DefaultServiceCIDRName, cidrVersion, informerCatchUpWait); err != nil {
			return fmt.Errorf("the ServiceCIDR informer: %w", err)
		}
	}
	s.repairStartOnce.Do(func() { close(s.repairStart) })
	select {
	case <-s.repairFirstPass:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// informerCatchUpWait bounds awaitCarryOverPass's wait for the ServiceCIDR
// informer; bootstrap then tries again from the start.
const informerCatchUpWait = 30 * time.Second

// awaitVersion waits, at most bound, until store holds the object at key at
// resourceVersion version or later (any version when version is "").
func awaitVersion(ctx context.Context, store cache.Store, key, version string, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		obj, ok, err := store.GetByKey(key)
		if err != nil || !ok {
			return false, nil
		}
		m, err := meta.Accessor(obj)
		return err == nil && versionAtLeast(m.GetResourceVersion(), version), nil
	})
	if err != nil {
		return fmt.Errorf("%s not seen at resourceVersion %q or later: %w", key, version, err)
	}
	return nil
}

// versionAtLeast reports whether resourceVersion got is want or later; any
// version is when want is "". An API server's resourceVersions are etcd
// revisions, so they compare as numbers; ones that do not parse compare
// equal only.
func versionAtLeast(got, want string) bool {
	if want == "" {
		return true
	}
	g, errG := strconv.ParseUint(got, 10, 64)
	w, errW := strconv.ParseUint(want, 10, 64)
	if errG != nil || errW != nil {
		return got == want
	}
	return g >= w
}

// startNodePortRepair runs the node-port repair beside the ClusterIP one, in
// both IP models (the node-port map is the same in both). It does not gate
// readiness: the map is persistent, so a restart loses nothing it would
// have to rebuild first. So its first pass waits for the ClusterIP
// repair's, which does gate it (afterFirstRepairPass, at most 30 s): at
// 100,000 Services, a list of every Service (its source when the server
// runs no Service informer, repairServices) costs about a fifth of the
// start-up's CPU (hack/scale.sh), which run at once it would take from the
// work readiness waits for. When the server runs a Service informer, the
// first pass waits for it to sync first (afterServiceInformerSync), and
// the bound starts then: with a million Services the sync alone takes
// longer than the bound, and a pass before it would list every Service,
// or run beside the ClusterIP repair's first pass.
func (s *Server) startNodePortRepair(ctx context.Context, client kubernetes.Interface) error {
	if s.nodePorts == nil {
		return nil
	}
	r, err := repair.NewNodePortRepair(repair.NodePortConfig{Options: s.repairOptions(ctx, client), Store: s.nodePorts})
	if err != nil {
		return err
	}
	s.controllers.run(ctx, func(ctx context.Context) {
		if !s.afterServiceInformerSync(ctx) || !s.afterFirstRepairPass(ctx, firstPassWait) {
			return
		}
		if err := r.Run(ctx, nil); err != nil && ctx.Err() == nil {
			logger(ctx).Error(err, "Node-port repair controller stopped")
		}
	})
	return nil
}

// firstPassWait bounds how long work that readiness does not wait for
// waits for the ClusterIP repair's first pass: a repair that keeps
// failing must not hold it back for good.
const firstPassWait = 30 * time.Second

// afterFirstRepairPass waits until the ClusterIP repair's first pass is
// done, or max has passed (firstPassWait); false when ctx ended first.
func (s *Server) afterFirstRepairPass(ctx context.Context, max time.Duration) bool {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-s.repairFirstPass:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// afterServiceInformerSync waits until the server's Service informer, if it
// runs one, has synced; false when ctx ended first.
func (s *Server) afterServiceInformerSync(ctx context.Context) bool {
	if s.serviceInformer == nil {
		return ctx.Err() == nil
	}
	return cache.WaitForCacheSync(ctx.Done(), s.serviceInformer.HasSynced)
}
