package embedetcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Cluster states for Config.InitialClusterState.
const (
	ClusterStateNew      = embed.ClusterStateFlagNew
	ClusterStateExisting = embed.ClusterStateFlagExisting
)

// DefaultStartTimeout bounds Start when the context has no deadline and
// Config.StartTimeout is 0.
const DefaultStartTimeout = time.Minute

// maxPortAttempts bounds how often Start re-picks ports after a bind conflict.
const maxPortAttempts = 5

// DefaultQuotaBackendBytes is the database size at which a member started
// with Config.QuotaBackendBytes 0 raises the NOSPACE alarm: 8 GiB, the
// largest quota etcd suggests. The database file of `allocator serve`
// holds two keys per Service (the Service, its IPAddress) with their
// history until a compaction, so etcd's own default of 2 GiB would refuse
// writes short of a million Services (docs/performance.md).
// The quota bounds the file; it reserves neither disk nor memory (bbolt
// maps the file as it grows).
const DefaultQuotaBackendBytes int64 = 8 << 30

// Config describes one etcd member.
type Config struct {
	// Name of the member; default "default". Must be unique in a cluster.
	Name string
	// DataDir holds the member's WAL and database. Required.
	DataDir string
	// ClientURL is where clients connect, e.g. "http://127.0.0.1:2379".
	// Empty or port 0: a free port on 127.0.0.1 is picked.
	ClientURL string
	// PeerURL is where other members connect. Empty or port 0: a free port
	// on 127.0.0.1 is picked.
	PeerURL string
	// InitialCluster lists every member as "name=peerURL,name=peerURL".
	// Empty: a single-member cluster made of this member.
	InitialCluster string
	// InitialClusterState is ClusterStateNew (default) or ClusterStateExisting.
	// It only matters on a fresh data directory.
	InitialClusterState string
	// InitialClusterToken keeps distinct clusters from talking to each other;
	// default "allocator-embedded".
	InitialClusterToken string
	// Logger receives etcd's logs; nil means no logging at all.
	Logger *zap.Logger
	// UnsafeNoFsync skips fsync: much faster, loses data on a machine crash.
	// For tests only.
	UnsafeNoFsync bool
	// QuotaBackendBytes is the database size at which the member raises the
	// NOSPACE alarm and refuses writes; 0 means DefaultQuotaBackendBytes,
	// a negative value no quota. Tests set a small one to run out of space.
	QuotaBackendBytes int64
	// PKI, when set, makes the member serve clients and peers over TLS and
	// require a client certificate signed by PKI's CA (see EnsurePKI); the
	// URLs are then https. Nil: plain http, open to every local process.
	PKI *PKI
	// StartTimeout bounds how long Start waits for the member to become
	// ready when its context has no deadline: 0 is DefaultStartTimeout, a
	// negative value no bound (the context alone ends the wait). A member
	// restores its index of every stored key before it is ready, in time
	// that grows with the keys and the machine, with nothing to show in
	// between: a bound fails a start that would have succeeded.
	StartTimeout time.Duration
}

// Server is a running etcd member.
type Server struct {
	cfg    Config
	etcd   *embed.Etcd
	counts *rangeCounts // the in-process clients' counted pages (rangecount.go)

	closeOnce sync.Once
}

