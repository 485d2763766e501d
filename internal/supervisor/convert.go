package supervisor

import (
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flotilla/flotilla/internal/driver"
	execdriver "github.com/flotilla/flotilla/internal/driver/exec"
	"github.com/flotilla/flotilla/internal/unit"
	"github.com/flotilla/flotilla/proto/supervisorpb"
)

func toPB(s unit.Status) *supervisorpb.UnitStatus {
	var since int64
	if !s.Since.IsZero() {
		since = s.Since.UnixNano()
	}
	return &supervisorpb.UnitStatus{
		Name: s.Name, Hash: s.Hash, Load: s.Load, Active: s.Active, Sub: s.Sub,
		Pid: int32(s.PID), SinceUnixNano: since, Result: s.Result, Message: s.Message, Health: s.Health,
	}
}

func fromPB(p *supervisorpb.UnitStatus, machine string) unit.Status {
	s := unit.Status{
		Name: p.GetName(), Hash: p.GetHash(), Machine: machine, Load: p.GetLoad(),
		Active: p.GetActive(), Sub: p.GetSub(), PID: int(p.GetPid()),
		Result: p.GetResult(), Message: p.GetMessage(), Health: p.GetHealth(),
	}
	if n := p.GetSinceUnixNano(); n != 0 {
		s.Since = time.Unix(0, n)
	}
	return s
}

// The driver's errors travel as gRPC codes and come back as the same
// sentinels, so callers of the client can test them with errors.Is.
var sentinels = []struct {
	err  error
	code codes.Code
}{
	{driver.ErrUnknownUnit, codes.NotFound},
	{execdriver.ErrStartLimitHit, codes.ResourceExhausted},
	{execdriver.ErrFenced, codes.FailedPrecondition},
	{execdriver.ErrClosed, codes.Aborted},
}

// toStatus turns a driver error into a gRPC status.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return status.Error(s.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// remoteError is a driver error as the supervisor reported it.
type remoteError struct {
	msg string
	err error // the sentinel, or nil
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// fromStatus turns an error of a call to the supervisor back into the
// driver's error; transport errors are wrapped as they are.
func fromStatus(op string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if st.Code() != codes.Unknown {
		for _, s := range sentinels {
			if s.code == st.Code() {
				return &remoteError{msg: st.Message(), err: s.err}
			}
		}
	}
	if st.Code() == codes.Unknown {
		return &remoteError{msg: st.Message()}
	}
	return &remoteError{msg: "supervisor: " + op + ": " + st.Message(), err: err}
}
