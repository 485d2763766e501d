package bench

import (
	"context"
	"fmt"
	"net/url"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/client"
)

// StopReport is what --stop measures once every unit is active: one
// request (per batch) setting every unit's desired state to loaded, as
// `flotilla stop 'bench@{1..N}.service'` does, and the time until the
// leader counts none of them active.
type StopReport struct {
	// RequestSeconds is how long the stop request took to be answered.
	RequestSeconds float64 `json:"request_seconds"`
	// AllStopped says the leader counted no unit active within the timeout;
	// SecondsToAllStopped is from the request until it did.
	AllStopped          bool     `json:"all_stopped"`
	SecondsToAllStopped *float64 `json:"seconds_to_all_stopped"`
	// StillActive is how many were active when the run gave up (0 when
	// AllStopped).
	StillActive int `json:"still_active"`
	// EngineCPUSeconds is what the engine spent from the request until all
	// stopped (or the timeout).
	EngineCPUSeconds float64 `json:"engine_cpu_seconds"`
	AgentCPUSeconds  float64 `json:"agent_cpu_seconds"`
	Error            string  `json:"error,omitempty"`
}

// stopBatches are the requests that stop what the start batches started:
// the same names, desired state loaded.
func stopBatches(start []apiv1.Batch) []apiv1.Batch {
	out := make([]apiv1.Batch, len(start))
	for i, b := range start {
		for _, u := range b.Units {
			out[i].Units = append(out[i].Units, apiv1.UnitChange{Name: u.Name, DesiredState: "loaded"})
		}
	}
	return out
}

// measureStop stops the run's units and waits until the leader counts
// none active, polling the count as waitActive does.
func measureStop(ctx context.Context, c *cluster, api *client.Client, base string, start []apiv1.Batch, prog *progress) (*StopReport, error) {
	before, err := c.stats()
	if err != nil {
		return nil, err
	}
	r := &StopReport{}
	// With --profile the stop has its own window: <registry>-stop-<process>-*.
	c.profileStart()
	prog.phase("stopping every unit (one request: desired state loaded)")
	t0 := time.Now()
	for _, b := range stopBatches(start) {
		if _, err := api.Batch(ctx, b); err != nil {
			r.Error = fmt.Sprintf("stop request: %v", err)
			r.RequestSeconds = round6(time.Since(t0).Seconds())
			return r, nil
		}
	}
	r.RequestSeconds = round6(time.Since(t0).Seconds())
	prog.phase("the stop request was answered in %.3f s", r.RequestSeconds)
	hc := c.tls.httpClient(2 * time.Minute)
	pattern := benchTemplate + "@*"
	if c.cfg.DistinctFiles {
		pattern = unitPrefix + "*"
	}
	countURL := base + "/v1/state?" + url.Values{"unit": {pattern}, "state": {"active"}, "limit": {"1"}}.Encode()
	deadline := t0.Add(c.cfg.Timeout)
	for {
		start := time.Now()
		n, err := countActive(ctx, hc, countURL)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil {
			r.StillActive = n
			prog.status("%s units still active after %.1f s", thousands(int64(n)), time.Since(t0).Seconds())
			if n == 0 {
				s := round3(time.Since(t0).Seconds())
				r.AllStopped, r.SecondsToAllStopped = true, &s
				break
			}
		}
		if err := c.failed(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			prog.phase("gave up after %v: %d units still active", c.cfg.Timeout, r.StillActive)
			break
		}
		pause := min(max(8*time.Since(start), 50*time.Millisecond), 2*time.Second)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
	}
	after, err := c.stats()
	if err != nil {
		return nil, err
	}
	if err := c.profileStopOf(ctx, c.profiled(), "stop"); err != nil {
		return nil, err
	}
	r.EngineCPUSeconds = round3((after.engineCPU - before.engineCPU).Seconds())
	r.AgentCPUSeconds = round3((after.agentCPU - before.agentCPU).Seconds())
	return r, nil
}
