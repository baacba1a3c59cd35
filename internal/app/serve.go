package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/grpc/grpclog"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/klog/v2"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/embedetcd"
)

// etcdURLsFile remembers the embedded etcd's URLs in its data directory, so a
// restart comes back on the same member address.
const etcdURLsFile = "allocator-urls.json"

type etcdURLs struct {
	ClientURL string `json:"clientURL"`
	PeerURL   string `json:"peerURL"`
}

func newServeCommand(streams Streams) *cobra.Command {
	opts := apiserver.NewOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the API server (Services, Namespaces, Events, IPAddresses, ServiceCIDRs) with ClusterIP allocation",
		Long: `Run a Kubernetes-compatible API server that allocates Service ClusterIPs.

With no --etcd-servers it runs an embedded etcd in --data-dir, reachable only
over TLS with the client certificate generated into <data-dir>/etcd-pki (the
start-up message prints the flags repair and migrate need). It listens with a
self-signed certificate, writes <data-dir>/admin.kubeconfig (mode 0600) with a
generated admin token, and prints the kubectl command line to use. One serve
per --data-dir: a second one exits at once, naming the first one's pid. It
stops within seconds on SIGINT or SIGTERM, open watches included, once the
Service writes in progress have finished with their releases; a restart on
the same --data-dir keeps the data.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), opts, streams)
		},
	}
	fss := opts.Flags()
	for _, name := range fss.Order {
		cmd.Flags().AddFlagSet(fss.FlagSets[name])
	}
	// Help in sections, as kube-apiserver's: the ranges and the model first,
	// the logging flags every command shares last.
	cmd.SetUsageFunc(func(cmd *cobra.Command) error {
		printSections(cmd.OutOrStderr(), cmd, fss)
		return nil
	})
	cmd.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n\n", cmd.Long)
		printSections(cmd.OutOrStdout(), cmd, fss)
	})
	return cmd
}

// printSections prints cmd's usage line, fss section by section, and the
// flags cmd inherits, wrapped to the terminal's width (unwrapped when w is
// not a terminal).
func printSections(w io.Writer, cmd *cobra.Command, fss cliflag.NamedFlagSets) {
	cols := 0
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		cols, _, _ = term.GetSize(int(f.Fd()))
	}
	fmt.Fprintf(w, "Usage:\n  %s\n", cmd.UseLine())
	cliflag.PrintSections(w, fss, cols)
	if global := cmd.InheritedFlags(); global.HasFlags() {
		fmt.Fprintf(w, "\nGlobal flags:\n%s", global.FlagUsagesWrapped(cols))
	}
}

func runServe(ctx context.Context, opts *apiserver.Options, streams Streams) error {
	begin := time.Now()
	if err := opts.Validate(); err != nil {
		return err
	}
	gc := planStartupGC(os.LookupEnv, embeddedDBBytes(opts), memoryCap())
	gc.apply()
	if gc.ours {
		klog.V(2).InfoS("GOGC is not set; the server collects garbage at the defaults of serve",
			"startupGCPercent", gc.percent, "startupHeap", gc.limit, "gcPercent", serveGCPercent)
	}
	for _, w := range opts.Security.Warnings() {
		fmt.Fprintf(streams.Err, "warning: %s\n", w)
	}
	// Before any etcd client exists: gRPC's logger is process-wide.
	quietGRPC.Do(func() { grpclog.SetLoggerV2(leveledGRPCLogger{}) })
	release, err := lockDataDir(opts.DataDir)
	if err != nil {
		return err
	}
	defer release()
	endpoints := opts.EtcdServers
	embedded := len(endpoints) == 0
	if embedded && (opts.EtcdCAFile != "" || opts.EtcdCertFile != "" || opts.EtcdKeyFile != "") {
		return errors.New("--etcd-cafile, --etcd-certfile and --etcd-keyfile need --etcd-servers (the embedded etcd uses the certificates in <data-dir>/etcd-pki)")
	}
	var inProcess *embedetcd.Server
	var warm *apiserver.WarmStart
	if embedded {
		// Read beside etcd's restore of its index, which keeps one core busy.
		warm = apiserver.LoadWarmStart(filepath.Join(opts.DataDir, warmStartDir))
		pki, err := embedetcd.EnsurePKI(filepath.Join(opts.DataDir, etcdPKIDir))
		if err != nil {
			return err
		}
		etcd, err := startEmbeddedEtcd(ctx, filepath.Join(opts.DataDir, embeddedEtcdDir), pki)
		if err != nil {
			return err
		}
		defer etcd.Close()
		gc.applyAfterRestore()
		inProcess = etcd
		endpoints = etcd.Endpoints()
		opts.EtcdCAFile, opts.EtcdCertFile, opts.EtcdKeyFile = pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile
	}
	cfg, err := opts.Config(endpoints)
	if isAddrInUse(err) {
		return fmt.Errorf("listen on %s: address already in use; stop what listens there, or pick another --secure-port (0 picks a free one)",
			net.JoinHostPort(opts.BindAddress, strconv.Itoa(opts.SecurePort)))
	}
	if err != nil {
		return fmt.Errorf("configure server: %w", err)
	}
	if inProcess != nil {
		// The server's own requests call the member in this process; the
		// endpoints are for everyone else.
		cfg.InProcessEtcd = inProcess
		cfg.WarmStart = warm
	}
	server, err := cfg.Complete().New(ctx)
	if err != nil {
		return fmt.Errorf("create server: %w", err)
	}
	fmt.Fprintf(streams.Out, "allocator API server listening on %s (etcd %v)\n", cfg.ServerURL, endpoints)
	fmt.Fprintf(streams.Out, "Use it with:\n  kubectl --kubeconfig %s get services -A\n", absPath(cfg.KubeconfigPath))
	if embedded {
		fmt.Fprintf(streams.Out, "The embedded etcd takes only its client certificate; repair and migrate reach it with:\n  %s\n",
			etcdFlags(endpoints, absPath(opts.EtcdCAFile), absPath(opts.EtcdCertFile), absPath(opts.EtcdKeyFile)))
		fmt.Fprintf(streams.Out, "or, on this machine, with:\n  --data-dir %s\n", absPath(opts.DataDir))
	}
	go releaseAfterStartup(ctx, server.Started(), gc, startupGCWindow)
	go logStartupOver(ctx, server.Started(), begin)
	if err := server.Run(ctx); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// isAddrInUse reports whether err is a listen on a taken address. Its text
// is matched too: k8s.io/apiserver's CreateListener formats the net error
// into its own (with %v), after which errors.Is no longer finds it, and the
// address appears three times over.
func isAddrInUse(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), syscall.EADDRINUSE.Error()))
}

// etcdPKIDir is where, inside the data dir, the embedded etcd's CA and
// certificates are kept.
const etcdPKIDir = "etcd-pki"

// embeddedEtcdDir is the embedded etcd's data dir, inside serve's.
const embeddedEtcdDir = "etcd"

// warmStartDir holds, inside serve's data dir, the informers' stores as the
// last clean shutdown left them (apiserver.WarmStart).
const warmStartDir = "warm-start"

// etcdFlags is the command-line fragment that reaches an etcd.
func etcdFlags(endpoints []string, caFile, certFile, keyFile string) string {
	return fmt.Sprintf("--etcd-servers %s --etcd-cafile %s --etcd-certfile %s --etcd-keyfile %s",
		strings.Join(endpoints, ","), caFile, certFile, keyFile)
}

// startEmbeddedEtcd starts etcd in dir, on the URLs of its previous run when
// they are still free.
func startEmbeddedEtcd(ctx context.Context, dir string, pki embedetcd.PKI) (*embedetcd.Server, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create etcd data dir: %w", err)
	}
	urlsPath := filepath.Join(filepath.Dir(dir), etcdURLsFile)
	var prev etcdURLs
	if data, err := os.ReadFile(urlsPath); err == nil {
		_ = json.Unmarshal(data, &prev)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", urlsPath, err)
	}
	// No bound on the wait but the server's own end: the member restores its
	// index of every stored key before it serves, in time that grows with
	// the keys, and a bound would turn a database past it into a server
	// that never starts. It is logged meanwhile (etcd's own logs are at
	// V(5)).
	cfg := embedetcd.Config{DataDir: dir, ClientURL: prev.ClientURL, PeerURL: prev.PeerURL, PKI: &pki, StartTimeout: -1,
		Logger: embedetcd.KlogLogger(klog.FromContext(ctx).WithName("etcd"))}
	begin := time.Now()
	stopWaiting := logWhileWaiting(ctx, "Embedded etcd not serving yet: it restores its index of every stored key first", "data-dir", dir)
	defer stopWaiting()
	etcd, err := embedetcd.Start(ctx, cfg)
	if isAddrInUse(err) && prev.ClientURL != "" {
		// The old ports are taken now; a single member can move.
		cfg.ClientURL, cfg.PeerURL = "", ""
		etcd, err = embedetcd.Start(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Embedded etcd serving", "took", time.Since(begin).Round(time.Millisecond), "data-dir", dir)
	got := etcd.Config()
	data, _ := json.Marshal(etcdURLs{ClientURL: got.ClientURL, PeerURL: got.PeerURL})
	if err := os.WriteFile(urlsPath, data, 0o600); err != nil {
		etcd.Close()
		return nil, fmt.Errorf("write %s: %w", urlsPath, err)
	}
	return etcd, nil
}

// logStartupOver logs, once started is closed, how long the start-up took
// from begin: the time an operator waits for /readyz after a restart. Its
// parts grow with the objects stored: the embedded etcd's restore (logged
// when it ends), the informers' lists, the repair's first pass.
func logStartupOver(ctx context.Context, started <-chan struct{}, begin time.Time) {
	select {
	case <-started:
		klog.FromContext(ctx).Info("Start-up over: bootstrap and the first repair pass done", "took", time.Since(begin).Round(time.Millisecond))
	case <-ctx.Done():
	}
}

// waitLogInterval is how often logWhileWaiting logs.
const waitLogInterval = 15 * time.Second

// logWhileWaiting logs msg, with how long it has waited, every
// waitLogInterval until the returned stop is called or ctx ends.
func logWhileWaiting(ctx context.Context, msg string, keysAndValues ...any) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		began := time.Now()
		tick := time.NewTicker(waitLogInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				klog.FromContext(ctx).Info(msg, append([]any{"waited", time.Since(began).Round(time.Second)}, keysAndValues...)...)
			}
		}
	}()
	return func() { cancel(); <-done }
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}
