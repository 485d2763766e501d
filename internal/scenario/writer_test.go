package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
	"github.com/flotilla/flotilla/internal/waitfor"
)

// writerUnit is the unit whose desired state the writer toggles.
const writerUnit = "lw-state.service"

// writer writes through the API of every daemon in turn, one request at a
// time, while faults happen: it submits new units (lw-N.service, inactive:
// nothing runs) and toggles writerUnit between inactive and loaded. It
// remembers which writes were acknowledged, so that check lost-writes can
// find each in the final state (promise 1). A write answered with an
// error may or may not have landed, and is not held against the cluster.
type writer struct {
	s    *scenario
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	acked    []string // units whose creation was acknowledged
	ackState string   // the last acknowledged desired state of writerUnit
	// tried are the desired states of writerUnit attempted since the last
	// acknowledged one, which may have landed.
	tried  []string
	nOK    int
	nErr   int
	errors map[string]int
}

const writerFile = "[Service]\nExecStart=/bin/true\n"

func startWriter(s *scenario) (*writer, error) {
	w := &writer{s: s, stop: make(chan struct{}), done: make(chan struct{}), errors: map[string]int{}}
	// The unit it toggles must exist first; this write must succeed.
	err := s.ask(func(c *client.Client) error {
		_, err := c.PutUnit(context.Background(), apiv1.UnitChange{Name: writerUnit, File: writerFile, DesiredState: "inactive"})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("writer: creating %s: %w", writerUnit, err)
	}
	w.ackState = "inactive"
	go w.loop()
	return w, nil
}

func (w *writer) loop() {
	defer close(w.done)
	for i := 1; ; i++ {
		select {
		case <-w.stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		nodes := w.s.procs()
		var daemons []*proc
		for _, p := range nodes {
			if p.name != "etcd" {
				daemons = append(daemons, p)
			}
		}
		p := daemons[i%len(daemons)]
		if !p.running() {
			continue
		}
		c := p.client(3 * time.Second)
		ctx := context.Background()
		if i%2 == 0 {
			name := fmt.Sprintf("lw-%d.service", i)
			_, err := c.PutUnit(ctx, apiv1.UnitChange{Name: name, File: writerFile, DesiredState: "inactive"})
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, name)
			}
			w.count(p.name, err)
			w.mu.Unlock()
		} else {
			state := []string{"inactive", "loaded"}[(i/2)%2]
			w.mu.Lock()
			w.tried = append(w.tried, state)
			w.mu.Unlock()
			_, err := c.PutUnit(ctx, apiv1.UnitChange{Name: writerUnit, DesiredState: state})
			w.mu.Lock()
			if err == nil {
				w.ackState, w.tried = state, nil
			}
			w.count(p.name, err)
			w.mu.Unlock()
		}
	}
}

func (w *writer) count(node string, err error) {
	if err == nil {
		w.nOK++
		return
	}
	w.nErr++
	msg := err.Error()
	if len(msg) > 80 {
		msg = msg[:80]
	}
	w.errors[node+": "+msg]++
}

func (w *writer) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *writer) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d writes acknowledged, %d answered with an error", w.nOK, w.nErr)
	for _, k := range sortedKeys(w.errors) {
		fmt.Fprintf(&b, "\n    %dx %s", w.errors[k], k)
	}
	return b.String()
}

// check stops the writer and compares what was acknowledged with what the
// cluster holds, read through any daemon within a minute.
func (w *writer) check() string {
	w.close()
	var units []apiv1.Unit
	err := waitfor.Poll(60*time.Second, func() error {
		return w.s.ask(func(c *client.Client) error {
			l, err := c.Units(context.Background(), "lw-*")
			if err == nil {
				units = l.Units
			}
			return err
		})
	})
	if err != nil {
		return fmt.Sprintf("FAIL: could not read the final state: %v", err)
	}
	have := map[string]string{}
	for _, u := range units {
		have[u.Name] = u.DesiredState
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var missing []string
	for _, n := range w.acked {
		if _, ok := have[n]; !ok {
			missing = append(missing, n)
		}
	}
	var fails []string
	if len(w.acked) == 0 {
		fails = append(fails, "no write was acknowledged")
	}
	if len(missing) > 0 {
		fails = append(fails, fmt.Sprintf("%d acknowledged units missing: %s", len(missing), strings.Join(missing, ", ")))
	}
	if got := have[writerUnit]; got != w.ackState && !slices.Contains(w.tried, got) {
		fails = append(fails, fmt.Sprintf("%s is %q, but %q was acknowledged last (and %v tried since)", writerUnit, got, w.ackState, w.tried))
	}
	if len(fails) > 0 {
		return "FAIL: " + strings.Join(fails, "; ")
	}
	return "every acknowledged write is in the final state"
}
