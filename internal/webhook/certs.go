package webhook

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// certCheck is how often the serving certificate's files are looked at.
const certCheck = 10 * time.Second

// Certificate serves a certificate and key from files, read again when
// either changes: a rotated Secret, or cert-manager's renewal, is served
// within certCheck without a restart.
type Certificate struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate // guarded by mu
	stamp   string           // the files' sizes and modification times; guarded by mu
	checked time.Time        // guarded by mu
}

// LoadCertificate reads the pair once, so that a missing or bad one fails
// at start.
func LoadCertificate(certFile, keyFile string) (*Certificate, error) {
	c := &Certificate{certFile: certFile, keyFile: keyFile}
	if err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// GetCertificate is tls.Config's GetCertificate.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	due := time.Since(c.checked) >= certCheck
	c.mu.Unlock()
	if due {
		if err := c.reload(); err != nil {
			// Keep serving the last good pair while a rotation is half written.
			c.mu.Lock()
			c.checked = time.Now()
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cert, nil
}

// reload reads the pair when the files changed.
func (c *Certificate) reload() error {
	stamp, err := fileStamp(c.certFile, c.keyFile)
	if err != nil {
		return err
	}
	c.mu.Lock()
	same := stamp == c.stamp
	c.mu.Unlock()
	if same {
		c.mu.Lock()
		c.checked = time.Now()
		c.mu.Unlock()
		return nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("load the serving certificate %s and key %s: %w", c.certFile, c.keyFile, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cert, c.stamp, c.checked = &cert, stamp, time.Now()
	return nil
}

func fileStamp(files ...string) (string, error) {
	var s string
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("serving certificate: %w", err)
		}
		s += fmt.Sprintf("%s:%d:%d;", f, info.Size(), info.ModTime().UnixNano())
	}
	return s, nil
}
