package daemon

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/agent"
	"github.com/flotilla/flotilla/internal/api"
	"github.com/flotilla/flotilla/internal/fleetapi"
)

// refusal is whether the cluster refuses this daemon's machine: its name
// is held by another live daemon (another data dir), or its agent protocol
// is outside the leader's window (a rolling upgrade that skipped a
// release). Such a daemon stays up, as fleetd did: its agent tries again
// every agent.RefusedRetry and joins once the name is free (that daemon
// stopped, or renamed) or the versions fit (the leader or this machine
// upgraded); meanwhile its API answers 503 saying why, so that nothing
// mistakes it for a machine of the cluster.
type refusal struct {
	machine string
	log     *slog.Logger
	mu      sync.Mutex
	err     error // nil: not refused
}

// set is agent.Config.OnRefused: err is the refusal, nil once joined.
func (r *refusal) set(err error) {
	r.mu.Lock()
	was := r.err
	r.err = err
	r.mu.Unlock()
	switch {
	case err != nil && was == nil:
		r.log.Error(fmt.Sprintf("this daemon cannot join the cluster; it stays up, answers its API with 503, and tries again every %v", agent.RefusedRetry), "err", err)
	case err == nil && was != nil:
		r.log.Info("this daemon joined the cluster", "refused_before", was)
	}
}

func (r *refusal) current() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// gate answers 503 for h while the machine name is refused: every request
// but one another daemon forwarded (this daemon's engine may lead while
// its agent waits) and /metrics.
func (r *refusal) gate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		err := r.current()
		if err == nil || req.Header.Get(api.ForwardedHeader) != "" || req.URL.Path == "/metrics" {
			h.ServeHTTP(w, req)
			return
		}
		msg := fmt.Sprintf("this daemon has not joined the cluster as machine %q (it tries again every %v): %v", r.machine, agent.RefusedRetry, err)
		w.Header().Set("Retry-After", strconv.Itoa(int(agent.RefusedRetry.Seconds())))
		if fleetapi.Owns(req.URL.Path) {
			// fleetd's words in the same case, which fleet's tools look for.
			fleetapi.WriteError(w, http.StatusServiceUnavailable, "fleet server unable to communicate with etcd: "+msg)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		b, _ := json.Marshal(apiv1.Error{Error: msg, Code: "unavailable"})
		w.Write(append(b, '\n'))
	})
}
