package apiserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/slim"
	"github.com/allocator/allocator/internal/streaminformer"
	"github.com/allocator/allocator/internal/warmstart"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// WarmStart carries the Service and IPAddress informers' stores across a
// clean restart (internal/warmstart). A shutdown writes each store to a
// file in the warm-start dir; the next start reads and decodes the files
// while the embedded etcd restores its index (LoadWarmStart, before the
// etcd starts), and each informer then starts from its file's objects and
// watches etcd from the file's version, instead of listing and decoding a
// million objects after etcd serves. A file that does not match etcd
// (warmstart.Token.Check: another history, or compacted past its version)
// or is damaged is dropped, and that informer lists as it would have.
//
// Only a store read from etcd (no watch cache: the default) is carried;
// only the embedded etcd's server has one (serve sets it): with
// --etcd-servers, nothing restores beside the reading.
type WarmStart struct {
	dir   string
	loads map[string]*warmLoad // by warmFile name
	// seeded is allocator_warm_start_objects: by file, the objects an
	// informer started from (0: it listed).
	seeded *metrics.GaugeVec
}

// The warm-start files, one per informer, in the warm-start dir.
const (
	warmServices    = "services"
	warmIPAddresses = "ipaddresses"
)

// warmLoad is one file read in the background.
type warmLoad struct {
	done   chan struct{}
	header warmstart.Header
	objs   []any
	err    error         // set before done closes; os.ErrNotExist: no file
	took   time.Duration // the read's, set before done closes
}

// LoadWarmStart returns the WarmStart of dir, its files (if any) read,
// removed and decoded in goroutines of their own from now on.
func LoadWarmStart(dir string) *WarmStart {
	ws := &WarmStart{dir: dir, loads: map[string]*warmLoad{}, seeded: metrics.NewGaugeVec(&metrics.GaugeOpts{
		Name:           "allocator_warm_start_objects",
		Help:           "Objects the informer of a resource started from, read from the warm-start file of the last clean shutdown (0: it listed them from etcd)",
		StabilityLevel: metrics.ALPHA,
	}, []string{"resource"})}
	warmstart.RemovePartial(dir)
	for name, decode := range map[string]func([]byte) (any, error){
		warmServices:    func(b []byte) (any, error) { return slim.DecodeService(b) },
		warmIPAddresses: func(b []byte) (any, error) { return slim.DecodeIPAddress(b) },
	} {
		l := &warmLoad{done: make(chan struct{})}
		ws.loads[name] = l
		go l.read(filepath.Join(dir, name), decode)
	}
	return ws
}

// attach makes ws the warm start of s, whose etcd client's KV is kv: its
// streaming informers are seeded, its metric registered.
func (ws *WarmStart) attach(s *Server, kv clientv3.KV) {
	s.sources.warm = func(inf *streaminformer.Informer, file string, src *storeSource) {
		// Before Run: SetSeed fails only on a started informer.
		_ = inf.SetSeed(ws.seed(file, src, kv, s.cfg.EtcdPrefix), progressOf(src))
	}
	s.registry.MustRegister(ws.seeded)
	for file := range ws.loads {
		ws.seeded.WithLabelValues(file).Set(0)
	}
}

// maxPresized bounds the objects a read makes room for before reading
// them: 4 million, 64 MiB of slice.
const maxPresized = 1 << 22

// read reads and decodes the file at path.
func (l *warmLoad) read(path string, decode func([]byte) (any, error)) {
	defer close(l.done)
	start := time.Now()
	defer func() { l.took = time.Since(start) }()
	r, err := warmstart.Open(path)
	if err != nil {
		l.err = err
		return
	}
	l.header = r.Header()
	// Sized by the header, up to a bound: a corrupt count is found only at
	// the file's end.
	objs := make([]any, 0, min(l.header.Count, maxPresized))
	l.err = r.Each(func(b []byte) error {
		obj, err := decode(b)
		if err != nil {
			return err
		}
		objs = append(objs, obj)
		return nil
	})
	if l.err == nil {
		l.objs = objs
	}
}

