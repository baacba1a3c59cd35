package e2e

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// controlPlaneNode is the filesystem of a kubeadm control-plane node, with
// what deploy/'s comments tell the operator to add, and the kubelet's part
// in starting a container of deploy/ on it: checking and creating hostPath
// volumes, writing Secret and service account volumes, and the container's
// root filesystem. Every path here is the node's or the container's
// absolute path, under host or a container root.
//
// Owners and modes are the ones the real writers use:
//   - kubeadm (certutil.WriteCert, keyutil.WriteKey, clientcmd.WriteToFile):
//     directories root 0755, certificates root 0644, keys and kubeconfigs
//     root 0600;
//   - the operator's files (cp from deploy/): root 0644, except a
//     kubeconfig, root 0600 as kubeadm writes its own;
//   - the kubelet: a DirectoryOrCreate hostPath it creates is root 0755; a
//     Secret volume is a directory of mode 0777 holding a timestamped
//     directory (0755) of files with the volume's defaultMode (0644 when
//     unset) and symlinks to them, all root-owned, and with an fsGroup the
//     kubelet (SetVolumeOwnership) gives every file and directory that
//     group and adds group read (0440) to files and group rwx and setgid to
//     directories.
type controlPlaneNode struct {
	host    string
	cluster *testCluster
	// secrets are the kube-system Secrets the operator created, by name.
	secrets map[string]map[string][]byte
}

// newControlPlaneNode lays out the node: kubeadm's PKI (the cluster CA,
// kube-apiserver's serving certificate and etcd client certificate, the
// etcd CA), and what deploy/'s comments ask for: the static pod's review
// kubeconfig and audit policy, and the Secret allocator-etcd-client made
// from kubeadm's files.
func newControlPlaneNode(t *testing.T, c *testCluster, deployDir string) *controlPlaneNode {
	t.Helper()
	n := &controlPlaneNode{host: t.TempDir(), cluster: c, secrets: map[string]map[string][]byte{}}
	read := func(path string) []byte {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	const pki = "/etc/kubernetes/pki"
	files := []struct {
		path string
		data []byte
		mode fs.FileMode
	}{
		{pki + "/ca.crt", read(c.ca.CertFile), 0o644},
		{pki + "/apiserver.crt", read(c.apiserver.CertFile), 0o644},
		{pki + "/apiserver.key", read(c.apiserver.KeyFile), 0o600},
		{pki + "/apiserver-etcd-client.crt", read(c.etcdPKI.ClientCertFile), 0o644},
		{pki + "/apiserver-etcd-client.key", read(c.etcdPKI.ClientKeyFile), 0o600},
		{pki + "/etcd/ca.crt", read(c.etcdPKI.CAFile), 0o644},
		// allocator-serve.yaml: the review identity of serve-rbac.yaml.
		{"/etc/kubernetes/allocator.conf", c.kubeconfig(t, "system:allocator"), 0o600},
		{"/etc/kubernetes/allocator-audit-policy.yaml", read(filepath.Join(deployDir, "examples", "audit-policy.yaml")), 0o644},
	}
	for _, f := range files {
		writeOwned(t, filepath.Join(n.host, f.path), f.data, f.mode, 0, 0)
	}
	// repair-cronjob.yaml: kubectl create secret generic allocator-etcd-client
	// of the etcd CA and a client certificate of it. With etcd's RBAC off, as
	// here, any client certificate of the CA serves; TestRepairJobsWithTheirEtcdRole
	// runs the Jobs with the dedicated one and its role.
	n.secrets["allocator-etcd-client"] = map[string][]byte{
		"ca.crt":  read(c.etcdPKI.CAFile),
		"tls.crt": read(c.etcdPKI.ClientCertFile),
		"tls.key": read(c.etcdPKI.ClientKeyFile),
	}
	return n
}

// containerRoot builds the root filesystem the container of p sees: the
// image (its /etc/passwd and /etc/group, /tmp, the home directories, the
// binary at the entrypoint), each volume at its mountPath as the kubelet
// prepares it, the service account token when the pod mounts one, and,
// with readOnlyRootFilesystem, every directory and file outside the
// volumes without write permission, so that even root without
// CAP_DAC_OVERRIDE cannot write there (a read-only mount refuses it).
func (n *controlPlaneNode) containerRoot(t *testing.T, p *manifestPod, bin string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	writeOwned(t, filepath.Join(root, "etc/passwd"), []byte(distrolessPasswd), 0o644, 0, 0)
	writeOwned(t, filepath.Join(root, "etc/group"), []byte(distrolessGroup), 0o644, 0, 0)
	mkdirOwned(t, filepath.Join(root, "tmp"), 0o1777, 0, 0)
	mkdirOwned(t, filepath.Join(root, "root"), 0o700, 0, 0)
	mkdirOwned(t, filepath.Join(root, "home/nonroot"), 0o700, 65532, 65532)
	entry := filepath.Join(root, p.image.entrypoint[0])
	mkdirOwned(t, filepath.Dir(entry), 0o755, 0, 0)
	if err := os.Link(bin, entry); err != nil {
		copyFile(t, bin, entry)
	}
	if err := os.Chmod(entry, 0o755); err != nil {
		t.Fatal(err)
	}

	var mounts []string
	for _, m := range p.container.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Fatalf("%s: volumeMount %s: subPath is not imitated here", p.file, m.Name)
		}
		i := slices.IndexFunc(p.spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("%s: volumeMount %s names no volume", p.file, m.Name)
		}
		v := p.spec.Volumes[i]
		dst := filepath.Join(root, m.MountPath)
		switch {
		case v.HostPath != nil:
			src := n.hostPath(t, p.file, v)
			copyTree(t, src, dst, m.ReadOnly)
		case v.Secret != nil:
			n.writeSecretVolume(t, p, v.Secret, dst)
		default:
			t.Fatalf("%s: volume %s: only hostPath and secret volumes are imitated here", p.file, v.Name)
		}
		mounts = append(mounts, m.MountPath)
	}
	if p.kind != "Pod" && ptrValue(p.spec.AutomountServiceAccountToken, true) {
		// A static pod gets no token (the kubelet cannot mint one for a
		// pod the API server does not know); the Jobs' pods do.
		const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"
		n.writeServiceAccountVolume(t, p, filepath.Join(root, saDir))
		mounts = append(mounts, saDir)
	}
	if sc := p.container.SecurityContext; sc != nil && ptrValue(sc.ReadOnlyRootFilesystem, false) {
		readOnlyOutside(t, root, mounts)
	}
	return root
}

