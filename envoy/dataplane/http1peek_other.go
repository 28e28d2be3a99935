//go:build !unix || aix

package dataplane

import "net"

// sockPeek cannot look at the socket here (no MSG_DONTWAIT on AIX): an
// upstream's close of an idle connection shows as a reset of the request
// that reuses it.
type sockPeek struct{}

func newSockPeek(net.Conn) *sockPeek { return nil }

func (*sockPeek) open() bool { return true }
