package gradshare

import (
	"net"
	"sync/atomic"
	"time"
)

// Meter is a dialer for nats.SetCustomDialer that counts every byte the
// connection's socket writes and reads: protocol frames, pings, the
// CONNECT and SUB lines, everything that goes on the wire above TCP.
// Reconnections add to the same counts.
type Meter struct {
	// Dialer dials; the zero value uses a net.Dialer with a 10 s timeout.
	Dialer  *net.Dialer
	written atomic.Int64
	read    atomic.Int64
}

// Dial implements nats.CustomDialer.
func (m *Meter) Dial(network, address string) (net.Conn, error) {
	d := m.Dialer
	if d == nil {
		d = &net.Dialer{Timeout: 10 * time.Second}
	}
	c, err := d.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &meteredConn{Conn: c, m: m}, nil
}

// Written returns the bytes written to the socket so far.
func (m *Meter) Written() int64 { return m.written.Load() }

// Read returns the bytes read from the socket so far.
func (m *Meter) Read() int64 { return m.read.Load() }

type meteredConn struct {
	net.Conn
	m *Meter
}

func (c *meteredConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.m.written.Add(int64(n))
	return n, err
}

func (c *meteredConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.m.read.Add(int64(n))
	return n, err
}
