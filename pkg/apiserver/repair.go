package apiserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"

	ipcontroller "github.com/allocator/allocator/pkg/ipallocator/controller"
	"github.com/allocator/allocator/pkg/ipallocator/dualwrite"
	portcontroller "github.com/allocator/allocator/pkg/portallocator/controller"
	"github.com/allocator/allocator/pkg/report"
	"github.com/allocator/allocator/pkg/transition"
)

// waitForDualWriters bounds one bootstrap attempt's wait for the
// IPAddress-model replicas to acknowledge dual write; bootstrap retries.
const waitForDualWriters = 30 * time.Second

// startRepairController runs the repair controller of the server's model
// until the server stops: the bitmap repair over the RangeAllocations, or the
// IPAddress repair over IPAddresses and ServiceCIDRs. /readyz waits for its
// first successful pass (it retries failures with backoff and never stops).
// Allocators that keep no stored state (MemoryBitmapFactory) have nothing to
// repair; the check then passes at once.
func (s *Server) startRepairController(hc genericapiserver.PostStartHookContext) error {
	ctx := hc.Context
	if s.cfg.ManualRepair {
		close(s.repairFirstPass)
		return nil
	}
	client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
	if err != nil {
		return fmt.Errorf("repair controller client: %w", err)
	}
	runner, err := s.newRepairController(ctx, client)
	if err != nil {
		return err
	}
	if err := s.startNodePortRepair(ctx, client); err != nil {
		return err
	}
	if runner == nil {
		close(s.repairFirstPass)
		return nil
	}
	go func() {
		if err := runner.Run(ctx, s.repairFirstPass); err != nil && ctx.Err() == nil {
			logger(ctx).Error(err, "ClusterIP repair controller stopped")
		}
	}()
	return s.startTransitionRepair(ctx, client)
}

// startTransitionRepair runs, while dual write is on, the repair of the
// other model's records too, so both stay true (kubernetes#136475: a
// dual-written bitmap that nobody repairs drifts, and static creates are
// refused for free addresses): the bitmap repair in the IPAddress model, the
// IPAddress repair (carrying bitmap-model allocations over, quietly) in the
// bitmap model. Neither gates readiness.
func (s *Server) startTransitionRepair(ctx context.Context, client kubernetes.Interface) error {
	if s.transition == nil {
		return nil
	}
	recorder := report.NewEventRecorder(ctx, client)
	var runner repairRunner
	switch s.cfg.Model {
	case ModelIPAddress:
		stores, ok := s.bitmapStores()
		if !ok || len(stores) == 0 {
			return nil
		}
		r, err := ipcontroller.NewBitmapRepair(ipcontroller.BitmapConfig{
			Client: client, Stores: stores, Recorder: recorder, Metrics: s.repairMetrics, Interval: s.cfg.RepairInterval,
			Companion: true,
		})
		if err != nil {
			return err
		}
		runner = r
	case ModelBitmap:
		r, err := ipcontroller.NewIPAddressRepair(ipcontroller.IPAddressConfig{
			Client: client, Recorder: recorder, Metrics: s.repairMetrics, Interval: s.cfg.RepairInterval,
			CarryOver: func() bool { return true },
		})
		if err != nil {
			return err
		}
		runner = r
	default:
		return nil
	}
	go s.whileDualWrite(ctx, func(ctx context.Context) {
		if err := runner.Run(ctx, nil); err != nil && ctx.Err() == nil {
			logger(ctx).Error(err, "Transition repair controller stopped")
		}
	})
	return nil
}