// seed is the SeedFunc of the informer whose file is name, reading src:
// the file's objects, once loaded, when src is an etcd store (no watch
// cache) and the file matches etcd (kv, under prefix).
func (ws *WarmStart) seed(name string, src *storeSource, kv clientv3.KV, prefix string) streaminformer.SeedFunc {
	return func(ctx context.Context) ([]any, string, bool) {
		l := ws.loads[name]
		logger := klog.FromContext(ctx).WithName("warm-start").WithValues("file", name)
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, "", false
		}
		if errors.Is(l.err, os.ErrNotExist) {
			return nil, "", false
		}
		if l.err != nil {
			logger.Info("Listing instead of the warm-start file", "err", l.err)
			return nil, "", false
		}
		objs := l.objs
		l.objs = nil // the informer's from now on
		if err := src.wait(ctx); err != nil {
			return nil, "", false
		}
		if _, ok := src.store.(storageSource); !ok {
			logger.Info("Listing instead of the warm-start file: the resource has a watch cache")
			return nil, "", false
		}
		key := etcdlayout.Layout{Prefix: prefix}.WarmStart()
		if err := l.header.Token.Check(ctx, kv, key, l.header.ResourceVersion); err != nil {
			logger.Info("Listing instead of the warm-start file", "err", err)
			return nil, "", false
		}
		logger.Info("Starting from the warm-start file", "objects", len(objs),
			"resourceVersion", l.header.ResourceVersion, "read", l.took)
		ws.seeded.WithLabelValues(name).Set(float64(len(objs)))
		return objs, l.header.ResourceVersion, true
	}
}

// progressOf asks etcd for the progress of src's watches, as requestProgress
// does.
func progressOf(src *storeSource) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := src.wait(ctx); err != nil {
			return err
		}
		etcdSource, ok := src.store.(storageSource)
		if !ok {
			return nil
		}
		return etcdSource.store.RequestWatchProgress(ctx)
	}
}

// informerStopWait bounds how long the shutdown waits for the informers,
// which stop with the context the server was built with, before it writes
// their stores.
const informerStopWait = 10 * time.Second

// warmMarkTimeout bounds the shutdown's mark in etcd.
const warmMarkTimeout = 5 * time.Second

// save writes the warm-start file of each informer in infs (by file name)
// whose store is one version's state, after marking etcd (kv, under
// prefix). The informers must have stopped.
func (ws *WarmStart) save(ctx context.Context, kv clientv3.KV, prefix string, infs map[string]*streaminformer.Informer) error {
	type snapshot struct {
		objs []any
		rv   string
	}
	snaps := map[string]snapshot{}
	for name, inf := range infs {
		if objs, rv, ok := inf.Snapshot(); ok {
			snaps[name] = snapshot{objs, rv}
		}
	}
	if len(snaps) == 0 {
		return nil
	}
	if err := os.MkdirAll(ws.dir, 0o700); err != nil {
		return fmt.Errorf("warm-start dir: %w", err)
	}
	mctx, cancel := context.WithTimeout(ctx, warmMarkTimeout)
	defer cancel()
	tok, err := warmstart.Mark(mctx, kv, etcdlayout.Layout{Prefix: prefix}.WarmStart())
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 0, len(snaps))
	var mu sync.Mutex
	for name, s := range snaps {
		wg.Go(func() {
			h := warmstart.Header{Token: tok, ResourceVersion: s.rv}
			if err := warmstart.Write(filepath.Join(ws.dir, name), h, s.objs); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// saveWarmStart writes the warm-start files (WarmStart) once a shutdown
// has stopped serving: the informers, which stop with ctx, have stopped.
// Nothing is written when the server stops for another reason than ctx's
// end (etcd restored under it: its stores describe a state etcd no longer
// has).
func (s *Server) saveWarmStart(ctx context.Context) {
	if s.cfg.WarmStart == nil || s.informers == nil || ctx.Err() == nil || errors.Is(context.Cause(ctx), ErrEtcdRestored) {
		return
	}
	start := time.Now()
	stopped := make(chan struct{})
	go func() {
		s.informers.Shutdown() // waits for every informer's Run to return
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(informerStopWait):
		logger(ctx).Info("Not writing the warm-start files: the informers have not stopped", "waited", informerStopWait)
		return
	}
	if err := s.cfg.WarmStart.save(context.WithoutCancel(ctx), s.etcd.KV, s.cfg.EtcdPrefix, s.sources.streaming); err != nil {
		logger(ctx).Error(err, "Writing the warm-start files failed; the next start lists instead")
		return
	}
	logger(ctx).Info("Wrote the warm-start files", "took", time.Since(start))
}

// The encodings the files hold: a stored object's own protobuf message,
// which slim's decoders read.
var (
	_ warmstart.Marshaler = (*corev1.Service)(nil)
	_ warmstart.Marshaler = (*networkingv1.IPAddress)(nil)
)
