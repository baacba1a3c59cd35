package integration

import (
	"context"
	"io"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/model"
)

// server is one running allocator API server.
type server struct {
	client     kubernetes.Interface
	restConfig *rest.Config
	etcd       *etcdtest.Etcd
	dataDir    string
	started    <-chan struct{} // the server's start-up is over (apiserver.Server.Started)
	stop       func()
}

type serverOptions struct {
	serviceRange string
	etcd         *etcdtest.Etcd // nil: a new one
	dataDir      string         // "": a new temp dir
	model        string         // --allocator; "": the default (ipaddress)
	// wrapAllocator wraps each family's allocator.
	wrapAllocator func(allocation.Interface) allocation.Interface
	// inMemory keeps the bitmaps in memory (Config.InMemory).
	inMemory bool
	// rebuild sets Config.RebuildAllocations.
	rebuild bool
	// noWait returns before the server is ready.
	noWait bool
	// upstreamAnswers turns off what we add to kube-apiserver's answers
	// (the ServiceCIDR overlap warnings), for the parity comparison.
	upstreamAnswers bool
}

// models are the allocator models every allocation test runs with.
var models = []string{string(model.Bitmap), string(model.IPAddress)}

// forEachModel runs test once per allocator model.
func forEachModel(t *testing.T, test func(t *testing.T, model string)) {
	for _, model := range models {
		t.Run(model, func(t *testing.T) { test(t, model) })
	}
}

// startServer starts a server (with its own repair controller, as in
// production) and waits until /readyz is ok. It is stopped on cleanup (or
// earlier with stop).
func startServer(t *testing.T, so serverOptions) *server {
	t.Helper()
	srv := testserver.Start(t, testserver.Options{
		ServiceRange:  so.serviceRange,
		Model:         so.model,
		Etcd:          so.etcd,
		DataDir:       so.dataDir,
		WithRepair:    true,
		NoWait:        so.noWait,
		WrapAllocator: so.wrapAllocator,
		Configure: func(cfg *apiserver.Config) {
			cfg.InMemory = so.inMemory
			cfg.RebuildAllocations = so.rebuild
			if so.upstreamAnswers {
				cfg.ServiceCIDROverlapWarnings = false
			}
		},
	})
	return &server{client: srv.Client, restConfig: srv.RESTConfig, etcd: srv.Etcd, dataDir: srv.DataDir, started: srv.Started, stop: srv.Stop}
}

func waitReady(t *testing.T, client kubernetes.Interface) { testserver.WaitReady(t, client) }

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// scrapeMetrics returns the server's /metrics text.
func scrapeMetrics(t *testing.T, ctx context.Context, c kubernetes.Interface) string {
	t.Helper()
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	out, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
