package ipallocator

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/informers"

	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// RepairConfig is what a repair controller needs from its host: the
// repair.Options every repair shares, and what only the IPAddress repair
// uses. Fields a model does not use are ignored.
type RepairConfig struct {
	repair.Options
	// Informers is a shared factory on Client for the IPAddress repair's
	// informers; nil: it makes its own.
	Informers informers.SharedInformerFactory
	// Progress (IPAddress model) reports each full pass; nil reports nothing.
	Progress report.StartProgress
	// FirstPassCarriesOver and Start (IPAddress model) are the server's:
	// its repair's first pass carries the bitmap model's allocations over
	// (CarriesOverInRepair), held until Start is closed
	// (iprepair.IPAddressConfig).
	FirstPassCarriesOver bool
	Start                <-chan struct{}
}

// Runner is a repair controller: Run repairs until ctx ends (closing
// firstPass, if not nil, after the first successful full pass); RunOnce
// makes one full pass.
type Runner interface {
	Run(ctx context.Context, firstPass chan<- struct{}) error
	RunOnce(ctx context.Context) (*report.Report, error)
}

// Repair returns the model's repair controller, or nil when the model keeps
// nothing to repair (in-memory bitmaps).
func (b *Backend) Repair(rc RepairConfig) (Runner, error) {
	switch b.cfg.Model {
	case model.Bitmap:
		if len(b.stores) == 0 {
			return nil, nil
		}
		return b.bitmapRepair(rc, false)
	case model.IPAddress:
		var carryOver func() bool
		if b.cfg.Transition != nil {
			// Bitmap-model replicas record their allocations in the
			// bitmap only: their Services' missing IPAddresses are created
			// without an event.
			carryOver = b.cfg.Transition.DualWrite
		}
		return ipAddressRepair(rc, carryOver)
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownModel, b.cfg.Model)
}

// CarriesOverInRepair reports whether the model's repair carries the other
// model's allocations over in its first pass (RepairConfig.FirstPassCarriesOver):
// the IPAddress model's does, creating the IPAddresses of the Services'
// addresses as the migration would, so its host opens the allocators after
// that pass, and CarryOver does only the rest.
func (b *Backend) CarriesOverInRepair() bool { return b.cfg.Model == model.IPAddress }

// TransitionRepair returns the repair of the other model's records, which
// the server runs while dual write is on so that both models stay true
// (kubernetes#136475: a dual-written bitmap that nobody repairs drifts, and
// static creates are refused for free addresses): the bitmap repair, as a
// companion, in the IPAddress model; the IPAddress repair, carrying the
// bitmap's allocations over quietly, in the bitmap model. Nil when the
// replica is in no transition or there is no bitmap to repair.
func (b *Backend) TransitionRepair(rc RepairConfig) (Runner, error) {
	if b.cfg.Transition == nil {
		return nil, nil
	}
	switch b.cfg.Model {
	case model.IPAddress:
		if len(b.stores) == 0 {
			return nil, nil
		}
		return b.bitmapRepair(rc, true)
	case model.Bitmap:
		return ipAddressRepair(rc, func() bool { return true })
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownModel, b.cfg.Model)
}

// DualWrite reports whether the replica's transition has dual write on
// (false when it is in none).
func (b *Backend) DualWrite() bool {
	return b.cfg.Transition != nil && b.cfg.Transition.DualWrite()
}

// bitmapRepair and ipAddressRepair return a nil Runner, never a typed nil
// pointer in one, with an error.
func (b *Backend) bitmapRepair(rc RepairConfig, companion bool) (Runner, error) {
	r, err := iprepair.NewBitmapRepair(iprepair.BitmapConfig{Options: rc.Options, Stores: b.stores, Companion: companion})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func ipAddressRepair(rc RepairConfig, carryOver func() bool) (Runner, error) {
	r, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{
		Options: rc.Options, Informers: rc.Informers, Progress: rc.Progress, CarryOver: carryOver,
		FirstPassCarriesOver: rc.FirstPassCarriesOver, Start: rc.Start,
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// CarryOver brings the other model's allocations into this one before the
// allocators open, so a server switched from one model to the other never
// hands out an address the old model gave away. In the IPAddress model the
// repair's first pass creates the missing IPAddresses of stored Services
// (CarriesOverInRepair); CarryOver only writes, while dual write is on,
// every address into the bitmap too, so a replica rolled back to the bitmap
// model finds them. The bitmap model, once every IPAddress-model replica
// dual-writes, writes every IPAddress and Service address into its maps.
// Addresses the target cannot hold are in the report's Problems (repair
// reports them as events); they do not make it fail. Nil report: nothing to
// carry (in-memory bitmaps, or the IPAddress model without dual write).
func (b *Backend) CarryOver(ctx context.Context) (*iprepair.MigrationReport, error) {
	var (
		rep *iprepair.MigrationReport
		err error
	)
	switch b.cfg.Model {
	case model.IPAddress:
		if !b.DualWrite() || len(b.stores) == 0 {
			return nil, nil
		}
		rep, err = iprepair.MigrateToBitmap(ctx, iprepair.MigrateConfig{Client: b.cfg.Client, Stores: b.stores, SkipUnrepresentable: true})
	case model.Bitmap:
		if len(b.stores) == 0 {
			return nil, nil
		}
		if b.cfg.Transition != nil {
			// Every IPAddress-model replica must dual-write before this
			// replica trusts the bitmap (see internal/transition).
			wctx, cancel := context.WithTimeout(ctx, waitForDualWriters)
			err := transition.WaitForDualWriters(wctx, b.cfg.Etcd, b.cfg.EtcdPrefix, 0)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("bitmap model: %w", err)
			}
		}
		rep, err = iprepair.MigrateToBitmap(ctx, iprepair.MigrateConfig{Client: b.cfg.Client, Stores: b.stores, SkipUnrepresentable: true})
	default:
		return nil, fmt.Errorf("%w %q", ErrUnknownModel, b.cfg.Model)
	}
	if err != nil {
		return nil, fmt.Errorf("carry over allocations to the %s model: %w", b.cfg.Model, err)
	}
	if !rep.Verified && len(rep.Problems) == 0 {
		return nil, errors.New("carry over allocations: the verification failed")
	}
	return rep, nil
}
