package apiserver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	kubeconfigCluster = "allocator"
	kubeconfigUser    = "admin"
)

// ensureAdminKubeconfig returns the admin token, reusing the one in an
// existing kubeconfig at path (so a restart keeps working credentials), and
// (re)writes the kubeconfig with mode 0600 for serverURL, trusting the CA
// bundle in caFile.
func ensureAdminKubeconfig(path, serverURL, caFile string) (string, error) {
	var token string
	if existing, err := clientcmd.LoadFromFile(path); err == nil {
		if auth := existing.AuthInfos[kubeconfigUser]; auth != nil {
			token = auth.Token
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if token == "" {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return "", fmt.Errorf("generate admin token: %w", err)
		}
		token = hex.EncodeToString(raw)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return "", fmt.Errorf("read serving certificate: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[kubeconfigCluster] = &clientcmdapi.Cluster{Server: serverURL, CertificateAuthorityData: ca}
	cfg.AuthInfos[kubeconfigUser] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[kubeconfigCluster] = &clientcmdapi.Context{Cluster: kubeconfigCluster, AuthInfo: kubeconfigUser, Namespace: "default"}
	cfg.CurrentContext = kubeconfigCluster
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return "", fmt.Errorf("encode kubeconfig: %w", err)
	}
	// Write to a temporary file and rename, so a reader never sees half a
	// file and the mode is 0600 from the start.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return "", fmt.Errorf("chmod kubeconfig: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	return token, nil
}
