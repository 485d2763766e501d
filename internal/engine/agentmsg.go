package engine

import (
	"fmt"
	"strings"

	"github.com/flotilla/flotilla/internal/limits"
	"github.com/flotilla/flotilla/internal/machine"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/agentpb"
)

// The checks of what agents send (the gRPC boundary, and presence keys in
// the etcd registry mode), made before anything reaches the term's state.
// A message that breaks one ends the agent's stream with InvalidArgument
// naming the limit; gRPC itself refuses a message over
// limits.EngineRecvBytes. Free text (a status's result and message) is cut
// to limits.StatusTextBytes instead (fromProto), so an agent whose driver
// wrote a long error is not locked out.

// checkHello checks an agent's first message.
func checkHello(h *agentpb.Hello) error {
	if h == nil || h.Machine == nil || h.Machine.Id == "" {
		return fmt.Errorf("the first message must be a Hello naming the machine")
	}
	if err := checkMachine(h.Machine); err != nil {
		return err
	}
	if n := len(h.Units); n > limits.AgentUnits {
		return fmt.Errorf("hello of machine %s: %d unit statuses; the limit is %d", h.Machine.Id, n, limits.AgentUnits)
	}
	for i, s := range h.Units {
		if err := checkStatus(s); err != nil {
			return fmt.Errorf("hello of machine %s: units[%d]: %w", h.Machine.Id, i, err)
		}
	}
	return nil
}

// checkMachine checks what a machine says of itself.
func checkMachine(m *agentpb.Machine) error {
	if err := machine.ValidateName(m.Id); err != nil {
		return err
	}
	for _, f := range [...]struct{ name, v string }{{"ip", m.Ip}, {"api_addr", m.ApiAddr}, {"version", m.Version}, {"instance", m.Instance}} {
		if len(f.v) > limits.MachineFieldBytes {
			return fmt.Errorf("machine %s: %s is %d bytes; the limit is %d", m.Id, f.name, len(f.v), limits.MachineFieldBytes)
		}
	}
	if err := machine.CheckMetadataCount(len(m.Metadata)); err != nil {
		return fmt.Errorf("machine %s: %w", m.Id, err)
	}
	for k, v := range m.Metadata {
		if err := machine.CheckMetadataPair(k, v); err != nil {
			return fmt.Errorf("machine %s: %w", m.Id, err)
		}
		if err := unit.ValidateMetadata(k, &v); err != nil {
			return fmt.Errorf("machine %s: %w", m.Id, err)
		}
	}
	if m.CpuPercent < 0 || m.CpuPercent > limits.MaxCPUPercent {
		return fmt.Errorf("machine %s: CPU capacity %d%% is outside 0 to %d%%", m.Id, m.CpuPercent, limits.MaxCPUPercent)
	}
	if m.MemoryBytes < 0 || m.MemoryBytes > limits.MaxMemoryBytes {
		return fmt.Errorf("machine %s: memory capacity %d bytes is outside 0 to %d", m.Id, m.MemoryBytes, int64(limits.MaxMemoryBytes))
	}
	return nil
}

// checkUpdate checks a status update.
func checkUpdate(u *agentpb.StatusUpdate) error {
	if n := len(u.Units); n > limits.AgentUnits {
		return fmt.Errorf("status update: %d unit statuses; the limit is %d", n, limits.AgentUnits)
	}
	if n := len(u.Removed); n > limits.AgentUnits {
		return fmt.Errorf("status update: %d removed units; the limit is %d", n, limits.AgentUnits)
	}
	for i, s := range u.Units {
		if err := checkStatus(s); err != nil {
			return fmt.Errorf("status update: units[%d]: %w", i, err)
		}
	}
	for i, name := range u.Removed {
		if err := unit.ValidateName(name); err != nil {
			return fmt.Errorf("status update: removed[%d]: %w", i, err)
		}
	}
	return nil
}

// checkStatus checks one unit's status.
func checkStatus(s *agentpb.UnitStatus) error {
	if err := unit.ValidateName(s.Name); err != nil {
		return err
	}
	for _, f := range [...]struct{ name, v string }{{"hash", s.Hash}, {"load", s.Load}, {"active", s.Active}, {"sub", s.Sub}, {"applied", s.Applied}, {"health", s.Health}} {
		if len(f.v) > limits.StatusFieldBytes {
			return fmt.Errorf("unit %s: %s is %d bytes; the limit is %d", s.Name, f.name, len(f.v), limits.StatusFieldBytes)
		}
	}
	return nil
}

// cutText cuts an agent's free text to limits.StatusTextBytes.
func cutText(s string) string {
	if len(s) <= limits.StatusTextBytes {
		return s
	}
	return strings.ToValidUTF8(s[:limits.StatusTextBytes-3], "") + "..."
}