// hostPath checks a hostPath volume's type on the node as the kubelet does
// before it starts the pod, creating a DirectoryOrCreate directory (root
// 0755), and returns the path on the node.
func (n *controlPlaneNode) hostPath(t *testing.T, file string, v corev1.Volume) string {
	t.Helper()
	path := filepath.Join(n.host, v.HostPath.Path)
	typ := ptrValue(v.HostPath.Type, corev1.HostPathUnset)
	info, err := os.Stat(path)
	switch {
	case typ == corev1.HostPathDirectoryOrCreate && errors.Is(err, fs.ErrNotExist):
		mkdirOwned(t, path, 0o755, 0, 0)
	case typ == corev1.HostPathDirectory && (err != nil || !info.IsDir()):
		t.Fatalf("%s: volume %s: hostPath type check failed: %s is not a directory on a kubeadm node (%v)", file, v.Name, v.HostPath.Path, err)
	case typ == corev1.HostPathFile && (err != nil || !info.Mode().IsRegular()):
		t.Fatalf("%s: volume %s: hostPath type check failed: %s is not a file on a kubeadm node (%v)", file, v.Name, v.HostPath.Path, err)
	case typ != corev1.HostPathDirectory && typ != corev1.HostPathFile && typ != corev1.HostPathDirectoryOrCreate:
		t.Fatalf("%s: volume %s: hostPath type %q is not imitated here", file, v.Name, typ)
	}
	return path
}

// writeSecretVolume writes the Secret as the kubelet's atomic writer does
// (see controlPlaneNode for the owners and modes).
func (n *controlPlaneNode) writeSecretVolume(t *testing.T, p *manifestPod, s *corev1.SecretVolumeSource, dir string) {
	t.Helper()
	data, ok := n.secrets[s.SecretName]
	if !ok {
		t.Fatalf("%s: Secret %s: the operator is never told to create it", p.file, s.SecretName)
	}
	if len(s.Items) > 0 {
		t.Fatalf("%s: Secret %s: items are not imitated here", p.file, s.SecretName)
	}
	n.writeAtomic(t, dir, data, fs.FileMode(ptrValue(s.DefaultMode, corev1.SecretVolumeSourceDefaultMode)), p.identity.fsGroup)
}

