package warmstart

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
)

// magic opens every File; formatVersion is the layout after it. A reader
// refuses any other version: a File is only a shortcut, and the list it
// saves is always there to fall back on.
const (
	magic         = "allocator warm start\n"
	formatVersion = 1
)

// maxObjectBytes bounds one object's length as read back: far above
// anything etcd stores (its requests are at most 1.5 MiB by default), so
// that a corrupt length fails at once instead of allocating it.
const maxObjectBytes = 64 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is returned for a File that is cut short, damaged or of
// another format.
var ErrCorrupt = errors.New("warm-start file is corrupt")

// Header is what a File says about its objects.
type Header struct {
	Token Token
	// ResourceVersion is the version the store was at: every object is as
	// etcd held it at that revision, and the informer watches on from it.
	ResourceVersion string
	// Count is the number of objects.
	Count int
}

// Marshaler is an object a File holds: the generated protobuf methods of
// the Kubernetes API types.
type Marshaler interface {
	Size() int
	MarshalToSizedBuffer(dAtA []byte) (int, error)
}

// Write writes a File at path holding objects (each a Marshaler): to a
// temporary file beside it, synced, then renamed over path, so that path
// is either a whole File or what it was before.
func Write(path string, h Header, objects []any) (err error) {
	h.Count = len(objects)
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+"."+partialPattern)
	if err != nil {
		return fmt.Errorf("warm-start file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	crc := crc32.New(castagnoli)
	w := bufio.NewWriterSize(io.MultiWriter(f, crc), 1<<20)
	if err := writeHeader(w, h); err != nil {
		return err
	}
	var buf []byte
	for i, obj := range objects {
		m, ok := obj.(Marshaler)
		if !ok {
			return fmt.Errorf("warm-start file: object %d is a %T, which has no protobuf encoding", i, obj)
		}
		if buf, err = appendObject(w, buf, m); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("warm-start file: %w", err)
	}
	if _, err := f.Write(crc.Sum(nil)); err != nil {
		return fmt.Errorf("warm-start file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("warm-start file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("warm-start file: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("warm-start file: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

// partialPattern matches the temporary files Write leaves behind when it
// is killed before its rename.
const partialPattern = "*.tmp"

// RemovePartial removes from dir the files a killed Write left behind:
// each is as large as the File it was to be.
func RemovePartial(dir string) {
	names, _ := filepath.Glob(filepath.Join(dir, partialPattern))
	for _, name := range names {
		os.Remove(name)
	}
}

// writeHeader writes the magic, the version and h.
func writeHeader(w *bufio.Writer, h Header) error {
	var b []byte
	b = append(b, magic...)
	b = binary.AppendUvarint(b, formatVersion)
	b = appendString(b, h.Token.ID)
	b = binary.AppendVarint(b, h.Token.Revision)
	b = appendString(b, h.ResourceVersion)
	b = binary.AppendUvarint(b, uint64(h.Count))
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("warm-start file: %w", err)
	}
	return nil
}

// appendObject writes m's length and encoding, encoded in buf (grown as
// needed and returned for the next).
func appendObject(w *bufio.Writer, buf []byte, m Marshaler) ([]byte, error) {
	n := m.Size()
	if cap(buf) < n {
		buf = make([]byte, n, max(n, 2*cap(buf)))
	}
	buf = buf[:n]
	if _, err := m.MarshalToSizedBuffer(buf); err != nil {
		return buf, fmt.Errorf("warm-start file: encode: %w", err)
	}
	var l [binary.MaxVarintLen64]byte
	if _, err := w.Write(l[:binary.PutUvarint(l[:], uint64(n))]); err != nil {
		return buf, fmt.Errorf("warm-start file: %w", err)
	}
	if _, err := w.Write(buf); err != nil {
		return buf, fmt.Errorf("warm-start file: %w", err)
	}
	return buf, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("warm-start file: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("warm-start file: sync %s: %w", dir, err)
	}
	return nil
}

// Reader reads a File once.
type Reader struct {
	f      *os.File
	r      *summingReader
	header Header
}

// summingReader is a buffered reader that sums what it hands out (not what
// it has read ahead, which takes in the checksum itself).
type summingReader struct {
	r   *bufio.Reader
	crc hash.Hash32
}

func (s *summingReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.crc.Write(p[:n])
	return n, err
}

func (s *summingReader) ReadByte() (byte, error) {
	b, err := s.r.ReadByte()
	if err == nil {
		s.crc.Write([]byte{b})
	}
	return b, err
}

// Open opens the File at path, reads its header and removes it: a File is
// read at most once. It returns an error wrapping os.ErrNotExist when
// there is none, and one wrapping ErrCorrupt when its header is not one.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("warm-start file: %w", err)
	}
	// Removed now, read through the open file: if this start dies, the
	// next finds no File to read again.
	if err := os.Remove(path); err != nil {
		f.Close()
		return nil, fmt.Errorf("warm-start file: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("warm-start file: %w", err)
	}
	r := &Reader{f: f, r: &summingReader{r: bufio.NewReaderSize(f, 1<<20), crc: crc32.New(castagnoli)}}
	if err := r.readHeader(info.Size()); err != nil {
		f.Close()
		return nil, err
	}
	return r, nil
}

// Header returns what the File says about its objects. Its Count is at
// most the file's size in bytes.
func (r *Reader) Header() Header { return r.header }

// readHeader reads the header of a File of size bytes.
func (r *Reader) readHeader(size int64) error {
	m := make([]byte, len(magic))
	if _, err := io.ReadFull(r.r, m); err != nil || string(m) != magic {
		return fmt.Errorf("%w: not a warm-start file", ErrCorrupt)
	}
	v, err := binary.ReadUvarint(r.r)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if v != formatVersion {
		return fmt.Errorf("%w: format %d, not %d", ErrCorrupt, v, formatVersion)
	}
	h := &r.header
	if h.Token.ID, err = r.readString(); err != nil {
		return err
	}
	if h.Token.Revision, err = binary.ReadVarint(r.r); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if h.ResourceVersion, err = r.readString(); err != nil {
		return err
	}
	// Each object takes a byte at least (its length), so a count past the
	// file's size is corrupt: a reader may size its slice by it.
	n, err := binary.ReadUvarint(r.r)
	if err != nil || n > uint64(size) {
		return fmt.Errorf("%w: object count", ErrCorrupt)
	}
	h.Count = int(n)
	return nil
}

func (r *Reader) readString() (string, error) {
	n, err := binary.ReadUvarint(r.r)
	if err != nil || n > 1<<10 {
		return "", fmt.Errorf("%w: header", ErrCorrupt)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.r, b); err != nil {
		return "", fmt.Errorf("%w: header", ErrCorrupt)
	}
	return string(b), nil
}

// Each calls fn with each object's bytes, which are fn's only until it
// returns, then checks the File's CRC and closes it. Whatever fn built is
// to be used only when Each returns nil: a damaged File is found only at
// its end.
func (r *Reader) Each(fn func([]byte) error) error {
	defer r.f.Close()
	var buf []byte
	for i := 0; i < r.header.Count; i++ {
		n, err := binary.ReadUvarint(r.r)
		if err != nil || n > maxObjectBytes {
			return fmt.Errorf("%w: object %d of %d: length", ErrCorrupt, i, r.header.Count)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n, max(n, 2*uint64(cap(buf))))
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r.r, buf); err != nil {
			return fmt.Errorf("%w: object %d of %d: %v", ErrCorrupt, i, r.header.Count, err)
		}
		if err := fn(buf); err != nil {
			return fmt.Errorf("warm-start file: object %d of %d: %w", i, r.header.Count, err)
		}
	}
	want := r.r.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(r.r.r, sum[:]); err != nil {
		return fmt.Errorf("%w: no checksum: %v", ErrCorrupt, err)
	}
	if binary.BigEndian.Uint32(sum[:]) != want {
		return fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	if _, err := r.r.r.ReadByte(); err != io.EOF {
		return fmt.Errorf("%w: bytes after the checksum", ErrCorrupt)
	}
	return nil
}

// Close closes a File that Each did not read.
func (r *Reader) Close() error { return r.f.Close() }
