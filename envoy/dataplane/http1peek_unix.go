//go:build unix && !aix

package dataplane

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// sockPeek looks at an idle upstream connection's socket without reading
// from it. It is made once per connection, so a check allocates nothing.
type sockPeek struct {
	rc    syscall.RawConn
	peek  func(fd uintptr) bool // the method value of check, made once
	alive bool
	buf   [1]byte
}

func newSockPeek(c net.Conn) *sockPeek {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	p := &sockPeek{rc: rc}
	p.peek = p.check
	return p
}

// open reports whether an idle connection can take a request: a
// non-blocking peek finds nothing to read. EOF means the upstream closed
// it; bytes mean an unsolicited response (or, under TLS, a record such as
// a close_notify alert), and either way the connection is not one to send
// a request on. A nil sockPeek (no socket to look at) says yes.
func (p *sockPeek) open() bool {
	if p == nil {
		return true
	}
	p.alive = false
	if err := p.rc.Read(p.peek); err != nil {
		return false
	}
	return p.alive
}

func (p *sockPeek) check(fd uintptr) bool {
	for {
		_, _, err := syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		// EAGAIN: nothing to read, the connection is open. No error:
		// EOF (0 bytes) or data.
		p.alive = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true // never wait for the socket to become readable
	}
}
