package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdTLS are the files the server reaches etcd with (--etcd-cafile,
// --etcd-certfile, --etcd-keyfile, as kube-apiserver). All empty: plain http.
// `allocator serve` fills them with the embedded etcd's client certificate,
// which that etcd requires.
type EtcdTLS struct {
	CAFile   string
	CertFile string
	KeyFile  string
}

// Enabled reports whether any file is set.
func (t EtcdTLS) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// ClientConfig returns the TLS client configuration, or nil when disabled.
func (t EtcdTLS) ClientConfig() (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.CAFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	return cfg, nil
}

// etcdTLS returns the --etcd-cafile, --etcd-certfile and --etcd-keyfile files.
func (o *Options) etcdTLS() EtcdTLS {
	return EtcdTLS{CAFile: o.EtcdCAFile, CertFile: o.EtcdCertFile, KeyFile: o.EtcdKeyFile}
}

// validate checks the files: a certificate needs its key, the pair must
// match, and the CA file must hold a certificate. A wrong file was only
// found when the first etcd request failed, as a timeout.
func (t EtcdTLS) validate() []error {
	var errs []error
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		errs = append(errs, errors.New("--etcd-certfile and --etcd-keyfile must be given together"))
	case t.CertFile != "":
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			errs = append(errs, fmt.Errorf("--etcd-certfile %s, --etcd-keyfile %s: %w", t.CertFile, t.KeyFile, oneLine(err)))
		}
	}
	if err := checkCAFile("--etcd-cafile", t.CAFile); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// etcdProbeTimeout bounds the server's first etcd request at start.
const etcdProbeTimeout = 10 * time.Second

// probeEtcd makes one bounded read, so an etcd that is down, or that refuses
// our certificates, is one line at start. clientv3.New does not wait for a
// connection, and the first real request (joining the model transition)
// otherwise failed as a bare "context deadline exceeded". The read is of
// one key (the prefix itself, which holds nothing): a read of a range,
// even counting it only or limited to one key, walks etcd's index to the
// range's end, two million keys at a million Services.
func probeEtcd(ctx context.Context, client *clientv3.Client, endpoints []string, prefix string, secure bool) error {
	probeCtx, cancel := context.WithTimeout(ctx, etcdProbeTimeout)
	defer cancel()
	_, err := client.Get(probeCtx, prefix+"/")
	if err == nil {
		return nil
	}
	eps := strings.Join(endpoints, ",")
	if errors.Is(err, context.DeadlineExceeded) || probeCtx.Err() != nil {
		var hint string
		if secure {
			hint = "is it running, and do --etcd-cafile, --etcd-certfile and --etcd-keyfile match its certificates?"
		} else {
			hint = "is it running, and does it need TLS (--etcd-cafile, --etcd-certfile, --etcd-keyfile)?"
		}
		return fmt.Errorf("etcd %s did not answer within %v (%s)", eps, etcdProbeTimeout, hint)
	}
	return fmt.Errorf("etcd %s: %w", eps, oneLine(err))
}