// Start starts an etcd member and waits until it is ready to serve. If ctx has
// no deadline, cfg.StartTimeout applies. On error nothing is left running.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	ctx, cancel := boundStart(ctx, cfg.StartTimeout)
	defer cancel()
	if cfg.DataDir == "" {
		return nil, errors.New("start embedded etcd: DataDir is required")
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.InitialClusterState == "" {
		cfg.InitialClusterState = ClusterStateNew
	}
	if cfg.InitialClusterToken == "" {
		cfg.InitialClusterToken = "allocator-embedded"
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.QuotaBackendBytes == 0 {
		cfg.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	for attempt := 1; ; attempt++ {
		resolved, picked, err := resolveURLs(cfg)
		if err != nil {
			return nil, fmt.Errorf("start embedded etcd %q: %w", cfg.Name, err)
		}
		s, err := start(ctx, resolved)
		if err == nil {
			return s, nil
		}
		if picked && isAddrInUse(err) && attempt < maxPortAttempts && ctx.Err() == nil {
			continue
		}
		return nil, fmt.Errorf("start embedded etcd %q in %s: %w", cfg.Name, cfg.DataDir, err)
	}
}

// boundStart returns ctx bounded by timeout when it has no deadline of its
// own (Config.StartTimeout: 0 is DefaultStartTimeout, negative no bound).
func boundStart(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || timeout < 0 {
		return context.WithCancel(ctx)
	}
	if timeout == 0 {
		timeout = DefaultStartTimeout
	}
	return context.WithTimeout(ctx, timeout)
}

// walFilesKept is how many WAL files (64 MB each) the member keeps, etcd's
// default being 5. A start decodes every WAL file kept, to find the
// snapshots the log knows of, and needs only the entries after the last
// snapshot (at most etcd's snapshot count, 10,000 entries, a fraction of
// one file); the files before it serve no single member. etcd removes a
// file only once no entry in it is needed (the file is unlocked).
const walFilesKept = 2

func start(ctx context.Context, cfg Config) (*Server, error) {
	ecfg := embed.NewConfig()
	ecfg.Name = cfg.Name
	ecfg.Dir = cfg.DataDir
	cu, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("client URL: %w", err)
	}
	pu, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("peer URL: %w", err)
	}
	ecfg.ListenClientUrls = []url.URL{*cu}
	ecfg.AdvertiseClientUrls = []url.URL{*cu}
	// etcd's HTTP endpoints (/health, /metrics, /version) on a port of their
	// own, picked by the kernel: the client URL then serves gRPC alone, on
	// gRPC's own transport. Shared with HTTP, every gRPC call of a TLS
	// client goes through net/http's HTTP/2 server and gRPC's ServeHTTP
	// adapter, a goroutine and a copy per call (etcd warns about it at
	// start: "not recommended for production").
	ecfg.ListenClientHttpUrls = []url.URL{{Scheme: cu.Scheme, Host: net.JoinHostPort(cu.Hostname(), "0")}}
	ecfg.ListenPeerUrls = []url.URL{*pu}
	ecfg.AdvertisePeerUrls = []url.URL{*pu}
	ecfg.InitialCluster = cfg.InitialCluster
	ecfg.ClusterState = cfg.InitialClusterState
	ecfg.InitialClusterToken = cfg.InitialClusterToken
	ecfg.UnsafeNoFsync = cfg.UnsafeNoFsync
	ecfg.QuotaBackendBytes = cfg.QuotaBackendBytes
	ecfg.MaxWalFiles = walFilesKept
	if cfg.PKI != nil {
		ecfg.ClientTLSInfo = cfg.PKI.ServerTLSInfo()
		ecfg.PeerTLSInfo = cfg.PKI.ServerTLSInfo()
	}
	ecfg.Logger = "zap"
	ecfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(cfg.Logger)

	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return &Server{cfg: cfg, etcd: e, counts: newRangeCounts()}, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed before becoming ready: %w", err)
	case <-e.Server.StopNotify():
		e.Close()
		return nil, errors.New("etcd stopped before becoming ready")
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("wait for etcd to become ready: %w", ctx.Err())
	}
}

// Endpoints returns the client URLs, for clientv3.Config.Endpoints.
func (s *Server) Endpoints() []string { return []string{s.cfg.ClientURL} }

// ClientTLS returns the TLS configuration clients need (the client
// certificate and the CA), or nil when the member serves plain http.
func (s *Server) ClientTLS() (*tls.Config, error) {
	if s.cfg.PKI == nil {
		return nil, nil
	}
	return s.cfg.PKI.ClientConfig()
}

