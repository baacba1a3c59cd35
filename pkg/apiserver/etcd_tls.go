package apiserver

import (
	"crypto/tls"
	"fmt"

	"go.etcd.io/etcd/client/pkg/v3/transport"
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