// whileDualWrite runs fn whenever dual write is on, cancelling it when dual
// write turns off, until ctx ends.
func (s *Server) whileDualWrite(ctx context.Context, fn func(context.Context)) {
	const poll = time.Second
	for ctx.Err() == nil {
		if !s.transition.DualWrite() {
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
			for runCtx.Err() == nil && s.transition.DualWrite() {
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

type repairRunner interface {
	Run(ctx context.Context, firstPass chan<- struct{}) error
}

func (s *Server) newRepairController(ctx context.Context, client kubernetes.Interface) (repairRunner, error) {
	recorder := report.NewEventRecorder(ctx, client)
	switch s.cfg.Model {
	case ModelBitmap:
		stores, ok := s.bitmapStores()
		if !ok {
			logger(ctx).Info("Allocators keep no stored map; the bitmap repair controller does not run")
			return nil, nil
		}
		return ipcontroller.NewBitmapRepair(ipcontroller.BitmapConfig{
			Client: client, Stores: stores, Recorder: recorder, Metrics: s.repairMetrics, Interval: s.cfg.RepairInterval,
		})
	case ModelIPAddress:
		cfg := ipcontroller.IPAddressConfig{
			Client: client, Recorder: recorder, Metrics: s.repairMetrics, Interval: s.cfg.RepairInterval,
		}
		if s.transition != nil {
			// Bitmap-model replicas record their allocations in the
			// bitmap only: their Services' missing IPAddresses are created
			// without an event.
			cfg.CarryOver = s.transition.DualWrite
		}
		return ipcontroller.NewIPAddressRepair(cfg)
	default:
		return nil, fmt.Errorf("repair controller: unknown model %q", s.cfg.Model)
	}
}

// bitmapStores returns the allocators' stored maps (the dual-written ones in
// the IPAddress model), if every allocator has one.
func (s *Server) bitmapStores() ([]ipcontroller.BitmapStore, bool) {
	var stores []ipcontroller.BitmapStore
	for _, a := range s.allocators {
		if d, ok := a.(*dualwrite.Allocator); ok {
			stores = append(stores, d.Bitmap())
			continue
		}
		store, ok := a.(ipcontroller.BitmapStore)
		if !ok {
			return nil, false
		}
		stores = append(stores, store)
	}
	return stores, true
}

// migrateFromOtherModel carries allocations made under the other model over
// before this server opens its allocators, so a server switched from one
// model to the other never hands out an address the old model gave away:
// the IPAddress model creates the missing IPAddresses of stored Services; the
// bitmap model writes every IPAddress and Service address into its maps.
// Addresses the target cannot hold are logged (repair reports them as
// events); they do not keep the server from starting.
func (s *Server) migrateFromOtherModel(ctx context.Context, client kubernetes.Interface) error {
	log := logger(ctx)
	var (
		rep *ipcontroller.MigrationReport
		err error
	)
	switch s.cfg.Model {
	case ModelIPAddress:
		rep, err = ipcontroller.MigrateToIPAddress(ctx, ipcontroller.MigrateConfig{Client: client})
		if err == nil && s.transition != nil && s.transition.DualWrite() {
			// A rolled-back replica must find every address in the bitmap,
			// also those allocated while dual write was off.
			if stores, ok := s.bitmapStores(); ok && len(stores) > 0 {
				var toBitmap *ipcontroller.MigrationReport
				toBitmap, err = ipcontroller.MigrateToBitmap(ctx, ipcontroller.MigrateConfig{Client: client, Stores: stores, SkipUnrepresentable: true})
				if err == nil {
					rep.Problems = append(rep.Problems, toBitmap.Problems...)
				}
			}
		}
	case ModelBitmap:
		stores, ok := s.bitmapStores()
		if !ok {
			return nil
		}
		if s.transition != nil {
			// Every IPAddress-model replica must dual-write before this
			// replica trusts the bitmap (see pkg/transition).
			wctx, cancel := context.WithTimeout(ctx, waitForDualWriters)
			err := transition.WaitForDualWriters(wctx, s.etcd, s.cfg.EtcdPrefix, 0)
			cancel()
			if err != nil {
				return fmt.Errorf("bitmap model: %w", err)
			}
		}
		rep, err = ipcontroller.MigrateToBitmap(ctx, ipcontroller.MigrateConfig{Client: client, Stores: stores, SkipUnrepresentable: true})
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("carry over allocations to the %s model: %w", s.cfg.Model, err)
	}
	if rep.Created > 0 || len(rep.Problems) > 0 {
		log.Info("Carried allocations over from the other model", "report", rep.String())
	}
	for _, p := range rep.Problems {
		log.Info("Allocation not carried over", "type", p.Type, "ip", p.IP, "service", p.Service, "message", p.Message)
	}
	if !rep.Verified && len(rep.Problems) == 0 {
		return errors.New("carry over allocations: the verification failed")
	}
	return nil
}

// startNodePortRepair runs the node-port repair beside the ClusterIP one, in
// both IP models (the node-port map is the same in both). It does not gate
// readiness: the map is persistent, so a restart loses nothing it would
// have to rebuild first.
func (s *Server) startNodePortRepair(ctx context.Context, client kubernetes.Interface) error {
	if s.nodePorts == nil {
		return nil
	}
	r, err := portcontroller.NewNodePortRepair(portcontroller.NodePortConfig{
		Client: client, Store: s.nodePorts, Recorder: report.NewEventRecorder(ctx, client),
		Metrics: s.repairMetrics, Interval: s.cfg.RepairInterval,
	})
	if err != nil {
		return err
	}
	go func() {
		if err := r.Run(ctx, nil); err != nil && ctx.Err() == nil {
			logger(ctx).Error(err, "Node-port repair controller stopped")
		}
	}()
	return nil
}