// InProcessClient returns a client that calls the member's v3 API in this
// process: no gRPC, TLS or socket between them, and no protobuf copy of
// each request and response. Requests take the same path inside etcd as
// over gRPC (quotas, linearizable reads, watches, leases); what is skipped
// is only the transport and gRPC's interceptors, none of which this
// single-member etcd needs. Responses and watch events may share their
// byte slices with etcd and with other watchers: callers must not modify
// them (k8s.io/apiserver's storage and our stores only read them).
//
// Two differences from a gRPC client, both in its key-value calls:
//   - A write (Put, Delete, Txn) is not cut short by its context: it is
//     answered with what etcd made of it, within etcd's own request timeout.
//     etcd proposes a write to raft even for a context already ended and,
//     when the context ends first, answers with the context's error while
//     the write still lands. Over gRPC a cancelled call mostly fails before
//     it is sent; in process every write of a cancelled request (a client
//     that went away mid-create) would be such an ambiguous write, and a
//     read-back right after it can miss it (pkg/servicealloc/settle.go):
//     a Service stored without its address (TestClientDisconnectsMidAllocation).
//   - After the client's Close, a request fails, as over gRPC (v3client's
//     own calls would still reach etcd: they take only the caller's
//     context). Close also ends its watches.
//
// The client works while the member runs; its caller closes it, before
// Close. Each call returns a new client.
func (s *Server) InProcessClient() *clientv3.Client {
	c := v3client.New(s.etcd.Server)
	server := v3rpc.NewQuotaKVServer(s.etcd.Server)
	kv := inProcessKV{KVClient: adapter.KvServerToKvClient(server), server: server, member: s.etcd.Server, counts: s.counts, closed: c.Ctx()}
	c.KV = clientv3.NewKVFromKVClient(kv, c)
	return c
}

// inProcessKV is the key-value API of an in-process client: writes detached
// from their context's end, streaming ranges (RangeStream) whose pages are
// counted once (rangecount.go), every call refused once closed ends (the
// client's Close).
type inProcessKV struct {
	etcdserverpb.KVClient
	server etcdserverpb.KVServer
	member *etcdserver.EtcdServer
	counts *rangeCounts
	closed context.Context
}

func (k inProcessKV) Range(ctx context.Context, in *etcdserverpb.RangeRequest, opts ...grpc.CallOption) (*etcdserverpb.RangeResponse, error) {
	if err := k.refuse(); err != nil {
		return nil, err
	}
	return k.KVClient.Range(ctx, in, opts...)
}

func (k inProcessKV) Put(ctx context.Context, in *etcdserverpb.PutRequest, opts ...grpc.CallOption) (*etcdserverpb.PutResponse, error) {
	if err := k.refuse(); err != nil {
		return nil, err
	}
	return k.KVClient.Put(context.WithoutCancel(ctx), in, opts...)
}

func (k inProcessKV) DeleteRange(ctx context.Context, in *etcdserverpb.DeleteRangeRequest, opts ...grpc.CallOption) (*etcdserverpb.DeleteRangeResponse, error) {
	if err := k.refuse(); err != nil {
		return nil, err
	}
	return k.KVClient.DeleteRange(context.WithoutCancel(ctx), in, opts...)
}

func (k inProcessKV) Txn(ctx context.Context, in *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	if err := k.refuse(); err != nil {
		return nil, err
	}
	return k.KVClient.Txn(context.WithoutCancel(ctx), in, opts...)
}

func (k inProcessKV) Compact(ctx context.Context, in *etcdserverpb.CompactionRequest, opts ...grpc.CallOption) (*etcdserverpb.CompactionResponse, error) {
	if err := k.refuse(); err != nil {
		return nil, err
	}
	return k.KVClient.Compact(ctx, in, opts...)
}

// refuse is what a call gets once the client is closed: the error a gRPC
// client answers then.
func (k inProcessKV) refuse() error {
	if k.closed.Err() != nil {
		return errClientClosed
	}
	return nil
}

