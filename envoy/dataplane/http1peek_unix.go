//go:build unix

package dataplane

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// connAlive reports whether an idle upstream connection can take a
// request: a non-blocking peek at its socket finds nothing to read. EOF
// means the upstream closed it; bytes mean an unsolicited response (or,
// under TLS, a record such as a close_notify alert), and either way the
// connection is not one to send a request on.
func connAlive(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		for {
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			// EAGAIN: nothing to read, the connection is open; 0 bytes
			// without an error: EOF; bytes: see above.
			alive = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
			_ = n
			return true // never wait for the socket to become readable
		}
	})
	return err == nil && alive
}
