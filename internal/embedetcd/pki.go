package embedetcd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// certValidity is how long the generated certificates are valid.
const certValidity = 10 * 365 * 24 * time.Hour

// PKI is the set of files that lets only its holders talk to an embedded
// member: a CA, a certificate the member serves (and uses towards its peers)
// for 127.0.0.1, ::1 and localhost, and a client certificate. The CA's
// private key is never written, so no one can issue more certificates; a
// PKI with a file missing is generated anew as a whole.
type PKI struct {
	Dir            string
	CAFile         string
	ServerCertFile string
	ServerKeyFile  string
	ClientCertFile string
	ClientKeyFile  string
}

// PKIIn names the files of a PKI kept in dir.
func PKIIn(dir string) PKI {
	return PKI{
		Dir:            dir,
		CAFile:         filepath.Join(dir, "ca.crt"),
		ServerCertFile: filepath.Join(dir, "server.crt"),
		ServerKeyFile:  filepath.Join(dir, "server.key"),
		ClientCertFile: filepath.Join(dir, "client.crt"),
		ClientKeyFile:  filepath.Join(dir, "client.key"),
	}
}

// EnsurePKI returns the PKI kept in dir, generating it when any file is
// missing. dir is created (or narrowed) to mode 0700 and every file is 0600.
func EnsurePKI(dir string) (PKI, error) {
	p := PKIIn(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, fmt.Errorf("etcd PKI: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return p, fmt.Errorf("etcd PKI: %w", err)
	}
	complete := true
	for _, f := range p.files() {
		if _, err := os.Stat(f); errors.Is(err, fs.ErrNotExist) {
			complete = false
		} else if err != nil {
			return p, fmt.Errorf("etcd PKI: %w", err)
		}
	}
	if complete {
		return p, nil
	}
	if err := p.generate(); err != nil {
		return p, fmt.Errorf("etcd PKI: generate in %s: %w", dir, err)
	}
	return p, nil
}

func (p PKI) files() []string {
	return []string{p.CAFile, p.ServerCertFile, p.ServerKeyFile, p.ClientCertFile, p.ClientKeyFile}
}

// ServerTLSInfo is what the member serves clients and peers with: its
// certificate, and the CA that client certificates must chain to.
func (p PKI) ServerTLSInfo() transport.TLSInfo {
	return transport.TLSInfo{
		CertFile: p.ServerCertFile, KeyFile: p.ServerKeyFile,
		TrustedCAFile: p.CAFile, ClientCertAuth: true,
	}
}

// ClientTLSInfo is what a client presents and trusts.
func (p PKI) ClientTLSInfo() transport.TLSInfo {
	return transport.TLSInfo{CertFile: p.ClientCertFile, KeyFile: p.ClientKeyFile, TrustedCAFile: p.CAFile}
}

// ClientConfig is a TLS client configuration for the member.
func (p PKI) ClientConfig() (*tls.Config, error) {
	info := p.ClientTLSInfo()
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd client TLS: %w", err)
	}
	return cfg, nil
}

func (p PKI) generate() error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "allocator embedded etcd CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := sign(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	issue := func(name string, usages []x509.ExtKeyUsage, withHosts bool) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			Subject:     pkix.Name{CommonName: name},
			NotBefore:   now.Add(-time.Hour),
			NotAfter:    now.Add(certValidity),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: usages,
		}
		if withHosts {
			tmpl.DNSNames = []string{"localhost"}
			tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		der, err := sign(tmpl, caCert, &key.PublicKey, caKey)
		return der, key, err
	}
	// The member presents its certificate to peers as a client, too.
	serverDER, serverKey, err := issue("allocator embedded etcd", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, true)
	if err != nil {
		return err
	}
	clientDER, clientKey, err := issue("allocator", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, false)
	if err != nil {
		return err
	}
	// Keys first and the CA last: a crash half-way leaves the CA missing,
	// so the next start generates everything again.
	for _, f := range []struct {
		path string
		der  []byte
		key  *ecdsa.PrivateKey
	}{
		{p.ServerKeyFile, nil, serverKey}, {p.ServerCertFile, serverDER, nil},
		{p.ClientKeyFile, nil, clientKey}, {p.ClientCertFile, clientDER, nil},
		{p.CAFile, caDER, nil},
	} {
		var block *pem.Block
		if f.key != nil {
			der, err := x509.MarshalECPrivateKey(f.key)
			if err != nil {
				return err
			}
			block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
		} else {
			block = &pem.Block{Type: "CERTIFICATE", Bytes: f.der}
		}
		if err := writeFile0600(f.path, pem.EncodeToMemory(block)); err != nil {
			return err
		}
	}
	return nil
}

func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	return x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
}

// writeFile0600 writes through a temporary file and a rename, so the file is
// never readable by others and never half-written.
func writeFile0600(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
