package bench

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a user-space TCP proxy that adds a fixed one-way delay, to
// replay wide-area round trips on loopback (the kernel's netem is not
// always available). It listens on 127.0.0.1 and forwards every
// connection to one target. Each direction of a connection is a delay
// line: bytes are read as they come, and each chunk read is written out
// Delay after it was read, in order; a half-close (FIN) travels the same
// way. A connection reset or a failed write closes both sides.
//
// Buffering is bounded: at most proxyChunks chunks of at most
// proxyChunkSize bytes wait in each direction of a connection; beyond
// that the proxy stops reading, and TCP flow control pushes back on the
// sender. That bounds one connection's throughput to about
// proxyChunks×proxyChunkSize per Delay (2 MiB per 50 ms: 40 MiB/s), far
// above what the agents and etcd clients send.
//
// The delay applies to data, not to the TCP handshake: connecting costs no
// round trip. Flotilla's connections (gRPC streams to the leader, etcd
// clients) are long-lived, so that does not change what is measured.
type Proxy struct {
	ln     net.Listener
	target string
	delay  time.Duration

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

const (
	proxyChunkSize = 16 << 10
	proxyChunks    = 128
)

// NewProxy starts a proxy on a free port of 127.0.0.1 forwarding to target
// (host:port) with delay added in each direction.
func NewProxy(target string, delay time.Duration) (*Proxy, error) {
	if delay < 0 {
		return nil, errors.New("proxy: negative delay")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track registers c for Close; it returns false when the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		client.Close()
		return
	}
	defer p.untrack(client)
	defer client.Close()
	upstream, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		return
	}
	if !p.track(upstream) {
		upstream.Close()
		return
	}
	defer p.untrack(upstream)
	defer upstream.Close()
	abort := func() { client.Close(); upstream.Close() }
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); delayLine(upstream, client, p.delay, abort) }()
	go func() { defer wg.Done(); delayLine(client, upstream, p.delay, abort) }()
	wg.Wait()
}

// chunk is bytes read at one time, or (with b nil) the end of the stream:
// eof for a clean end (FIN), otherwise a broken one.
type chunk struct {
	due time.Time
	b   []byte
	end bool
	eof bool
}

// delayLine copies src to dst, delivering each chunk delay after it was
// read. At a clean end of src it half-closes dst; on any error it calls
// abort, which closes both connections.
func delayLine(dst, src net.Conn, delay time.Duration, abort func()) {
	q := make(chan chunk, proxyChunks)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if c.end {
				if !c.eof {
					abort()
					return
				}
				if hc, ok := dst.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
					return
				}
				abort()
				return
			}
			if _, err := dst.Write(c.b); err != nil {
				abort()
				// Drain so the reader never blocks on a full queue.
				for range q {
				}
				return
			}
		}
	}()
	buf := make([]byte, proxyChunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{due: time.Now().Add(delay), b: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			q <- chunk{due: time.Now().Add(delay), end: true, eof: errors.Is(err, io.EOF)}
			close(q)
			break
		}
	}
	<-done
}
