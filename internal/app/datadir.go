package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/allocator/allocator/internal/embedetcd"
)

// serveLockFile is the lock one `allocator serve` holds on its data dir; it
// contains the holder's pid.
const serveLockFile = "serve.lock"

// errDataDirInUse is returned when another process serves the data dir.
var errDataDirInUse = errors.New("data dir in use")

// lockDataDir creates dir (mode 0700, narrowed if it exists: it holds the
// admin token and etcd's client key) and takes an exclusive, non-blocking
// lock on dir/serve.lock, writing our pid into it. The lock is released when
// release is called or the process exits.
//
// Without it a second serve on the same dir printed nothing and waited
// forever on the embedded etcd's own file lock, deaf to SIGINT and SIGTERM.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, serveLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if data, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); perr == nil && pid > 0 {
					holder = fmt.Sprintf("another allocator serve (pid %d)", pid)
				}
			}
			return nil, fmt.Errorf("%w: --data-dir %s is used by %s; stop it or choose another --data-dir", errDataDirInUse, dir, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// useDataDir fills the etcd flags not given on the command line from
// --data-dir, as `allocator serve` left them there for its embedded etcd:
// the client URL in <data-dir>/allocator-urls.json (the one serve listens
// on now, rewritten at each start), the CA and client certificate in
// <data-dir>/etcd-pki. A flag given wins over what the data dir holds.
func (f *clusterFlags) useDataDir() error {
	if f.dataDir == "" {
		return nil
	}
	if len(f.etcdServers) == 0 {
		path := filepath.Join(f.dataDir, etcdURLsFile)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--data-dir %s: no embedded etcd recorded there (%s not found): give the --data-dir of an allocator serve "+
				"started without --etcd-servers, or --etcd-servers", f.dataDir, etcdURLsFile)
		}
		if err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		var urls etcdURLs
		if err := json.Unmarshal(data, &urls); err != nil || urls.ClientURL == "" {
			return fmt.Errorf("--data-dir: %s holds no client URL (%v)", path, err)
		}
		f.etcdServers = []string{urls.ClientURL}
	}
	pki := embedetcd.PKIIn(filepath.Join(f.dataDir, etcdPKIDir))
	for _, file := range []struct {
		flag *string
		path string
		name string
	}{
		{&f.etcdCAFile, pki.CAFile, "--etcd-cafile"},
		{&f.etcdCertFile, pki.ClientCertFile, "--etcd-certfile"},
		{&f.etcdKeyFile, pki.ClientKeyFile, "--etcd-keyfile"},
	} {
		if *file.flag != "" {
			continue
		}
		if _, err := os.Stat(file.path); err != nil {
			return fmt.Errorf("--data-dir %s: the embedded etcd's client certificate is not there (%w); give %s", f.dataDir, err, file.name)
		}
		*file.flag = file.path
	}
	return nil
}