// errNotAStream is what the in-process RangeStream answers to the stream
// methods nobody calls on a server-streaming RPC.
var errNotAStream = status.Error(codes.Unimplemented, "not supported by the in-process RangeStream")

// errClientClosed is what a gRPC client answers once closed.
var errClientClosed = status.Error(codes.Canceled, "grpc: the client connection is closing")

// Config returns the member's configuration with every URL resolved to a
// concrete port. Starting it again on the same data directory restarts the
// same member on the same addresses.
func (s *Server) Config() Config { return s.cfg }

// Err reports fatal errors of the running member (for example a listener
// failing). It is closed when the member has stopped.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the member and waits until it has stopped. It is safe to call
// more than once and from several goroutines.
func (s *Server) Close() {
	s.closeOnce.Do(s.etcd.Close)
}

// resolveURLs fills in defaults and free ports. picked reports whether any
// port was chosen here (so a bind conflict is worth a retry).
func resolveURLs(cfg Config) (Config, bool, error) {
	var picked, p bool
	var err error
	secure := cfg.PKI != nil
	if cfg.ClientURL, p, err = resolveURL(cfg.ClientURL, secure); err != nil {
		return cfg, false, fmt.Errorf("client URL: %w", err)
	}
	picked = picked || p
	if cfg.PeerURL, p, err = resolveURL(cfg.PeerURL, secure); err != nil {
		return cfg, false, fmt.Errorf("peer URL: %w", err)
	}
	picked = picked || p
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.Name + "=" + cfg.PeerURL
	}
	return cfg, picked, nil
}

// resolveURL checks raw and picks a free port for port 0. With secure, the
// result is https (an http URL, e.g. remembered from a run before TLS, is
// moved to https on the same address); without, only http is accepted.
func resolveURL(raw string, secure bool) (string, bool, error) {
	scheme := "http"
	if secure {
		scheme = "https"
	}
	if raw == "" {
		raw = scheme + "://127.0.0.1:0"
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", false, fmt.Errorf("parse %q: %w", raw, err)
	}
	switch {
	case u.Scheme == "https" && !secure:
		return "", false, fmt.Errorf("%q: https needs Config.PKI", raw)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("%q: only http and https are supported, got scheme %q", raw, u.Scheme)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
		return "", false, fmt.Errorf("%q: want scheme://host:port only", raw)
	}
	host, port := u.Hostname(), u.Port()
	addr, err := netip.ParseAddr(host)
	if err != nil || !addr.IsLoopback() || addr.Zone() != "" {
		return "", false, fmt.Errorf("%q: host must be a loopback IP address (the embedded etcd is for this host only)", raw)
	}
	if port != "" && port != "0" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return "", false, fmt.Errorf("%q: bad port %q", raw, port)
		}
		return scheme + "://" + net.JoinHostPort(host, port), false, nil
	}
	free, err := FreePort(addr)
	if err != nil {
		return "", false, err
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(free)), true, nil
}

// FreePort returns a TCP port on the given loopback address that was free a
// moment ago. Another process may take it before the caller binds it.
func FreePort(addr netip.Addr) (int, error) {
	if !addr.IsLoopback() {
		return 0, fmt.Errorf("pick free port: %s is not a loopback address", addr)
	}
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return 0, fmt.Errorf("pick free port on %s: %w", addr, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("pick free port on %s: %w", addr, err)
	}
	return port, nil
}

// LoopbackURL returns "http://127.0.0.1:<port>" for a port that was free a
// moment ago; use it to lay out a multi-member cluster before starting it.
func LoopbackURL() (string, error) {
	port, err := FreePort(netip.AddrFrom4([4]byte{127, 0, 0, 1}))
	if err != nil {
		return "", err
	}
	return "http://127.0.0.1:" + strconv.Itoa(port), nil
}

func isAddrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}