// writeServiceAccountVolume writes the projected service account volume
// (token, ca.crt, namespace; mode 0644) with a token the cluster accepts
// for the pod's ServiceAccount.
func (n *controlPlaneNode) writeServiceAccountVolume(t *testing.T, p *manifestPod, dir string) {
	t.Helper()
	ca, err := os.ReadFile(n.cluster.ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	user := serviceAccountUser(p.spec.ServiceAccountName)
	token, ok := n.cluster.tokens[user]
	if !ok {
		t.Fatalf("%s: the cluster has no token for %s", p.file, user)
	}
	n.writeAtomic(t, dir, map[string][]byte{"token": []byte(token), "ca.crt": ca, "namespace": []byte("kube-system")},
		fs.FileMode(corev1.ProjectedVolumeSourceDefaultMode), p.identity.fsGroup)
}

// serviceAccountUser is the user name of a kube-system ServiceAccount.
func serviceAccountUser(name string) string {
	if name == "" {
		name = "default"
	}
	return "system:serviceaccount:kube-system:" + name
}

// writeAtomic lays out a Secret-like volume as the kubelet does: dir
// (0777) holds ..<timestamp>/ (0755) with the files, ..data pointing at it
// and one symlink per key pointing into ..data; with fsGroup, the
// kubelet's SetVolumeOwnership for a read-only volume.
func (n *controlPlaneNode) writeAtomic(t *testing.T, dir string, data map[string][]byte, mode fs.FileMode, fsGroup *int64) {
	t.Helper()
	dirMode, tsMode, gid := fs.FileMode(0o777), fs.FileMode(0o755), 0
	if fsGroup != nil {
		gid = int(*fsGroup)
		mode |= 0o440
		dirMode |= 0o770 | fs.ModeSetgid
		tsMode |= 0o770 | fs.ModeSetgid
	}
	ts := time.Now().UTC().Format("..2006_01_02_15_04_05.000000000")
	mkdirOwned(t, dir, dirMode, 0, gid)
	mkdirOwned(t, filepath.Join(dir, ts), tsMode, 0, gid)
	for key, value := range data {
		writeOwned(t, filepath.Join(dir, ts, key), value, mode, 0, gid)
		symlinkOwned(t, filepath.Join("..data", key), filepath.Join(dir, key), gid)
	}
	symlinkOwned(t, ts, filepath.Join(dir, "..data"), gid)
}

// readOnlyOutside takes the write permission away from everything under
// root except the mount points' trees.
func readOnlyOutside(t *testing.T, root string, mounts []string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(path, root), "/")
		if slices.Contains(mounts, rel) {
			return fs.SkipDir
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(path, info.Mode()&^0o222)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// copyTree copies src (a file or a directory tree) to dst, keeping owners
// and modes, as a bind mount shows them; readOnly takes the write
// permission away, as a read-only mount refuses writes. Missing parents of
// dst are created root 0755, as the runtime creates mount points.
func copyTree(t *testing.T, src, dst string, readOnly bool) {
	t.Helper()
	mkdirOwned(t, filepath.Dir(dst), 0o755, 0, 0)
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, strings.TrimPrefix(path, src))
		mode := info.Mode()
		if readOnly {
			mode &^= 0o222
		}
		uid, gid := fileOwner(info)
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		case mode.IsRegular():
			copyFile(t, path, target)
		default:
			return errors.New(path + ": only directories and regular files are copied")
		}
		if err := os.Lchown(target, uid, gid); err != nil {
			return err
		}
		return os.Chmod(target, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeOwned writes a file with exactly mode, uid and gid (no umask),
// creating missing parents root 0755.
func writeOwned(t *testing.T, path string, data []byte, mode fs.FileMode, uid, gid int) {
	t.Helper()
	mkdirOwned(t, filepath.Dir(path), 0o755, 0, 0)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	setOwner(t, path, mode, uid, gid)
}

// mkdirOwned creates path with exactly mode, uid and gid; missing parents
// are created root 0755. An existing directory is left as it is.
func mkdirOwned(t *testing.T, path string, mode fs.FileMode, uid, gid int) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	mkdirOwned(t, filepath.Dir(path), 0o755, 0, 0)
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	setOwner(t, path, mode, uid, gid)
}

func symlinkOwned(t *testing.T, target, path string, gid int) {
	t.Helper()
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, 0, gid); err != nil {
		t.Fatal(err)
	}
}

func setOwner(t *testing.T, path string, mode fs.FileMode, uid, gid int) {
	t.Helper()
	if err := os.Lchown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	// After chown, which clears setuid and setgid bits.
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}
