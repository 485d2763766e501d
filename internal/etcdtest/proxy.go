package etcdtest

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Proxy is a TCP proxy in front of an etcd server that a test can cut, to
// make etcd unreachable for the clients behind it as a frozen (SIGSTOPped)
// etcd or a dropped network would: while cut, connections stay open and
// new ones are accepted, but no byte passes in either direction, so
// requests hang until their deadlines. Restore lets what waited through.
// etcd itself keeps running meanwhile: leases of clients behind the proxy
// expire on time. Delay makes every byte take longer each way instead, as
// a far etcd or a client whose goroutines wait for a CPU would see.
type Proxy struct {
	// Endpoint is the proxy's client URL.
	Endpoint string

	ln     net.Listener
	target string
	mu     sync.Mutex
	open   chan struct{} // closed while traffic passes
	conns  map[net.Conn]struct{}
	closed bool
	delay  time.Duration
	wg     sync.WaitGroup
}

// Delay holds each byte d (each way) before passing it on, from now on;
// 0 passes them at once. Bytes are not held behind each other: a chunk
// read at T is written at T+d.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

func (p *Proxy) delayOf() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// Proxy starts a proxy in front of s, closed when the test ends.
func (s *Server) Proxy(t testing.TB) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: proxy: %v", err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{Endpoint: "http://" + ln.Addr().String(), ln: ln, target: strings.TrimPrefix(s.Endpoint, "http://"),
		open: open, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Client returns a client that reaches etcd through the proxy, closed when
// the test ends.
func (p *Proxy) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return client(t, p.Endpoint)
}

// Cut stops all traffic through the proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// Restore lets traffic pass again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// gate returns a channel closed while traffic passes.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	select {
	case <-p.open:
	default:
		close(p.open)
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
			if err != nil || !p.track(up) {
				c.Close()
				return
			}
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(up, c) }()
			go func() { defer wg.Done(); p.pipe(c, up) }()
			wg.Wait()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, up)
			p.mu.Unlock()
		}()
	}
}

// pipe copies src to dst, holding each chunk while the proxy is cut, and
// until the delay has passed since it was read.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	type chunk struct {
		at time.Time
		b  []byte
	}
	chunks, done := make(chan chunk, 64), make(chan struct{})
	defer close(done)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{time.Now(), bytes.Clone(buf[:n])}:
				case <-done:
					return
				}
			}
			if err != nil {
				return // EOF or a broken connection: close both sides
			}
		}
	}()
	for c := range chunks {
		if d := p.delayOf(); d > 0 {
			time.Sleep(time.Until(c.at.Add(d)))
		}
		<-p.gate()
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
