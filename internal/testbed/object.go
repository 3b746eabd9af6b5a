package testbed

import (
	"crypto/sha256"
	"errors"
	"io"
)

// ObjectByte is byte off of every served object: a pattern that repeats
// only every 251·256 bytes, so a misplaced range shows in a checksum.
func ObjectByte(off int64) byte {
	return byte(off%251) ^ byte(off/251)
}

// Object is the content of a served object of a size: an io.ReadSeeker
// that makes its bytes on the fly.
type Object struct {
	size, off int64
}

// NewObject returns an object of size bytes.
func NewObject(size int64) *Object { return &Object{size: size} }

// Read reads the next bytes of the object.
func (o *Object) Read(p []byte) (int, error) {
	if o.off >= o.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), o.size-o.off))
	for i := range n {
		p[i] = ObjectByte(o.off + int64(i))
	}
	o.off += int64(n)
	return n, nil
}

// Seek moves the read offset.
func (o *Object) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += o.off
	case io.SeekEnd:
		offset += o.size
	}
	if offset < 0 {
		return 0, errors.New("testbed: seek before the start")
	}
	o.off = offset
	return offset, nil
}

// ObjectSum is the SHA-256 of a served object of size bytes, to check a
// download against.
func ObjectSum(size int64) [32]byte {
	h := sha256.New()
	_, _ = io.Copy(h, NewObject(size))
	return [32]byte(h.Sum(nil))
}
